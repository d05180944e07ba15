"""bench/learn.py, the learning benchmark's driver, on synthetic `alight run --json` summaries (its pure part: the
results file's merge, the held-out change with its task-clustered paired interval, the summary and its answers)
and the `alight run` command and settings file it builds. The ~100-minute runs themselves are a benchmark, not a
test; `--smoke` runs the driver end to end on the tiny model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agentlightning_cli.rollout.intervals import paired_interval

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_learn", ROOT / "bench" / "learn.py")
learn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(learn)

TASKS = ["t1", "t2", "t3", "t4"]


def evaluation(trainings: int, pass1: list[float], attempts: int = 4) -> dict:
    per_task = [{"task_id": t, "attempts": attempts, "solved": round(p * attempts), "pass_at_1": p,
                 "pass_at_k": float(p > 0), "mean_reward": p / 2 + 0.25} for t, p in zip(TASKS, pass1)]
    ci = {"estimate": sum(pass1) / len(pass1), "low": 0.0, "high": 1.0}
    return {"round": trainings, "trainings": trainings, "policy": f"policy-r{trainings}", "status": "done",
            "episodes": attempts * len(TASKS), "unscored": 0, "k": attempts, "train_reward": 0.3,
            "pass_at_1": ci, "pass_at_k": ci, "mean_reward": ci, "per_task": per_task}


def summary(before: list[float], after: list[float]) -> dict:
    """What `alight run --rounds 5 --eval-task-set ... --eval-every 4 --json` prints, cut to what the driver reads."""
    return {"run": "r", "round": 4, "k": 8, "episodes": 64,
            "evaluations": [evaluation(0, before), evaluation(4, after)]}


BASE = [0.0, 0.25, 0.0, 0.0]
CONFIG = {**learn.configuration(learn.DEFAULTS), "heldout_tasks": TASKS}


def test_a_run_entry_keeps_each_evaluation_per_task_and_the_paired_held_out_change():
    entry = learn.run_entry(summary(BASE, [0.5, 0.25, 0.25, 0.0]), arm="learn", seed=3, note="first try")
    assert [e["trainings"] for e in entry["evaluations"]] == [0, 4]
    assert entry["evaluations"][1]["per_task"][0] == {"task_id": "t1", "attempts": 4, "solved": 2, "pass_at_1": 0.5,
                                                      "pass_at_k": 1.0, "mean_reward": 0.5}
    change = entry["heldout_change"]
    expected = paired_interval(BASE, [0.5, 0.25, 0.25, 0.0]).to_json()
    assert change["pass_at_1"] == expected and change["pass_at_1"]["estimate"] == pytest.approx(0.1875)
    assert change["mean_reward"]["estimate"] == pytest.approx(0.1875 / 2)
    assert (change["from_trainings"], change["to_trainings"], change["tasks"]) == (0, 4, 4)
    assert entry["reward_control"] == "none" and entry["note"] == "first try"


def test_the_change_needs_round_0_and_a_trained_evaluation_of_the_same_tasks():
    with pytest.raises(ValueError, match="needs round 0's evaluation"):
        learn.heldout_change([evaluation(4, BASE)])
    other = evaluation(4, BASE)
    other["per_task"][0]["task_id"] = "t9"
    with pytest.raises(ValueError, match="other tasks: \\['t1', 't9'\\]"):
        learn.heldout_change([evaluation(0, BASE), other])


def test_runs_merge_per_arm_and_seed_and_the_summary_answers_both_questions(tmp_path: Path):
    results = None
    for arm, seed, after in [("learn", 0, [0.5, 0.5, 0.25, 0.25]), ("learn", 1, [0.25, 0.25, 0.0, 0.0]),
                             ("shuffled", 0, [0.0, 0.25, 0.0, 0.0])]:
        results = learn.merge(results, learn.run_entry(summary(BASE, after), arm=arm, seed=seed), CONFIG)
        results = json.loads(json.dumps(results))  # as stored: what the next invocation reads back
    assert sorted(results["runs"]) == ["learn", "shuffled"] and sorted(results["runs"]["learn"]) == ["0", "1"]
    arms = results["summary"]["arms"]
    assert arms["learn"]["mean_change"]["pass_at_1"] == pytest.approx((0.3125 + 0.0625) / 2, abs=1e-4)
    assert arms["shuffled"]["mean_change"]["pass_at_1"] == 0.0
    versus = results["summary"]["learn_minus_shuffled"]
    assert list(versus) == ["0"]
    assert versus["0"]["pass_at_1"] == paired_interval([0.0, 0.25, 0.0, 0.0], [0.5, 0.5, 0.25, 0.25]).to_json()
    assert versus["0"]["mean_reward"] == paired_interval([0.25, 0.375, 0.25, 0.25],
                                                         [0.5, 0.5, 0.375, 0.375]).to_json()
    verdict = results["summary"]["verdict"]
    # Seed 1 gains on one task only: its interval reaches 0, so the gain does not hold on every seed.
    assert results["summary"]["arms"]["learn"]["change"]["1"]["pass_at_1"]["low"] == 0.0
    assert verdict["positive_on_every_seed"] is True and verdict["gain_on_every_seed"] is False
    assert verdict["exceeds_shuffled"] is True and verdict["exceeds_shuffled_on_every_paired_seed"] is True
    assert "The gain does not hold on every seed." in verdict["text"][0]
    assert "mean change exceeds it" in verdict["text"][1]
    lines = learn.render(results)
    assert any(line.startswith("learn        1") for line in lines), lines
    assert any(line.startswith("seed 0: learn - shuffled after the last training, pass@1 +0.312")
               and "mean reward +0.156" in line for line in lines), lines
    assert lines[-2:] == verdict["text"]


def test_summary_recomputes_a_stored_summary_from_the_runs_and_stores_it(tmp_path: Path, monkeypatch, capsys):
    results = None
    for arm, after in [("learn", [0.5, 0.5, 0.25, 0.25]), ("shuffled", [0.0, 0.25, 0.0, 0.0])]:
        results = learn.merge(results, learn.run_entry(summary(BASE, after), arm=arm, seed=0), CONFIG)
    fresh = json.loads(json.dumps(results["summary"]))
    results["summary"]["learn_minus_shuffled"]["0"] = {"pass_at_1": fresh["learn_minus_shuffled"]["0"]["pass_at_1"]}
    out = tmp_path / "learn.json"
    out.write_text(json.dumps(results))  # as an older script left it: no learn - shuffled on mean reward
    monkeypatch.setattr("sys.argv", ["learn.py", "--summary", "--out", str(out)])
    learn.main()
    stored = json.loads(out.read_text())
    assert stored["summary"] == fresh and stored["runs"] == json.loads(json.dumps(results["runs"]))
    assert "mean reward +0.156" in capsys.readouterr().out


def test_the_results_file_refuses_another_configuration_a_stored_seed_and_the_earlier_benchmark():
    entry = learn.run_entry(summary(BASE, BASE), arm="learn", seed=0)
    results = learn.merge(None, entry, CONFIG)
    with pytest.raises(SystemExit, match="another configuration \\(rounds differ\\)"):
        learn.merge(results, entry, {**CONFIG, "rounds": 3})
    with pytest.raises(SystemExit, match="arm learn seed 0 is already in the results file: pass --replace"):
        learn.merge(results, entry, CONFIG)
    again = learn.merge(results, {**entry, "note": "rerun"}, CONFIG, replace=True)
    assert again["runs"]["learn"]["0"]["note"] == "rerun"
    earlier = json.loads((ROOT / "bench" / "results" / "learn-2026-11.json").read_text())
    with pytest.raises(SystemExit, match="holds the earlier benchmark"):
        learn.check_mergeable(earlier, CONFIG, "learn", 0)


def test_the_default_run_is_one_alight_run_with_the_held_out_set_evaluated_at_round_0_and_after_the_last_training():
    config = learn.configuration(learn.DEFAULTS)
    assert len(config["heldout_tasks"]) >= 24 and config["eval_attempts"] >= 4
    assert not set(config["heldout_tasks"]) & set(learn.task_ids(learn.TRAIN, None))
    cmd = learn.command(config, 2, Path("/w/run"), learn.HELDOUT)
    flags = dict(zip(cmd[1::2], cmd[2::2]))
    assert cmd[0] == "run" and "--json" in cmd
    assert flags["--rounds"] == "5" and flags["--eval-every"] == "4"  # 4 trainings: evaluated after 0 and 4 only
    assert flags["--eval-task-set"] == str(learn.HELDOUT) and flags["--seed"] == "2"
    assert learn.settings_file(config, "learn", 2)["train"] == {
        "learning_rate": 5e-4, "epochs": 2, "batch_size": 8, "grad_accum": 1, "seed": 2, "reward_control": "none"}
    assert learn.settings_file(config, "shuffled", 2)["train"]["reward_control"] == "shuffle"
