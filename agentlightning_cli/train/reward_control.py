"""The shuffled-reward control (train.reward_control: shuffle): each GRPO group's rewards permuted across its
episodes before advantages are computed.

Why: a held-out gain after training is evidence of learning only against a run that spends the same compute at the
same learning rate but whose reward says nothing about what an episode did. Shuffling within a group keeps every
group's mean, spread and number of non-zero advantages (so the same rows train, with advantages of the same size:
the same steps, the same update magnitude) and only cuts the link between an episode and its reward. What such a
run gains on held-out tasks comes from training itself (format drift, sampling noise), not from the reward.

Deterministic: the permutation of a group depends on (seed, round, task) and the group's episode ids only, so a
resumed or repeated round trains on the same shuffled rewards. Pure: no torch.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

CONTROLS = ("none", "shuffle")


@dataclass
class ControlReport:
    """What the control did to a round's rewards: stored with the round (train_rounds.detail.reward_control)."""

    mode: str
    seed: int
    groups: int = 0  # groups permuted (two or more episodes)
    moved: int = 0  # episodes whose reward changed (a permutation may leave some, or all, where they were)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "seed": self.seed, "groups": self.groups, "moved": self.moved}


def control_rewards(rewards: dict[str, tuple[str, float]], mode: str, seed: int,
                    round_index: int) -> tuple[dict[str, tuple[str, float]], ControlReport]:
    """`rewards` (episode id -> (task id, reward)) under the control `mode`: unchanged for `none`; for `shuffle`,
    each task's rewards permuted across that task's episodes."""
    if mode not in CONTROLS:
        raise ValueError(f"train.reward_control must be one of {', '.join(CONTROLS)}, got {mode!r}")
    report = ControlReport(mode=mode, seed=seed)
    if mode == "none":
        return dict(rewards), report
    groups: dict[str, list[str]] = defaultdict(list)
    for ep_id, (task, _) in rewards.items():
        groups[task].append(ep_id)
    out: dict[str, tuple[str, float]] = {}
    for task, ids in groups.items():
        ids.sort()  # the order the permutation applies to must not depend on how the store listed them
        values = [rewards[i][1] for i in ids]
        # A string seed: random.Random hashes it with SHA-512, the same in every process (unlike hash()).
        random.Random(f"{seed}:{round_index}:{task}").shuffle(values)
        for ep_id, value in zip(ids, values):
            out[ep_id] = (task, value)
            report.moved += value != rewards[ep_id][1]
        report.groups += len(ids) > 1
    return out, report
