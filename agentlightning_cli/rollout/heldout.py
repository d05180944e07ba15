"""The held-out curve of a run: each evaluation round's pass@1, pass@k and mean reward with 95% intervals clustered
by task (rollout/intervals.py), per task in the shape `alight eval` prints, and as flat metrics for trackers.

An episode without a reward (setup or reward failed) counts as reward 0 and not solved, as in `alight eval` and
the round summary.
"""

from __future__ import annotations

from typing import Any, Iterable

from agentlightning_cli.rollout import intervals
from agentlightning_cli.rollout.plan import FINAL
from agentlightning_cli.rollout.summary import SOLVED, pass_at_k

METRICS = ("pass_at_1", "pass_at_k", "mean_reward")


def per_task(episodes: Iterable[Any], k: int, order: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """task id -> {task_id, attempts, solved, pass_at_1, pass_at_k, mean_reward} over the given (final) episodes,
    in `order` where given, else by task id."""
    by_task: dict[str, list[Any]] = {}
    for ep in sorted(episodes, key=lambda e: (e.task_id, e.attempt)):
        by_task.setdefault(ep.task_id, []).append(ep)
    rank = {t: i for i, t in enumerate(order or [])}
    out = {}
    for task_id in sorted(by_task, key=lambda t: (rank.get(t, len(rank)), t)):
        eps = by_task[task_id]
        rewards = [0.0 if e.reward is None else float(e.reward) for e in eps]
        solved = sum(1 for r in rewards if r >= SOLVED)
        out[task_id] = {"task_id": task_id, "attempts": len(eps), "solved": solved,
                        "pass_at_1": pass_at_k(len(eps), solved, 1), "pass_at_k": pass_at_k(len(eps), solved, k),
                        "mean_reward": sum(rewards) / len(rewards)}
    return out


def evaluation(store: Any, run_id: str, rnd: Any, k: int | None = None, order: list[str] | None = None,
               resamples: int = intervals.RESAMPLES) -> dict[str, Any]:
    """One evaluation round: `{"round", "trainings", "policy", "status", "episodes", "unscored", "k",
    "pass_at_1"/"pass_at_k"/"mean_reward": {estimate, low, high}, "per_task": [...]}`; `round` is the training
    round whose policy was evaluated, which had `trainings` trainings behind it (the same number). `k`: the
    attempts asked per task (default: the most any task has)."""
    episodes = [e for e in store.list_episodes(run_id=run_id, round_id=rnd.id) if e.status in FINAL]
    if k is None:
        counts: dict[str, int] = {}
        for e in episodes:
            counts[e.task_id] = counts.get(e.task_id, 0) + 1
        k = max(counts.values(), default=1)
    tasks = per_task(episodes, k, order)
    out: dict[str, Any] = {"round": rnd.index, "trainings": rnd.index, "policy": rnd.policy, "status": rnd.status,
                           "episodes": len(episodes), "unscored": sum(1 for e in episodes if e.reward is None), "k": k,
                           "train_reward": train_reward(store, run_id, rnd.index)}
    for metric in METRICS:
        ci = intervals.task_interval([t[metric] for t in tasks.values()], resamples)
        out[metric] = ci.to_json() if ci else None
    out["per_task"] = list(tasks.values())
    return out


def train_reward(store: Any, run_id: str, index: int) -> float | None:
    """Mean reward of training round `index`'s ended episodes (sampled from the same policy as evaluation `index`);
    None before it ran. Episodes without a reward are left out, as in the round summary."""
    rnd = next((r for r in store.list_rounds(run_id) if r.index == index), None)
    rewards = [] if rnd is None else [e.reward for e in store.list_episodes(run_id=run_id, round_id=rnd.id)
                                      if e.status in FINAL and e.reward is not None]
    return round(sum(rewards) / len(rewards), 4) if rewards else None


def evaluations(store: Any, run_id: str, k: int | None = None, order: list[str] | None = None) -> list[dict[str, Any]]:
    """Every evaluation round of the run, in order of trainings (empty when the run evaluated nothing)."""
    return [evaluation(store, run_id, r, k, order) for r in store.list_rounds(run_id, kind="eval")]


def evaluation_metrics(store: Any, run_id: str, eval_round_id: str) -> dict[str, float]:
    """Flat numbers of one evaluation round for an experiment tracker, logged at the step of its `trainings`:
    `heldout/pass_at_1` (+ `_low`, `_high`: the 95% task-clustered interval), the same for `pass_at_k` and
    `mean_reward`, `heldout/episodes` and `heldout/k`. Metrics without episodes are left out."""
    rnd = store.get_round(eval_round_id)
    if rnd is None or rnd.kind != "eval" or rnd.run_id != run_id:
        raise LookupError(f"{eval_round_id!r} is not an evaluation round of run {run_id!r}")
    found = evaluation(store, run_id, rnd)
    out: dict[str, float] = {"heldout/episodes": float(found["episodes"]), "heldout/k": float(found["k"])}
    for metric in METRICS:
        ci = found[metric]
        if ci is not None:
            out[f"heldout/{metric}"] = ci["estimate"]
            out[f"heldout/{metric}_low"] = ci["low"]
            out[f"heldout/{metric}_high"] = ci["high"]
    return out
