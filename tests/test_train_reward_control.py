"""train.reward_control: shuffle (the benchmark's noise control) on real stored episodes: each group's rewards are
permuted across its episodes before advantages, deterministically for a seed, so the advantages of a group with
distinct rewards change while the group's rewards stay the same multiset; a trained round records it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.train import advantages as adv
from agentlightning_cli.train.round_step import collect_rows, round_advantages, train_round
from agentlightning_cli.train.rows import RowContext
from train_support import new_run, record_round, small_settings

# task-0: four distinct rewards (partial credit); task-1: all equal (no signal, dropped either way).
REWARDS = {0: [0.0, 0.25, 0.5, 1.0], 1: [0.5, 0.5, 0.5, 0.5]}


def _score(store, run, rnd, **train):
    rewards, dropped = adv.trainable_rewards(store.list_episodes(run_id=run.id, round_id=rnd.id))
    rows = collect_rows(store, list(rewards), RowContext(), "strict").rows
    scored, control = round_advantages(rewards, rows, dropped, small_settings(**train).train, rnd.index)
    return rewards, scored, control, dropped


@pytest.fixture()
def stored(tmp_path: Path):
    store, run = new_run(tmp_path)
    rnd = record_round(store, run.id, 0, tasks=2, attempts=4, rewards=lambda task, attempt: REWARDS[task][attempt])
    yield store, run, rnd
    store.close()


def test_shuffle_permutes_each_groups_rewards_and_changes_its_advantages(stored):
    store, run, rnd = stored
    original, plain, off, _ = _score(store, run, rnd)
    rewards, shuffled, control, dropped = _score(store, run, rnd, reward_control="shuffle", seed=7)
    assert off.mode == "none" and off.moved == 0
    group = [e for e, (task, _) in original.items() if task == "task-0"]
    # The group trains with the same rewards, in another order: a permutation, not new values.
    assert Counter(shuffled.rewards[e] for e in group) == Counter(original[e][1] for e in group)
    assert [shuffled.rewards[e] for e in group] != [original[e][1] for e in group]
    assert [shuffled.advantages[e] for e in group] != pytest.approx([plain.advantages[e] for e in group])
    # Same mean and spread: the advantages are the unshuffled ones, reassigned.
    assert sorted(shuffled.advantages.values()) == pytest.approx(sorted(plain.advantages.values()))
    assert control.to_dict() == {"mode": "shuffle", "seed": 7, "groups": 2, "moved": control.moved}
    assert control.moved >= 2 and dropped["zero_variance_groups"] == 1  # task-1 is dropped as without the control


def test_shuffle_is_deterministic_for_a_seed_and_varies_with_it(stored):
    store, run, rnd = stored
    first = _score(store, run, rnd, reward_control="shuffle", seed=7)[1]
    again = _score(store, run, rnd, reward_control="shuffle", seed=7)[1]
    other = _score(store, run, rnd, reward_control="shuffle", seed=8)[1]
    assert first.advantages == again.advantages
    assert first.advantages != other.advantages


def test_an_unknown_control_is_refused():
    from agentlightning_cli.train.reward_control import control_rewards

    with pytest.raises(ValueError, match="train.reward_control must be one of none, shuffle"):
        control_rewards({"e": ("t", 1.0)}, "permute", 0, 0)


def test_a_trained_round_under_shuffle_records_the_control_and_trains_on_the_swapped_rewards(tmp_path: Path):
    """Two episodes scored 0 and 1: seed 4 swaps them (seeds 0-3 leave them in place), so the one scored 0
    trains with advantage +0.707."""
    pytest.importorskip("torch")
    tiny = build_tiny_model(tmp_path / "tiny")
    store, run = new_run(tmp_path)
    rnd = record_round(store, run.id, 0, tasks=1, attempts=2, calls=1, rewards=lambda task, attempt: float(attempt))
    zero = next(e.id for e in store.list_episodes(run_id=run.id, round_id=rnd.id) if e.reward == 0.0)
    settings = small_settings(batch_size=2, grad_accum=1, reward_control="shuffle", seed=4)
    report = train_round(store, run.id, 0, base_model=tiny, settings=settings, out_dir=tmp_path / "adapter",
                         log=lambda m: None)
    detail = store.get_train_round(run.id, 0).detail
    assert detail["reward_control"] == report.reward_control == {"mode": "shuffle", "seed": 4, "groups": 1,
                                                                   "moved": 2}
    assert detail["advantages"][zero] == pytest.approx(0.5 / (0.5 ** 0.5 + 1e-4), abs=1e-5)
    store.close()
