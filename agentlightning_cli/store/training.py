"""Training records (migration m003): one row per optimizer step, one summary per trained round.

Kept beside store.py (which mixes these methods in) so that file stays about runs, episodes and calls.
Written by the trainer (train/round_step.py), read by `alight train` summaries and `alight inspect`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from agentlightning_cli.store.connection import write_transaction

_STEP_COLUMNS = ("loss", "reward_mean", "reward_std", "clip_fraction", "grad_norm", "tokens_per_s", "rows",
                 "merged_calls")


@dataclass(frozen=True)
class TrainStep:
    """Metrics of one optimizer step of one round's training. None where the trainer did not report it."""

    run_id: str
    round_idx: int
    step: int
    loss: float | None = None
    reward_mean: float | None = None
    reward_std: float | None = None
    clip_fraction: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    rows: int | None = None
    merged_calls: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # every other logged metric (entropy, lr, IS stats)
    at: float = 0.0  # time.time() when the step ended; 0 -> now, set on write


@dataclass(frozen=True)
class TrainRound:
    """What training did with one round's episodes: rows, merges and their breaks, drops, the adapter."""

    run_id: str
    round_idx: int
    rows: int
    calls: int
    steps: int
    seconds: float
    merge_rule: str
    break_reasons: dict[str, int]
    dropped: dict[str, int]
    adapter_dir: str | None
    base_adapter: str | None = None
    chat_template: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    finished_at: float = 0.0  # 0 -> now, set on write

    @property
    def calls_per_row(self) -> float:
        return self.calls / self.rows if self.rows else 0.0


class TrainingRecords:
    """Mixed into Store: needs `self._conn()`."""

    def _conn(self) -> sqlite3.Connection:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def add_train_steps(self, steps: list[TrainStep]) -> None:
        """Store step metrics in one transaction; a step already stored for (run, round, step) is replaced,
        so re-training a round after an interruption does not leave the old curve mixed in."""
        now = time.time()
        rows = [(s.run_id, s.round_idx, s.step, *(getattr(s, c) for c in _STEP_COLUMNS),
                 json.dumps(s.extra) if s.extra else None, s.at or now) for s in steps]
        sql = (f"INSERT OR REPLACE INTO train_steps (run_id, round_idx, step, {', '.join(_STEP_COLUMNS)}, extra, at)"
               f" VALUES ({', '.join('?' * (len(_STEP_COLUMNS) + 5))})")
        write_transaction(self._conn(), lambda c: c.executemany(sql, rows))

    def clear_train_steps(self, run_id: str, round_idx: int) -> None:
        """Forget a round's step metrics (the trainer calls this before training the round again)."""
        write_transaction(self._conn(), lambda c: c.execute(
            "DELETE FROM train_steps WHERE run_id = ? AND round_idx = ?", (run_id, round_idx)))

    def list_train_steps(self, run_id: str, round_idx: int | None = None) -> list[TrainStep]:
        """Steps of a run (or one round of it), ordered by round then step: a loss curve per round."""
        sql, args = "SELECT * FROM train_steps WHERE run_id = ?", [run_id]
        if round_idx is not None:
            sql, args = sql + " AND round_idx = ?", [*args, round_idx]
        return [_step(r) for r in self._conn().execute(sql + " ORDER BY round_idx, step", args)]

    def put_train_round(self, summary: TrainRound) -> None:
        """Store (or replace) the summary of a round's training."""
        s = summary
        write_transaction(self._conn(), lambda c: c.execute(
            "INSERT OR REPLACE INTO train_rounds (run_id, round_idx, rows, calls, steps, seconds, merge_rule,"
            " break_reasons, dropped, adapter_dir, base_adapter, chat_template, detail, finished_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (s.run_id, s.round_idx, s.rows, s.calls, s.steps, s.seconds, s.merge_rule, json.dumps(s.break_reasons),
             json.dumps(s.dropped), s.adapter_dir, s.base_adapter, s.chat_template, json.dumps(s.detail),
             s.finished_at or time.time())))

    def get_train_round(self, run_id: str, round_idx: int) -> TrainRound | None:
        row = self._conn().execute("SELECT * FROM train_rounds WHERE run_id = ? AND round_idx = ?",
                                   (run_id, round_idx)).fetchone()
        return None if row is None else _round(row)

    def list_train_rounds(self, run_id: str) -> list[TrainRound]:
        rows = self._conn().execute("SELECT * FROM train_rounds WHERE run_id = ? ORDER BY round_idx", (run_id,))
        return [_round(r) for r in rows]


def _step(row: sqlite3.Row) -> TrainStep:
    return TrainStep(run_id=row["run_id"], round_idx=row["round_idx"], step=row["step"],
                     **{c: row[c] for c in _STEP_COLUMNS},
                     extra=json.loads(row["extra"]) if row["extra"] else {}, at=row["at"])


def _round(row: sqlite3.Row) -> TrainRound:
    return TrainRound(run_id=row["run_id"], round_idx=row["round_idx"], rows=row["rows"], calls=row["calls"],
                      steps=row["steps"], seconds=row["seconds"], merge_rule=row["merge_rule"],
                      break_reasons=json.loads(row["break_reasons"]), dropped=json.loads(row["dropped"]),
                      adapter_dir=row["adapter_dir"], base_adapter=row["base_adapter"],
                      chat_template=row["chat_template"], detail=json.loads(row["detail"] or "{}"),
                      finished_at=row["finished_at"])
