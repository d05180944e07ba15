"""GRPO advantages per episode: group = the episodes of one task in one round.

Why per episode and not per row: an episode gets one reward, and its rows differ in number (merging, breaks).
The advantage is computed once per episode, over the episodes that produce rows, and broadcast to its rows; a
row-level baseline would push long episodes around just for having more rows.

The weighting rule (`apply`): how an episode's calls were split into rows never changes its loss. Every trained
token of an episode weighs what it would if the whole episode were one row, under the loss TRL computes:
- token sums (`dapo`, `dr_grpo`, `cispo`, `luspo`, `bnpo`): each row weighs 1, so an episode counts by its
  advantage x its trained tokens, as any sequence does under these losses;
- a mean per row, then over rows (`grpo`, `sapo`): row r weighs tokens_r / tokens of the episode, so each
  episode counts once, by its advantage, however many rows it became.
Exact when an episode's rows share a generation batch (dapo normalises by each batch's token count, grpo by
its row count); tests/test_train_weighting.py checks the loss and its gradient for dapo, grpo and dr_grpo.

Groups whose rewards are all equal carry no signal (advantage 0 everywhere) and only dilute the token-mean loss,
so they are dropped and counted (DAPO's dynamic sampling). Pure: no torch.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlightning_cli.rollout.plan import ABANDONED

DEFAULT_OUTCOMES = ("finished", "budget_exceeded", "timeout")
SCALES = ("group", "batch", "none")
EPS = 1e-4  # as TRL: (r - mean) / (std + eps), so a tiny spread does not explode


@dataclass
class AdvantageReport:
    advantages: dict[str, float] = field(default_factory=dict)  # episode id -> advantage
    rewards: dict[str, float] = field(default_factory=dict)  # episode id -> the reward used
    groups: int = 0  # groups kept
    dropped: Counter = field(default_factory=Counter)  # zero_variance_groups, outcome_<x>, reward_error, ...

    @property
    def episodes(self) -> int:
        return len(self.advantages)


def trainable_rewards(episodes: Iterable[Any], outcomes: Sequence[str] = DEFAULT_OUTCOMES,
                      on_error: str = "skip") -> tuple[dict[str, tuple[str, float]], Counter]:
    """Episode id -> (task id, reward) for the episodes that train, and why the others do not.

    `outcomes`: how a harness run must have ended to train (a crashed harness says nothing about the policy).
    `on_error`: an episode whose reward command failed (`reward_error`) is skipped, or scored 0.
    """
    if on_error not in ("skip", "zero"):
        raise ValueError(f"reward.on_error must be skip or zero, got {on_error!r}")
    kept: dict[str, tuple[str, float]] = {}
    dropped: Counter = Counter()
    for ep in episodes:
        if ep.status == ABANDONED:  # a stopped run's episode, redone under a retry id that trains in its place
            dropped["abandoned_redone"] += 1
            continue
        if ep.outcome not in outcomes:
            dropped[f"outcome_{ep.outcome or 'unknown'}"] += 1
            continue
        reward = ep.reward
        if ep.status == "reward_error":
            if on_error == "skip":
                dropped["reward_error"] += 1
                continue
            reward = 0.0
        if reward is None or not math.isfinite(float(reward)):
            dropped["no_reward"] += 1
            continue
        kept[ep.id] = (ep.task_id or "", float(reward))
    return kept, dropped


def with_rows(rewards: dict[str, tuple[str, float]], rows: Iterable[Any],
              dropped: Counter) -> dict[str, tuple[str, float]]:
    """The rewarded episodes that have at least one training row: the only ones a group's mean and std may
    include, since the others are not in the loss. The rest are counted as `no_row_episodes`."""
    have = {r.episode_id for r in rows}
    kept = {e: v for e, v in rewards.items() if e in have}
    if len(kept) < len(rewards):
        dropped["no_row_episodes"] += len(rewards) - len(kept)
    return kept


def group_advantages(rewards: dict[str, tuple[str, float]], scale: str = "group") -> AdvantageReport:
    """Reward minus the group mean, divided by the group's std (`group`), the whole round's (`batch`), or 1."""
    if scale not in SCALES:
        raise ValueError(f"train.scale_rewards must be one of {', '.join(SCALES)}, got {scale!r}")
    report = AdvantageReport()
    groups: dict[str, list[str]] = defaultdict(list)
    for ep_id, (task, _) in rewards.items():
        groups[task].append(ep_id)
    centred: dict[str, float] = {}
    for task, ids in groups.items():
        values = [rewards[i][1] for i in ids]
        if len(ids) < 2 or max(values) == min(values):
            report.dropped["zero_variance_groups" if len(ids) > 1 else "single_episode_groups"] += 1
            report.dropped["zero_variance_episodes" if len(ids) > 1 else "single_episodes"] += len(ids)
            continue
        mean = sum(values) / len(values)
        std = _std(values)
        report.groups += 1
        for i, r in zip(ids, values):
            centred[i] = (r - mean) / (std + EPS) if scale == "group" else r - mean
            report.rewards[i] = r
    if scale == "batch" and centred:
        std = _std([rewards[i][1] for i in centred])
        centred = {i: a / (std + EPS) for i, a in centred.items()}
    report.advantages = centred
    return report


# TRL loss types that average each row over its own tokens before averaging over rows.
PER_ROW_MEAN_LOSSES = ("grpo", "sapo")


def apply(rows: Sequence[Any], report: AdvantageReport, loss_type: str = "dapo") -> list[Any]:
    """The rows whose episode has an advantage, each stamped with it and with the weight the module docstring's
    rule gives it under `loss_type`."""
    tokens: Counter = Counter()
    for r in rows:
        if r.episode_id in report.advantages:
            tokens[r.episode_id] += r.trained_tokens
    out = []
    for row in rows:
        if row.episode_id not in report.advantages:
            continue
        row.advantage = report.advantages[row.episode_id]
        row.reward = report.rewards[row.episode_id]
        row.weight = row_weight(row.trained_tokens, tokens[row.episode_id], loss_type)
        out.append(row)
    return out


def row_weight(row_tokens: int, episode_tokens: int, loss_type: str) -> float:
    """A row's loss weight: its share of its episode's trained tokens under a per-row-mean loss, else 1."""
    if loss_type in PER_ROW_MEAN_LOSSES:
        return row_tokens / episode_tokens if episode_tokens else 0.0
    return 1.0


def _std(values: Sequence[float]) -> float:
    # Unbiased, as TRL's group std.
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1))
