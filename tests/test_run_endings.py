"""`alight run`: every ending gets its own status and the run goes on (e); bad input is a clear error before
anything starts (f). Real mini-SWE-agent, real proxy, scripted upstream."""

from __future__ import annotations

import json

import pytest

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import run_support as rs


def test_each_ending_has_its_own_status_and_the_run_goes_on(tmp_path):
    rs.ensure_mini()
    tasks = rs.calc_task_set(tmp_path, [
        {"id": "ok", "prompt": "FIX: fix add"},
        {"id": "slow", "prompt": "SLOW: think", "timeout_s": 4},
        {"id": "chatty", "prompt": "LOOP: keep going"},
        {"id": "no-repo", "prompt": "FIX", "repo": f"file://{tmp_path}/missing.git"},
        {"id": "bad-setup", "prompt": "FIX", "setup": ["echo preparing; echo broken-dependency >&2; exit 3"]},
        {"id": "hang-reward", "prompt": "FIX", "reward": "sleep 60"},
        {"id": "garbage-reward", "prompt": "FIX", "reward": "echo '{\"reward\": lots'"},
    ])

    def first(text: str) -> str:
        if "SLOW" in text:
            return "sleep 30"
        if "LOOP" in text:
            return "true"
        return "sed -i 's/a - b/a + b/' calc.py"

    def reply(body: dict) -> dict:
        if "LOOP" in json.dumps(body.get("messages")):  # never submits: runs into the call budget
            return rs.shell_call("mini-swe-agent", "true")
        return rs.mini_script(first)(body)

    with FakeVLLM(FakeScript(reply=reply, served_models=["policy-r0"])) as fake:
        out = tmp_path / "runs" / "e"
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", "1",
                          "--concurrency", "3", "--upstream", fake.url, "--out", str(out), "--max-calls", "3",
                          "--reward-timeout", "2", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    store, episodes = rs.read_store(out)
    try:
        by = {e.task_id: e for e in episodes}
        assert len(episodes) == 7
        assert (by["ok"].status, by["ok"].outcome, by["ok"].reward) == ("done", "finished", 1.0)
        # A timeout and a budget stop still get their reward (the workspace exists); the outcome is beside it.
        assert (by["slow"].status, by["slow"].outcome, by["slow"].reward) == ("done", "timeout", 0.0)
        assert (by["chatty"].status, by["chatty"].outcome, by["chatty"].reward) == ("done", "budget_exceeded", 0.0)
        assert by["no-repo"].status == "setup_failed" and "cannot fetch" in by["no-repo"].error
        assert by["no-repo"].reward is None
        bad = by["bad-setup"]
        assert bad.status == "setup_failed" and bad.reward is None
        assert "exit 3" in bad.error and "broken-dependency" in bad.error  # the command and its output tail
        hang = by["hang-reward"]
        assert hang.status == "reward_error" and hang.reward is None and "limit" in hang.error
        garbage = by["garbage-reward"]
        assert garbage.status == "reward_error" and garbage.reward is None and "lots" in garbage.error
        assert "lots" in garbage.reward_detail["stdout_tail"]
    finally:
        store.close()
    assert summary["statuses"] == {"done": 3, "setup_failed": 2, "reward_error": 2}
    assert summary["outcomes"]["timeout"] == 1 and summary["outcomes"]["budget_exceeded"] == 1


@pytest.mark.parametrize("make, args, message", [
    (lambda d: d / "absent.jsonl", [], "absent.jsonl"),
    (lambda d: _write(d, '{"id": "a", "prompt": "p", "reward": "true"}\n{"id": "b", "prompt": "p"\n'), [], ":2"),
    (lambda d: _write(d, '{"id": "a", "prompt": "p"}\n'), [], "reward"),
    (lambda d: _write(d, '{"id": "a", "prompt": "p", "reward": "true", "repo": "nowhere"}\n'), [], "nowhere"),
    (lambda d: _write(d, '{"id": "a", "prompt": "p", "reward": "true"}\n'), ["--tasks", "a,zzz"], "zzz"),
    (lambda d: _write(d, '{"id": "a", "prompt": "p", "reward": "true"}\n'), ["--attempts", "0"], "--attempts"),
    (lambda d: _write(d, '{"id": "a", "prompt": "p", "reward": "true"}\n'), ["--harness", "nope"], "unknown harness"),
    (lambda d: _write(d, '{"id": "a", "prompt": "p", "reward": "true"}\n'), ["--rounds", "3"], "--rounds"),
    (lambda d: _write(d, ""), [], "file is empty"),
])
def test_bad_input_is_a_clear_error_before_anything_starts(tmp_path, make, args, message):
    path = make(tmp_path)
    harness = ["--harness", "mini-swe-agent"] if "--harness" not in args else []
    proc = rs.alight(["run", "--task-set", str(path), *harness, *args, "--upstream", "http://127.0.0.1:9",
                      "--out", str(tmp_path / "runs" / "x")], cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started or written


def _write(d, text: str):
    path = d / "set.jsonl"
    path.write_text(text)
    return path
