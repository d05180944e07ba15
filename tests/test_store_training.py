"""Training records (m003): per-step metrics and per-round summaries round-trip, replace, and order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentlightning_cli.store import Store, TrainRound, TrainStep


def test_migration_adds_training_tables_to_an_older_file(tmp_path: Path):
    with Store.open(tmp_path) as store:
        run = store.create_run("r", {})
    with sqlite3.connect(tmp_path / "alight.db") as conn:  # as a file written before m003 looks
        conn.execute("DROP TABLE train_steps")
        conn.execute("DROP TABLE train_rounds")
        conn.execute("DELETE FROM _alight_migrations WHERE name = 'm003_training'")
    with Store.open(tmp_path) as store:
        assert store.get_run("r") == run
        store.add_train_steps([TrainStep(run.id, 0, 1, loss=0.5)])
        assert [s.loss for s in store.list_train_steps(run.id)] == [0.5]


def test_steps_round_trip_in_round_and_step_order(tmp_path: Path):
    with Store.open(tmp_path) as store:
        run = store.create_run("r", {})
        other = store.create_run("o", {})
        full = TrainStep(run.id, 1, 1, loss=-0.25, reward_mean=0.4, reward_std=0.1, clip_fraction=0.05,
                         grad_norm=1.5, tokens_per_s=812.0, rows=8, merged_calls=20,
                         extra={"entropy": 2.5, "learning_rate": 1e-4}, at=123.0)
        store.add_train_steps([TrainStep(run.id, 1, 2, loss=0.1), full, TrainStep(run.id, 0, 1)])
        store.add_train_steps([TrainStep(other.id, 0, 1, loss=9.0)])
        steps = store.list_train_steps(run.id)
        assert [(s.round_idx, s.step) for s in steps] == [(0, 1), (1, 1), (1, 2)]
        assert steps[1] == full
        assert steps[0].loss is None and steps[0].extra == {} and steps[0].at > 0
        assert [s.step for s in store.list_train_steps(run.id, round_idx=1)] == [1, 2]
        # retraining a round replaces its steps rather than mixing two curves
        store.add_train_steps([TrainStep(run.id, 1, 1, loss=7.0)])
        assert store.list_train_steps(run.id, 1)[0].loss == 7.0
        store.clear_train_steps(run.id, 1)
        assert store.list_train_steps(run.id, 1) == []
        assert [s.loss for s in store.list_train_steps(other.id)] == [9.0]


def test_round_summary_round_trips_and_is_replaced(tmp_path: Path):
    with Store.open(tmp_path) as store:
        run = store.create_run("r", {})
        summary = TrainRound(run.id, 0, rows=4, calls=10, steps=2, seconds=3.5, merge_rule="strict",
                             break_reasons={"edited": 2, "template": 1}, dropped={"zero_variance_groups": 1},
                             adapter_dir="/x/adapters/round-1", base_adapter=None, chat_template="model",
                             detail={"lr": 1e-4}, finished_at=5.0)
        store.put_train_round(summary)
        assert store.get_train_round(run.id, 0) == summary
        assert summary.calls_per_row == 2.5
        again = TrainRound(run.id, 0, rows=5, calls=5, steps=1, seconds=1.0, merge_rule="splice",
                           break_reasons={}, dropped={}, adapter_dir=None)
        store.put_train_round(again)
        store.put_train_round(TrainRound(run.id, 1, rows=1, calls=1, steps=1, seconds=1.0, merge_rule="strict",
                                         break_reasons={}, dropped={}, adapter_dir=None))
        got = store.list_train_rounds(run.id)
        assert [(r.round_idx, r.rows, r.merge_rule) for r in got] == [(0, 5, "splice"), (1, 1, "strict")]
        assert got[0].finished_at > 0 and store.get_train_round(run.id, 7) is None


def test_steps_need_an_existing_run(tmp_path: Path):
    with Store.open(tmp_path) as store, pytest.raises(sqlite3.IntegrityError):
        store.add_train_steps([TrainStep("run-missing", 0, 1)])
