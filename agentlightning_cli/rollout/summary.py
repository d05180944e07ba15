"""The end-of-round summary: per task attempts, mean reward, pass@1 and pass@k; counts per status/outcome.

pass@k is the unbiased estimator 1 - C(n-c, k) / C(n, k) over a task's n scored attempts, c of them solved
(reward >= 1.0); k is the number of attempts asked for. Episodes without a reward (setup_failed,
reward_error) count as attempts that did not pass: a broken setup is not a solved task.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

SOLVED = 1.0


def pass_at_k(n: int, c: int, k: int) -> float | None:
    if n == 0 or k <= 0:
        return None
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class TaskSummary:
    task_id: str
    attempts: int
    solved: int
    mean_reward: float | None
    pass_at_1: float | None
    pass_at_k: float | None


@dataclass
class RoundSummary:
    run: str
    round: int
    k: int
    episodes: int
    mean_reward: float | None
    tasks: list[TaskSummary]
    statuses: dict[str, int]
    outcomes: dict[str, int]
    calls: int = 0
    trainable: bool = True
    """False when the upstream gave no token ids (e.g. a hosted API): these calls cannot be trained on."""
    notes: list[str] = field(default_factory=list)
    sandbox: str | None = "bwrap"
    """Where the round's episodes ran, as each one's runner recorded it: `bwrap` (sandboxed), `none` (on the host,
    chosen explicitly), both joined by ", " when a resumed round mixed them; None when no harness ran."""
    history: dict[str, int] | None = None
    """Workspaces whose repository held history past the task's base commit, left out (tasks/history.py):
    episodes, tasks, and per task the refs and objects removed; None when no workspace's was."""
    evaluations: list[dict[str, Any]] | None = None
    """`--eval-task-set`: the held-out curve, one entry per evaluation round (rollout/heldout.evaluation); None
    when the run evaluates nothing."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(run_name: str, round_index: int, k: int, episodes: Iterable[Any], calls: int = 0,
              trainable: bool = True, notes: list[str] | None = None, order: list[str] | None = None) -> RoundSummary:
    """`episodes`: the round's final episodes (store rows: task_id, status, outcome, reward); tasks are listed in
    `order` (the task set's) where given."""
    rank = {task_id: i for i, task_id in enumerate(order or [])}
    eps = sorted(episodes, key=lambda e: (rank.get(e.task_id, len(rank)), e.task_id, e.attempt))
    by_task: dict[str, list[Any]] = {}
    for ep in eps:
        by_task.setdefault(ep.task_id, []).append(ep)
    tasks = []
    for task_id, group in by_task.items():
        rewards = [e.reward for e in group if e.reward is not None]
        solved = sum(1 for r in rewards if r >= SOLVED)
        tasks.append(TaskSummary(
            task_id=task_id, attempts=len(group), solved=solved,
            mean_reward=_mean(rewards), pass_at_1=pass_at_k(len(group), solved, 1),
            pass_at_k=pass_at_k(len(group), solved, k)))
    rewards = [e.reward for e in eps if e.reward is not None]
    return RoundSummary(
        run=run_name, round=round_index, k=k, episodes=len(eps), mean_reward=_mean(rewards), tasks=tasks,
        statuses=dict(Counter(e.status for e in eps)), outcomes=dict(Counter(e.outcome or "none" for e in eps)),
        calls=calls, trainable=trainable, notes=list(notes or []), sandbox=sandbox_modes(eps),
        history=history_removed(eps))


def history_removed(episodes: Iterable[Any]) -> dict[str, int] | None:
    """What the episodes' workspaces left out of their repositories (each episode's record, `history`): every
    attempt at a task has the same, so refs and objects are counted once per task."""
    per_task: dict[str, dict] = {}
    episodes_scrubbed = 0
    for ep in episodes:
        seen = (getattr(ep, "outcome_detail", None) or {}).get("history")
        if isinstance(seen, dict) and seen.get("scrubbed"):
            episodes_scrubbed += 1
            per_task[ep.task_id] = seen
    if not episodes_scrubbed:
        return None
    return {"episodes": episodes_scrubbed, "tasks": len(per_task),
            "refs": sum(int(h.get("refs_removed", 0)) for h in per_task.values()),
            "objects": sum(int(h.get("objects_removed", 0)) for h in per_task.values()),
            "reflogs": sum(int(h.get("reflogs_removed", 0)) for h in per_task.values())}


def sandbox_modes(episodes: Iterable[Any]) -> str | None:
    """The sandbox the episodes ran in, from what each one's runner stored (episodes.outcome_detail); None when
    none of them ran a harness (or the store predates m006)."""
    modes = set()
    for ep in episodes:
        seen = (getattr(ep, "outcome_detail", None) or {}).get("sandbox")
        if seen is not None:
            modes.add(seen if isinstance(seen, str) else seen.get("mode", "unknown"))
    return ", ".join(sorted(modes)) or None


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def render(summary: RoundSummary, console: Any) -> None:
    """The summary table (Rich) on `console`, then one line of counts per status and outcome."""
    from rich.table import Table

    table = Table(title=f"run {summary.run}, round {summary.round}", title_justify="left")
    with_k = summary.k != 1  # one attempt per task: pass@k is pass@1, shown once
    for col in ("task", "attempts", "solved", "mean reward", "pass@1", *([f"pass@{summary.k}"] if with_k else [])):
        table.add_column(col, justify="left" if col == "task" else "right")
    for t in summary.tasks:
        table.add_row(t.task_id, str(t.attempts), str(t.solved), _fmt(t.mean_reward), _fmt(t.pass_at_1),
                      *([_fmt(t.pass_at_k)] if with_k else []))
    console.print(table)
    console.print(f"episodes: {summary.episodes}   mean reward: {_fmt(summary.mean_reward)}   calls: {summary.calls}")
    console.print("status:   " + ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items())))
    console.print("outcome:  " + ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items())))
    if summary.sandbox is not None and "none" in summary.sandbox.split(", "):
        some = "some " if summary.sandbox != "none" else ""
        console.print(f"sandbox:  {summary.sandbox} - {some}episodes, setup and reward ran on the host, unsandboxed")
    if summary.history:
        h = summary.history
        console.print(f"history:  {h['episodes']} workspace(s) of {h['tasks']} task(s) scrubbed: their repositories "
                      f"held history past the base commit, left out ({h['refs']} ref(s), {h['reflogs']} reflog(s), "
                      f"{h['objects']:,} object(s))")
    if summary.evaluations is not None:
        render_evaluations(summary, console)
    for note in summary.notes:
        console.print(f"note:     {note}")


def render_evaluations(summary: RoundSummary, console: Any) -> None:
    """The held-out curve (95% intervals clustered by task) beside the train reward of the round sampled from the
    same policy: one line per evaluation, never wrapped, so the intervals stay readable in a narrow terminal."""
    console.print("held-out (never trained on), 95% intervals by task:")
    for line in curve_text(summary.evaluations or []):
        console.print(f"  {line}", soft_wrap=True, highlight=False)


def curve_text(evals: list[dict[str, Any]]) -> list[str]:
    """The held-out curve (rollout/heldout.evaluation entries) as text: one line per evaluation, each metric with its
    interval, then the train reward under the same policy."""
    from agentlightning_cli.rollout.intervals import Interval

    lines = []
    for e in evals:
        names = {"pass_at_1": "pass@1", "pass_at_k": f"pass@{e['k']}", "mean_reward": "mean reward"}
        cells = "   ".join(f"{name} " + (Interval(**e[m]).text(2) if e[m] else "-") for m, name in names.items())
        train = "-" if e.get("train_reward") is None else f"{e['train_reward']:.2f}"
        lines.append(f"after {e['trainings']} training(s) ({e['policy']}, {e['episodes']} episodes): {cells}"
                     f"   | train reward {train}")
    return lines
