"""Per-round numbers of a run: is training helping? Reward mean ± std, pass@1 and pass@k per task, outcomes,
tokens, and the training loss of the steps that followed each round (store `train_steps`).

Solved means reward >= 1.0 and pass@k is the unbiased estimator 1 - C(n-c, k) / C(n, k) over a task's n
attempts with c solved; episodes without a reward count as attempts that did not pass. The same definitions as
the end-of-round summary of `alight run` (rollout/summary.py), so the two agree.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any

from agentlightning_cli.rollout.intervals import task_interval
from agentlightning_cli.store import EpisodeSummary, Round, TrainStep

SOLVED = 1.0
SPARKS = "▁▂▃▄▅▆▇█"


def pass_at_k(n: int, c: int, k: int) -> float | None:
    if n == 0 or k <= 0:
        return None
    k = min(k, n)
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def round_stats(index: int | None, rnd: Round | None, episodes: list[EpisodeSummary],
                steps: list[TrainStep]) -> dict[str, Any]:
    rewards = [s.episode.reward for s in episodes if s.episode.reward is not None]
    by_task: dict[str, list[EpisodeSummary]] = defaultdict(list)
    for s in episodes:
        by_task[s.episode.task_id or "-"].append(s)
    k = max((len(g) for g in by_task.values()), default=0)
    tasks = {}
    for task, group in sorted(by_task.items()):
        solved = sum(1 for s in group if (s.episode.reward or 0.0) >= SOLVED)
        task_rewards = [s.episode.reward for s in group if s.episode.reward is not None]
        tasks[task] = {"attempts": len(group), "solved": solved, "reward_mean": _mean(task_rewards),
                       "pass_at_1": pass_at_k(len(group), solved, 1), "pass_at_k": pass_at_k(len(group), solved, k)}
    losses = [st.loss for st in steps if st.loss is not None]
    # The mean reward's 95% interval, tasks resampled (rollout/intervals.py): it stays inside the range of the
    # per-task means, so inside [0, 1] for such rewards (a ± std bar does not).
    ci = task_interval([t["reward_mean"] for t in tasks.values() if t["reward_mean"] is not None])
    return {
        "object": "round_stats", "round": index, "policy": rnd.policy if rnd else None,
        "status": rnd.status if rnd else None, "episodes": len(episodes), "rewarded": len(rewards),
        "reward_mean": _mean(rewards), "reward_std": round(statistics.pstdev(rewards), 4) if rewards else None,
        "reward_ci": ci.to_json() if ci else None,
        "k": k, "pass_at_1": _mean([t["pass_at_1"] for t in tasks.values() if t["pass_at_1"] is not None]),
        "pass_at_k": _mean([t["pass_at_k"] for t in tasks.values() if t["pass_at_k"] is not None]),
        "statuses": dict(Counter(s.episode.status for s in episodes)),
        "outcomes": dict(Counter(s.episode.outcome or "none" for s in episodes)),
        "calls": sum(s.calls for s in episodes), "prompt_tokens": sum(s.prompt_tokens for s in episodes),
        "completion_tokens": sum(s.completion_tokens for s in episodes),
        "train": None if not steps else {"steps": len(steps), "loss_first": losses[0] if losses else None,
                                         "loss_last": losses[-1] if losses else None, "loss_mean": _mean(losses)},
        "tasks": tasks,
    }


def run_stats(run_name: str, rounds: list[Round], episodes: list[EpisodeSummary],
              steps: list[TrainStep], evaluations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`stats --json`: one round_stats per training round (episodes outside any round under `round: null`), every
    training step, ordered by round then step, and the held-out `evaluations` (rollout/heldout.py; [] if none).
    `rounds`: the training rounds; an episode of any other round (an evaluation) is not a training round's."""
    by_round: dict[int | None, list[EpisodeSummary]] = defaultdict(list)
    train_ids = {r.id for r in rounds}
    for s in episodes:
        if s.episode.round_id is not None and s.episode.round_id not in train_ids:
            continue  # held-out: never in a training round's reward
        by_round[s.round_index].append(s)
    known = {r.index: r for r in rounds}
    indexes = sorted(set(known) | {i for i in by_round if i is not None})
    steps_by_round: dict[int, list[TrainStep]] = defaultdict(list)
    for st in steps:
        steps_by_round[st.round_idx].append(st)
    out = [round_stats(i, known.get(i), by_round.get(i, []), steps_by_round.get(i, [])) for i in indexes]
    if by_round.get(None):
        out.append(round_stats(None, None, by_round[None], []))
    return {"object": "stats", "run": run_name, "rounds": out, "evaluations": list(evaluations or []),
            "train_steps": [{"round": st.round_idx, "step": st.step, "loss": st.loss, "reward_mean": st.reward_mean,
                             "reward_std": st.reward_std, "grad_norm": st.grad_norm, "clip_fraction": st.clip_fraction,
                             "tokens_per_s": st.tokens_per_s, "rows": st.rows, "merged_calls": st.merged_calls}
                            for st in steps]}


def sparkline(values: list[float | None], low: float | None = None, high: float | None = None) -> str:
    """One block character per value, scaled between low and high (default: the values' range); None is a space."""
    known = [v for v in values if v is not None]
    if not known:
        return " " * len(values)
    lo = min(known) if low is None else low
    hi = max(known) if high is None else high
    span = hi - lo
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            level = 0 if span <= 0 else round((min(max(v, lo), hi) - lo) / span * (len(SPARKS) - 1))
            out.append(SPARKS[level])
    return "".join(out)
