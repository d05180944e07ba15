"""What the trainer does with an episode, as `alight inspect` shows it (inspect/training.py): the GRPO advantage of an
episode in a group with spread, a zero-variance group dropped, an outcome that does not train, a failed reward
skipped or scored 0 by the run's own settings snapshot, and rows at a temperature the round did not train at. Numbers
are worked out here by hand, not by the trainer's functions."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.commands.inspect import show_episode
from agentlightning_cli.inspect.app import InspectApp
from agentlightning_cli.inspect.episode_view import EpisodeScreen
from agentlightning_cli.inspect.row_breaks import stored_episode_rows
from agentlightning_cli.inspect.source import RunSource
from agentlightning_cli.inspect.training import episode_training, run_training_settings
from agentlightning_cli.store import Store, TrainRound
from agentlightning_cli.testing.call_bodies import Step, conversation

EPS = 1e-4
STEPS = [Step(text="Look.", tool=("bash", {"command": "ls"}), tool_output="a.py"), Step(text="Done.")]
# (task, outcome, status, reward): task a has spread; task b's two scored episodes both got 1.0; one harness crash
# and one failed reward command.
EPISODES = {"a0": ("a", "finished", "done", 1.0), "a1": ("a", "finished", "done", 0.0),
            "a2": ("a", "budget_exceeded", "done", 0.5), "a3": ("a", "harness_error", "failed", None),
            "b0": ("b", "finished", "done", 1.0), "b1": ("b", "timeout", "done", 1.0),
            "b2": ("b", "finished", "reward_error", None)}


def build(run_dir: Path, settings: dict | None = None, temperature: float = 1.0) -> tuple[str, dict[str, str]]:
    """One round of EPISODES, each with two calls carrying token ids; `settings` is the run's snapshot."""
    ids = {}
    with Store.open(run_dir) as store:
        run = store.create_run("r", {"command": "run", **({"settings": settings} if settings else {})})
        rnd = store.create_round(run.id, 0, "policy-r0", None)
        for n, (name, (task, outcome, status, reward)) in enumerate(EPISODES.items()):
            ep = store.create_episode(run.id, rnd.id, task, n, "mini-swe-agent", f"key-{name}")
            records = conversation(ep.id, "openai-chat", f"Task {task}.", STEPS, seed=n)
            if name == "a0":  # sampled hotter than the rest
                records = [dataclasses.replace(r, sampling={**r.sampling, "temperature": temperature}) for r in records]
            store.add_calls(records)
            store.update_episode(ep.id, status=status, outcome=outcome, reward=reward)
            ids[name] = ep.id
    return run.id, ids


def training(run_dir: Path, episode_id: str) -> dict:
    with Store.open(run_dir) as store:
        s = store.episode_summaries_by_id([episode_id])[0]
        rows = stored_episode_rows(store, episode_id, s.episode.run_id, s.round_index)
        return episode_training(store, s, rows, store.call_summaries(episode_id))


def test_a_group_with_spread_gets_the_grpo_advantages(tmp_path: Path):
    _, ids = build(tmp_path)
    # Group a = a0, a1, a2 (a3 crashed): mean 0.5, unbiased std sqrt((0.25 + 0.25 + 0) / 2) = 0.5.
    for name, reward in (("a0", 1.0), ("a1", 0.0), ("a2", 0.5)):
        t = training(tmp_path, ids[name])
        assert t["trains"] is True and t["reason"] is None and t["scale"] == "group"
        assert t["reward"] == reward and t["advantage"] == pytest.approx((reward - 0.5) / (0.5 + EPS), abs=1e-12)
        assert t["group"] == {"task_id": "a", "episodes": 3, "mean": 0.5, "std": pytest.approx(0.5, abs=1e-12),
                              "rewards": [0.0, 0.5, 1.0]}
        assert t["rows"] == 1 and t["row_weight"] == 1.0 and t["temperature"]["dropped_rows"] is None
    t = training(tmp_path, ids["a0"])
    assert t["round"]["episodes"] == 7 and t["round"]["scored"] == 3 and t["round"]["groups"] == 1
    assert t["round"]["dropped"] == {"outcome_harness_error": 1, "reward_error": 1, "zero_variance_episodes": 2,
                                     "zero_variance_groups": 1}
    assert t["settings"]["source"] == "defaults" and "(group std 0.5 + 0.0001)" in t["why"]


def test_zero_variance_group_and_what_does_not_train_say_why(tmp_path: Path):
    _, ids = build(tmp_path)
    for name in ("b0", "b1"):
        t = training(tmp_path, ids[name])
        assert (t["trains"], t["reason"], t["advantage"]) == (False, "zero_variance_group", None)
        assert "all 2 episodes of task b in round 0 scored 1" in t["why"] and t["group"]["std"] == 0.0
    crashed = training(tmp_path, ids["a3"])
    assert (crashed["trains"], crashed["reason"], crashed["group"]) == (False, "outcome_harness_error", None)
    assert "outcome harness_error is not trained" in crashed["why"]
    failed = training(tmp_path, ids["b2"])
    assert (failed["trains"], failed["reason"]) == (False, "reward_error")
    assert "reward.on_error is skip" in failed["why"]


def test_an_abandoned_episode_says_its_slot_was_redone(tmp_path: Path):
    run_id, ids = build(tmp_path)
    with Store.open(tmp_path) as store:
        rnd = store.list_rounds(run_id)[0]
        ep = store.create_episode(run_id, rnd.id, "a", 9, "mini-swe-agent", "key-a9")
        store.add_calls(conversation(ep.id, "openai-chat", "Task a.", STEPS, seed=9))
        store.update_episode(ep.id, status="abandoned")  # a stopped run's episode, redone on resume
    t = training(tmp_path, ep.id)
    assert (t["trains"], t["reason"]) == (False, "abandoned_redone") and "redid its slot" in t["why"]
    assert t["round"]["dropped"]["abandoned_redone"] == 1 and t["round"]["scored"] == 3


def test_the_runs_settings_snapshot_decides(tmp_path: Path):
    # on_error zero: b2 scores 0, so group b = [1, 1, 0] has spread; scale none: advantage = reward - mean.
    snapshot = {"train": {"outcomes": ["finished", "timeout"], "scale_rewards": "none"}, "reward": {"on_error": "zero"}}
    _, ids = build(tmp_path, snapshot)
    b2 = training(tmp_path, ids["b2"])
    assert b2["trains"] and b2["reward"] == 0.0 and b2["advantage"] == pytest.approx(0 - 2 / 3, abs=1e-12)
    assert b2["settings"] == {"outcomes": ["finished", "timeout"], "on_error": "zero", "scale_rewards": "none",
                              "source": "run"}
    b0 = training(tmp_path, ids["b0"])
    assert b0["advantage"] == pytest.approx(1 - 2 / 3, abs=1e-12) and b0["group"]["episodes"] == 3
    a2 = training(tmp_path, ids["a2"])  # budget_exceeded is not in this run's outcomes
    assert (a2["trains"], a2["reason"]) == (False, "outcome_budget_exceeded")
    a0 = training(tmp_path, ids["a0"])  # group a is now a0, a1: [1, 0]
    assert a0["advantage"] == pytest.approx(0.5, abs=1e-12) and a0["group"]["std"] == pytest.approx(2 ** -0.5)
    # `alight serve` keeps its snapshot at the top; a missing key falls back to the default.
    assert run_training_settings({"train": {"scale_rewards": "batch"}})["scale_rewards"] == "batch"
    assert run_training_settings({"train": {"scale_rewards": "batch"}})["on_error"] == "skip"
    _, bad = build(tmp_path / "bad", {"train": {"scale_rewards": "bogus"}})
    refused = training(tmp_path / "bad", bad["a0"])
    assert (refused["trains"], refused["reason"]) == (False, "bad_settings") and "bogus" in refused["why"]


def test_rows_at_another_temperature_than_the_round_trained_at_are_dropped(tmp_path: Path):
    run_id, ids = build(tmp_path, temperature=0.7)
    before = training(tmp_path, ids["a0"])
    assert before["trains"] and before["temperature"] == {"round": None, "rows": {"0.7": 1}, "dropped_rows": None}
    with Store.open(tmp_path) as store:
        store.put_train_round(TrainRound(run_id=run_id, round_idx=0, rows=2, calls=4, steps=1, seconds=1.0,
                                         merge_rule="strict", break_reasons={}, dropped={"other_temperature_rows": 1},
                                         adapter_dir=None, detail={"temperature": 1.0, "episodes": 3}))
    after = training(tmp_path, ids["a0"])
    assert (after["trains"], after["reason"], after["rows"]) == (False, "other_temperature", 0)
    assert after["temperature"] == {"round": 1.0, "rows": {"0.7": 1}, "dropped_rows": 1}
    assert after["round"]["trained"] and after["note"] is None
    assert training(tmp_path, ids["a1"])["trains"]


def test_show_json_and_text_carry_it(tmp_path: Path):
    _, ids = build(tmp_path)
    with RunSource.open(tmp_path) as src:
        data = show_episode(src, ids["a1"])
    assert data["training"]["advantage"] == pytest.approx(-0.5 / (0.5 + EPS)) and data["rows"]["rows"]
    out = subprocess.run([sys.executable, "-m", "agentlightning_cli", "inspect", "show", ids["b0"], "--run",
                          str(tmp_path)], capture_output=True, text=True, check=True).stdout
    assert "trains nothing: zero_variance_group" in out and "all 2 episodes of task b" in out
    assert "calls 2 (0 failed)" in out
    assert out.index("trains nothing") < out.index("training rows")
    assert json.loads(json.dumps(data))["training"]["group"]["episodes"] == 3


async def test_app_rows_view_opens_with_it(tmp_path: Path):
    from tests.test_inspect_app import screen_text

    _, ids = build(tmp_path)
    app = InspectApp(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.push_screen(EpisodeScreen(app.source, ids["a0"]))
        await pilot.pause()
        await pilot.press("t")
        await pilot.pause()
        text = screen_text(app.screen)
        assert f"trains: advantage {0.5 / (0.5 + EPS):+.4f}" in text and "3 episodes of task a" in text
        assert text.index("trains: advantage") < text.index("training rows (strict")
