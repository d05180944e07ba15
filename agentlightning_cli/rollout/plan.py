"""Which episodes a round still needs: deterministic ids, and what a rerun keeps, redoes or skips.

An episode id is a function of (run, round, task, attempt, try), so running the same command again finds
the episodes it made before. An episode that reached an ending (`FINAL`) is kept and never run again; one
that was still pending or running when the last run stopped is marked `abandoned` (its recorded calls stay,
untouched) and the slot is run again under the next try's id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable

FINAL = ("done", "setup_failed", "reward_error")
"""Episode statuses that end a slot: done (reward stored), setup_failed (no workspace, no reward),
reward_error (the reward command failed; its output is stored)."""
ABANDONED = "abandoned"
"""A previous run stopped while this episode was pending or running; its slot was redone."""


def episode_id(run_id: str, round_index: int | str, task_id: str, attempt: int, retry: int = 0) -> str:
    """`ep-<16 hex>` (+ `.<retry>`): only characters the proxy's URL route accepts, whatever the task id.
    `round_index`: a training round's index, or `eval-<n>` for an evaluation round (rollout/evaluation.py)."""
    digest = hashlib.blake2b(f"{run_id}\0{round_index}\0{task_id}\0{attempt}".encode(), digest_size=8).hexdigest()
    return f"ep-{digest}" + (f".{retry}" if retry else "")


@dataclass(frozen=True)
class Slot:
    """One task attempt to run: its episode id for this try."""

    task: Any
    attempt: int
    episode_id: str


@dataclass
class Plan:
    todo: list[Slot]
    kept: list[Any]
    """Episodes already final from an earlier run of this command (counted in the summary)."""
    abandon: list[str]
    """Episode ids an earlier run left pending/running: to be marked abandoned before the round starts."""


def plan_round(run_id: str, round_index: int | str, tasks: Iterable[Any], attempts: int, existing: Iterable[Any]) -> Plan:
    """Slots for tasks x attempts, given the episodes this round already has in the store."""
    by_slot: dict[tuple[str, int], list[Any]] = {}
    for ep in existing:
        by_slot.setdefault((ep.task_id, ep.attempt), []).append(ep)
    todo, kept, abandon = [], [], []
    for task in tasks:
        for attempt in range(attempts):
            eps = by_slot.get((task.id, attempt), [])
            final = [e for e in eps if e.status in FINAL]
            if final:
                kept.append(final[0])
                continue
            abandon += [e.id for e in eps if e.status != ABANDONED]
            todo.append(Slot(task, attempt, episode_id(run_id, round_index, task.id, attempt, retry=len(eps))))
    return Plan(todo, kept, abandon)
