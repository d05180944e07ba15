"""`alight inspect` for scripts, through the real CLI in subprocesses: list/show --json shapes, HAR 1.2 export
(structure checked field by field, then read back by mitmproxy's mitmdump), JSONL export, stats and the PNG."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from agentlightning_cli.store import Store
from agentlightning_cli.testing.inspect_store import build_demo_run
from tests.mitm_support import mitmdump

EPISODE_KEYS = {"object", "id", "run", "run_id", "round", "round_id", "task_id", "attempt", "harness", "status",
                "outcome", "reward", "reward_detail", "exit_code", "error", "workspace", "created_at", "started_at",
                "ended_at", "duration_s", "calls", "failed_calls", "prompt_tokens", "completion_tokens"}
CALL_KEYS = {"object", "id", "episode_id", "seq", "protocol", "method", "path", "status", "http_status", "stream",
             "client_model", "model", "finish_reason", "usage", "sampling", "dropped", "error", "started_at",
             "first_byte_at", "ended_at", "duration_s", "ttfb_s", "prompt_tokens", "completion_tokens",
             "prompt_base_seq", "prompt_prefix_len", "request_bytes", "response_bytes"}


@pytest.fixture
def demo(tmp_path: Path):
    return build_demo_run(tmp_path / "runs" / "demo")


def alight(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], cwd=cwd, capture_output=True,
                            text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_list_json_shape_filters_and_table(demo, tmp_path: Path):
    episodes = json.loads(alight(tmp_path, "inspect", "list", "--json").stdout)
    assert [e["id"] for e in episodes] == demo.episodes
    assert all(set(e) == EPISODE_KEYS and e["object"] == "episode" and e["run"] == "demo" for e in episodes)
    failed = next(e for e in episodes if e["id"] == demo.failed)
    assert (failed["status"], failed["outcome"], failed["reward"], failed["round"]) == ("failed", "harness_error", None, 1)
    assert failed["calls"] == 2 and failed["failed_calls"] == 1
    with Store.open(demo.run_dir) as store:
        calls = store.get_calls(demo.episodes[0])
    assert episodes[0]["prompt_tokens"] == sum(len(c.prompt_token_ids) for c in calls)
    assert episodes[0]["completion_tokens"] == sum(len(c.completion_token_ids) for c in calls)

    only = json.loads(alight(tmp_path, "inspect", "list", "demo", "--round", "1", "--status", "failed", "--json").stdout)
    assert [e["id"] for e in only] == [demo.failed]
    by_task = json.loads(alight(tmp_path, "inspect", "list", str(demo.run_dir), "--task", "fix-add", "--json").stdout)
    assert len(by_task) == 6 and {e["task_id"] for e in by_task} == {"fix-add"}
    table = alight(tmp_path, "inspect", "list").stdout.splitlines()
    assert table[0].split()[:3] == ["id", "round", "task"] and len(table) == 13
    assert "harness_error" in next(line for line in table if demo.failed in line)


def test_show_episode_and_call_json_shapes(demo, tmp_path: Path):
    ep = json.loads(alight(tmp_path, "inspect", "show", demo.broken_prefix_episode, "--json").stdout)
    assert EPISODE_KEYS <= set(ep) and ep["object"] == "episode"
    assert [c["seq"] for c in ep["calls"]] == [0, 1, 2, 3]
    assert all(set(c) == CALL_KEYS | {"helper"} for c in ep["calls"])
    # No harness model recorded (a run before helper labels): no call is a helper.
    assert ep["harness_model"] is None and not any(c["helper"] for c in ep["calls"])
    rows = ep["rows"]["rows"]
    assert [r["calls"] for r in rows] == [[0, 1], [2], [3]] and rows[0]["break"] is None
    assert rows[1]["break"]["matched"] == 10 and "diverges" in rows[1]["break"]["reason"]
    assert rows[0]["object"] == "row" and rows[0]["tokens"] == ep["calls"][1]["prompt_tokens"] + ep["calls"][1][
        "completion_tokens"]

    call = json.loads(alight(tmp_path, "inspect", "show", demo.streamed_call, "--json").stdout)
    assert CALL_KEYS <= set(call) and call["protocol"] == "anthropic-messages" and call["stream"] is True
    assert call["tools"] == ["Bash"] and call["messages"][0] == {"role": "system", "kind": "text", "text": call[
        "messages"][0]["text"]}
    assert {"role": "assistant", "kind": "tool_call", "text": '{"command": "cat calc.py"}', "name": "bash",
            "call_id": "call_2_0"} in call["reply"]
    assert "raw" not in call
    raw = json.loads(alight(tmp_path, "inspect", "show", demo.streamed_call, "--json", "--raw").stdout)["raw"]
    with Store.open(demo.run_dir) as store:
        stored = store.get_call(demo.streamed_call)
    assert raw["client_request"].encode() == stored.client_request and raw["response"].encode() == stored.response
    assert raw["prompt_token_ids"] == stored.prompt_token_ids and raw["completion_logprobs"] == stored.completion_logprobs

    text = alight(tmp_path, "inspect", "show", demo.streamed_call).stdout
    assert "assistant · tool call bash" in text and "dropped by translation" in text
    missing = alight(tmp_path, "inspect", "show", "ep-nope", check=False)
    assert missing.returncode == 1 and "no episode or call 'ep-nope'" in missing.stderr and "hint:" in missing.stderr
    bad_run = alight(tmp_path, "inspect", "list", "nope", check=False)
    assert bad_run.returncode == 1 and "no run 'nope'" in bad_run.stderr


def check_har(doc: dict) -> None:
    """HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/): every required field, with its type."""
    log = doc["log"]
    assert log["version"] == "1.2" and isinstance(log["creator"]["name"], str) and isinstance(log["creator"]["version"], str)
    page_ids = set()
    for page in log.get("pages", []):
        datetime.fromisoformat(page["startedDateTime"])
        assert isinstance(page["id"], str) and isinstance(page["title"], str) and isinstance(page["pageTimings"], dict)
        page_ids.add(page["id"])
    for entry in log["entries"]:
        datetime.fromisoformat(entry["startedDateTime"])
        assert entry["pageref"] in page_ids
        assert isinstance(entry["time"], (int, float)) and entry["time"] >= 0
        req, resp = entry["request"], entry["response"]
        assert isinstance(req["method"], str) and req["url"].startswith("http://") and req["httpVersion"]
        for field in ("cookies", "headers", "queryString"):
            assert isinstance(req[field], list)
        assert all(set(h) == {"name", "value"} for h in req["headers"])
        assert isinstance(req["postData"]["mimeType"], str) and isinstance(req["postData"]["text"], str)
        assert req["headersSize"] == -1 and req["bodySize"] >= 0
        assert isinstance(resp["status"], int) and isinstance(resp["statusText"], str) and resp["httpVersion"]
        assert isinstance(resp["cookies"], list) and isinstance(resp["headers"], list)
        assert resp["content"]["size"] >= 0 and isinstance(resp["content"]["mimeType"], str)
        assert resp["redirectURL"] == "" and resp["headersSize"] == -1 and resp["bodySize"] >= 0
        assert isinstance(entry["cache"], dict)
        t = entry["timings"]
        assert all(t[k] >= 0 for k in ("send", "wait", "receive"))
        assert all(t.get(k, -1) >= -1 for k in ("blocked", "dns", "connect", "ssl"))
        assert abs(t["send"] + t["wait"] + t["receive"] - entry["time"]) < 0.01


def test_har_export_is_har_1_2_and_mitmproxy_reads_every_entry(demo, tmp_path: Path):
    out = tmp_path / "run.har"
    alight(tmp_path, "inspect", "export", "demo", "--format", "har", "--out", str(out))
    doc = json.loads(out.read_text())
    check_har(doc)
    with Store.open(demo.run_dir) as store:
        calls = [c for ep in demo.episodes for c in store.get_calls(ep)]
    entries = doc["log"]["entries"]
    assert [e["_alight"]["call_id"] for e in entries] == [c.id for c in calls]
    for entry, call in zip(entries, calls):  # the bytes the client sent and saw, exactly
        assert entry["request"]["postData"]["text"].encode() == call.client_request
        assert entry["response"]["content"]["text"].encode() == call.response
        assert entry["response"]["status"] == call.http_status
        assert entry["request"]["url"].endswith(f"/e/{call.episode_id}{call.path}")
        assert entry["_alight"]["prompt_tokens"] == (len(call.prompt_token_ids) if call.prompt_token_ids else None)
    streamed = next(e for e in entries if e["_alight"]["call_id"] == demo.streamed_call)
    assert streamed["response"]["content"]["mimeType"] == "text/event-stream"
    assert streamed["_alight"]["task_id"] == "fix-add" and streamed["_alight"]["round"] == 0
    assert len(doc["log"]["pages"]) == len(demo.episodes)

    # mitmproxy (its own Python >= 3.12 virtualenv) reads the file and lists every entry with its status.
    listed = subprocess.run([mitmdump(), "-n", "-r", str(out)], capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    requests = [line for line in lines if " POST http://127.0.0.1:8400/e/" in line]
    statuses = [line.split("<<")[1].split()[0] for line in lines if "<<" in line]
    assert len(requests) == len(calls) and statuses == [str(c.http_status) for c in calls], listed.stdout[-2000:]


def test_jsonl_export_has_token_ids_logprobs_and_episode_context(demo, tmp_path: Path):
    lines = alight(tmp_path, "inspect", "export", "--format", "jsonl", "--round", "0").stdout.splitlines()
    with Store.open(demo.run_dir) as store:
        round0 = [s.episode.id for s in store.episode_summaries() if s.round_index == 0]
        calls = [c for ep in round0 for c in store.get_calls(ep)]
    rows = [json.loads(line) for line in lines]
    assert len(rows) == len(calls) == 16
    for row, call in zip(rows, calls):
        assert CALL_KEYS <= set(row) and row["id"] == call.id
        assert row["prompt_token_ids"] == call.prompt_token_ids and row["completion_logprobs"] == call.completion_logprobs
        assert row["episode"]["round"] == 0 and row["episode"]["id"] == call.episode_id
        assert row["messages"] and row["reply"]


def test_stats_json_sparkline_and_png(demo, tmp_path: Path):
    stats = json.loads(alight(tmp_path, "inspect", "stats", "--json").stdout)
    assert stats["object"] == "stats" and stats["run"] == "demo"
    r0, r1, r2 = stats["rounds"]
    assert [r["round"] for r in stats["rounds"]] == [0, 1, 2] and r0["object"] == "round_stats"
    assert (r0["episodes"], r0["rewarded"], r0["reward_mean"], r0["reward_std"]) == (4, 4, 0.5, 0.5)
    assert r0["k"] == 2 and r0["tasks"]["fix-add"] == {"attempts": 2, "solved": 1, "reward_mean": 0.5,
                                                       "pass_at_1": 0.5, "pass_at_k": 1.0}
    assert r1["outcomes"] == {"finished": 3, "harness_error": 1} and r1["statuses"]["failed"] == 1
    assert r1["train"]["steps"] == 5 and r2["train"] is None and r2["statuses"] == {"done": 2, "running": 2}
    assert len(stats["train_steps"]) == 10 and stats["train_steps"][0] == {
        "round": 0, "step": 1, "loss": 0.9, "reward_mean": 0.4, "reward_std": 0.3, "grad_norm": None,
        "clip_fraction": None, "tokens_per_s": None, "rows": 4, "merged_calls": 12}

    text = alight(tmp_path, "inspect", "stats").stdout
    assert "reward per round" in text and any(ch in text for ch in "▁▂▃▄▅▆▇█")
    png = tmp_path / "plots" / "curves.png"
    alight(tmp_path, "inspect", "stats", "demo", "--plot", str(png))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_runs_json(demo, tmp_path: Path):
    runs = json.loads(alight(tmp_path, "inspect", "runs", "--json").stdout)
    assert runs == [{"object": "run", "id": demo.run_id, "name": "demo", "dir": "runs/demo", "status": "running",
                     "created_at": runs[0]["created_at"], "rounds": 3, "episodes": 12,
                     "config": {"harness": "mixed", "rounds": 3}}]


def test_swebench_predictions_one_per_instance(demo, tmp_path: Path):
    with Store.open(demo.run_dir) as store:
        summaries = store.episode_summaries()
        round0 = [s for s in summaries if s.round_index == 0]
        for s in round0:
            patch = f"diff --git a/{s.episode.task_id}.py b/{s.episode.task_id}.py\n# attempt {s.episode.attempt}\n"
            if s.episode.attempt == 0 and s.episode.task_id == round0[0].episode.task_id:
                store.set_patch(s.episode.id, None, 3, 20_000_000, "the agent's patch is 20,000,000 bytes, over the"
                                                                   " 16,777,216-byte limit: not kept")
            else:
                store.set_patch(s.episode.id, patch.encode(), 1, len(patch))
    twice = alight(tmp_path, "inspect", "export", "demo", "--format", "swebench", check=False)
    assert twice.returncode != 0 and "one prediction per instance id" in twice.stderr and "--attempt" in twice.stderr
    one = alight(tmp_path, "inspect", "export", "demo", "--format", "swebench", "--round", "0", "--attempt", "1")
    lines = [json.loads(x) for x in one.stdout.splitlines()]
    assert sorted(x["instance_id"] for x in lines) == sorted({s.episode.task_id for s in round0})
    assert all(x["model_patch"].endswith("# attempt 1\n") and x["model_name_or_path"] == "alight/demo" for x in lines)
    first = alight(tmp_path, "inspect", "export", "demo", "--format", "swebench", "--round", "0", "--attempt", "0")
    assert len(first.stdout.splitlines()) == 1 and "left out 1 episode(s): patch not kept" in first.stderr
    shown = json.loads(alight(tmp_path, "inspect", "show", round0[0].episode.id, "--json").stdout)
    assert shown["patch"]["text"] is None and "not kept" in shown["patch"]["error"]
    assert "patch: the agent's patch is 20,000,000 bytes" in alight(tmp_path, "inspect", "show", round0[0].episode.id).stdout
    refused = alight(tmp_path, "inspect", "show", round0[0].episode.id, "--patch", check=False)
    assert refused.returncode != 0 and "was not kept" in refused.stderr
