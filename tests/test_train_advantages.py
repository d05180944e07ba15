"""Group advantages: unequal groups, zero variance, outcome filters, reward errors, per-episode weights."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from agentlightning_cli.train import advantages as adv
from agentlightning_cli.train.rows import Row


@dataclass
class Ep:
    id: str
    task_id: str
    reward: float | None
    outcome: str = "finished"
    status: str = "done"


def test_unequal_groups_centre_on_their_own_mean_and_scale_by_their_std():
    eps = [Ep("a1", "a", 1.0), Ep("a2", "a", 0.0), Ep("b1", "b", 0.2), Ep("b2", "b", 0.4), Ep("b3", "b", 0.9)]
    rewards, dropped = adv.trainable_rewards(eps)
    report = adv.group_advantages(rewards)
    assert not dropped and report.groups == 2 and report.episodes == 5
    std_a = math.sqrt(0.5)  # unbiased, as TRL
    assert report.advantages["a1"] == pytest.approx(0.5 / (std_a + adv.EPS))
    b = [0.2, 0.4, 0.9]
    mean_b, std_b = sum(b) / 3, math.sqrt(sum((x - 0.5) ** 2 for x in b) / 2)
    assert report.advantages["b3"] == pytest.approx((0.9 - mean_b) / (std_b + adv.EPS))
    assert sum(report.advantages[e] for e in ("b1", "b2", "b3")) == pytest.approx(0.0, abs=1e-9)
    unscaled = adv.group_advantages(rewards, "none")
    assert unscaled.advantages["a1"] == pytest.approx(0.5) and unscaled.advantages["b1"] == pytest.approx(0.2 - 0.5)
    batch = adv.group_advantages(rewards, "batch")
    assert batch.advantages["a1"] / batch.advantages["b1"] == pytest.approx(0.5 / (0.2 - 0.5))


def test_zero_variance_and_single_episode_groups_are_dropped_and_counted():
    eps = [Ep("a1", "a", 1.0), Ep("a2", "a", 1.0), Ep("b1", "b", 0.0), Ep("c1", "c", 0.0), Ep("c2", "c", 1.0)]
    report = adv.group_advantages(adv.trainable_rewards(eps)[0])
    assert set(report.advantages) == {"c1", "c2"}
    assert report.dropped == {"zero_variance_groups": 1, "zero_variance_episodes": 2, "single_episode_groups": 1,
                              "single_episodes": 1}


def test_outcome_filter_and_missing_rewards():
    eps = [Ep("a", "t", 1.0), Ep("b", "t", 0.0, outcome="budget_exceeded"), Ep("c", "t", 0.0, outcome="timeout"),
           Ep("d", "t", 1.0, outcome="harness_error"), Ep("e", "t", 0.0, outcome="no_calls"), Ep("f", "t", None)]
    rewards, dropped = adv.trainable_rewards(eps)
    assert set(rewards) == {"a", "b", "c"}
    assert dropped == {"outcome_harness_error": 1, "outcome_no_calls": 1, "no_reward": 1}
    only_finished, _ = adv.trainable_rewards(eps, outcomes=["finished"])
    assert set(only_finished) == {"a"}


def test_an_abandoned_episode_never_trains_beside_the_retry_that_redid_its_slot():
    # A stopped run's episodes are abandoned on resume and their slots redone under `.1`: only the retry trains,
    # even where the abandoned one got as far as an outcome and a reward (one slot, one sample in its group), and
    # the count names what happened rather than an unknown outcome.
    eps = [Ep("a", "t", 1.0, outcome=None, status="abandoned"), Ep("a.1", "t", 0.0),
           Ep("b", "t", 1.0, status="abandoned"), Ep("b.1", "t", 1.0)]
    rewards, dropped = adv.trainable_rewards(eps)
    assert set(rewards) == {"a.1", "b.1"}
    assert dropped == {"abandoned_redone": 2}


def test_reward_errors_are_skipped_or_scored_zero():
    eps = [Ep("a", "t", 1.0), Ep("b", "t", None, status="reward_error")]
    skipped, dropped = adv.trainable_rewards(eps, on_error="skip")
    assert set(skipped) == {"a"} and dropped == {"reward_error": 1}
    zeroed, _ = adv.trainable_rewards(eps, on_error="zero")
    assert zeroed == {"a": ("t", 1.0), "b": ("t", 0.0)}
    with pytest.raises(ValueError, match="skip or zero"):
        adv.trainable_rewards(eps, on_error="drop")


def test_advantage_broadcast_to_every_row_and_weights_follow_the_loss_type():
    report = adv.group_advantages({"x": ("t", 1.0), "y": ("t", 0.0), "z": ("u", 1.0)})

    def rows() -> list[Row]:  # x: three rows of 1, 1 and 2 trained tokens
        return [Row("x", [1], [5], [1]), Row("x", [1], [5, 6], [0, 1]), Row("x", [1], [5, 6], [1, 1]),
                Row("y", [1], [5], [1]), Row("z", [1], [5], [1])]

    kept = adv.apply(rows(), report, "dapo")
    assert [r.episode_id for r in kept] == ["x", "x", "x", "y"]  # z's group had one episode
    assert {r.advantage for r in kept if r.episode_id == "x"} == {report.advantages["x"]}
    assert [r.weight for r in kept] == [1.0] * 4  # token sums: every token once, however the rows split
    assert {r.reward for r in kept if r.episode_id == "x"} == {1.0}
    per_row = adv.apply(rows(), report, "grpo")  # a mean per row: shares of the episode's tokens, summing to 1
    assert [r.weight for r in per_row] == [0.25, 0.25, 0.5, 1.0]
