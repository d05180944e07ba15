"""`alight run --seed S`: the seed reaches sampling. Each episode's chat call goes upstream with the seed derived
from (S, episode id, call index), recorded in the stored call's sampling; without --seed no seed is added."""

from __future__ import annotations

import json

from agentlightning_cli.proxy.control import episode_seed
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import run_support as rs
from tests.test_run_external import _recipe


def _run(tmp_path, name, extra):
    tasks = rs.calc_task_set(tmp_path, [{"id": "calc", "prompt": "Fix add() in calc.py."}])
    recipe = _recipe(tmp_path, "fixer", True)
    with FakeVLLM(FakeScript(turns=["I will fix it."], served_models=["policy-r0"])) as fake:
        out = tmp_path / "runs" / name
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "2",
                          "--upstream", fake.url, "--out", str(out), "--json", *extra], cwd=tmp_path)
        # The episodes' calls (the run's one-token probe of the upstream is not an episode's call).
        sent = [body.get("seed") for body in fake.requests if "calc.py" in json.dumps(body["messages"])]
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["statuses"] == {"done": 2}
    store, episodes = rs.read_store(out)
    try:
        return sent, {ep.id: store.get_calls(ep.id) for ep in episodes}
    finally:
        store.close()


def test_run_seed_reaches_every_call_and_is_recorded(tmp_path):
    sent, calls = _run(tmp_path, "seeded", ["--seed", "5"])
    assert len(calls) == 2 and all(len(c) == 1 for c in calls.values())
    recorded = {ep: c[0].sampling["seed"] for ep, c in calls.items()}
    assert recorded == {ep: episode_seed(5, ep, 0) for ep in calls}
    assert len(set(recorded.values())) == 2  # the two attempts of the task sample differently
    assert sorted(sent) == sorted(recorded.values())  # what the upstream received


def test_run_without_seed_sends_none(tmp_path):
    sent, calls = _run(tmp_path, "unseeded", [])
    assert sent == [None, None]
    assert all("seed" not in c[0].sampling for c in calls.values())
