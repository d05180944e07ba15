"""alight's own per-round numbers for the experiment trackers (train/trackers.py), read from the store, so a
tracker shows what `alight inspect stats` shows: the rollout's reward, pass@k and counts (inspect/stats.py
round_stats), and what training did with the round (train_rounds, train_steps).
"""

from __future__ import annotations

import statistics
from typing import Any


def rollout_metrics(store: Any, run_id: str, rnd: Any, prefix: str = "round") -> dict[str, float | None]:
    """Round `rnd` (a store Round) as `alight inspect stats` computes it, under `prefix/`; an evaluation round
    (kind `eval`) under e.g. `heldout/`, logged with Tracker.log_round at trackers.step_of(its index)."""
    from agentlightning_cli.inspect.stats import round_stats

    stats = round_stats(rnd.index, rnd, store.episode_summaries(run_id=run_id, round_id=rnd.id), [])
    out = {f"{prefix}/{key}": stats[key] for key in ("reward_mean", "reward_std", "pass_at_1", "pass_at_k",
                                                      "episodes", "rewarded", "calls", "completion_tokens")}
    out[f"{prefix}/index"] = rnd.index
    if rnd.ended_at:
        out[f"{prefix}/rollout_seconds"] = rnd.ended_at - rnd.started_at
    return out


def training_metrics(store: Any, run_id: str, round_index: int,
                     swap_seconds: float | None = None) -> dict[str, float | None]:
    """What training round `round_index`'s episodes did (the store's train_rounds row and its steps), under
    `train_round/`; `swap_seconds`: the time around it (vLLM asleep and awake, the new adapter loaded)."""
    tr = store.get_train_round(run_id, round_index)
    if tr is None:
        return {}
    clips = [s.clip_fraction for s in store.list_train_steps(run_id, round_index) if s.clip_fraction is not None]
    importance = (tr.detail or {}).get("importance") or {}
    out = {"train_round/rows": tr.rows, "train_round/calls": tr.calls, "train_round/steps": tr.steps,
           "train_round/training_seconds": tr.seconds,
           "train_round/breaks_per_100_calls": 100.0 * sum(tr.break_reasons.values()) / tr.calls if tr.calls else None,
           "train_round/clip_fraction": statistics.fmean(clips) if clips else None,
           "train_round/swap_seconds": swap_seconds}
    for key in ("mean", "min", "max", "truncated", "logp_difference_mean"):
        out[f"train_round/importance_{key}"] = importance.get(key)
    return out
