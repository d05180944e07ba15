"""Experiment trackers (`train.report_to`, `--report-to`): TensorBoard, MLflow, Weights & Biases, Trackio.

One tracker run per alight run, resumed with it, on one step axis for the whole run:
- the step is the optimizer steps trained so far in the run (the store's train_rounds): round n's rollout metrics
  go at step_of(n); its training's TRL steps at step_of(n) + 1 .. step_of(n) + steps; the training summary at the
  end of that training (= step_of(n + 1)). TRL restarts `global_step` at 0 with every round's trainer; this offset
  makes the run's steps only ever grow, across rounds and across a resume (the offset comes from the store).
- the trackers' run ids are kept in RUN_DIR/trackers.json, so a resumed `alight run` or a later `alight train` of
  the same run opens the same MLflow run (its run_id), wandb run (its id, resume="allow"), trackio run (its name,
  resume="allow") and TensorBoard folder.

Why alight logs the trainer's metrics itself and gives TRL `report_to="none"`: transformers' integration callbacks
(MLflowCallback, WandbCallback, TrackioCallback, TensorBoardCallback) are built per Trainer, i.e. per round, and
each assumes the trainer owns the tracker run: MLflowCallback and TrackioCallback end the run at on_train_end,
every one logs at `state.global_step` (0 again each round; wandb drops a step lower than its last), MLflowCallback
logs the round's TrainingArguments as params again (MLflow refuses a param whose value changed: max_steps,
output_dir), MLflow's active run is thread-local while `alight run` trains each round in a new thread, and under
`accelerate launch` (train.processes > 1) the callbacks live in the training processes, not in alight's. So the
trainer's own log dicts (what those callbacks would get: loss, grad_norm, TRL's clip and reward metrics and
alight's importance-weight ones), collected by StepLog and relayed to alight's process in every mode, go to the
trackers here, under `train/` as transformers names them. A user who wants TRL's callbacks anyway can still set
train.grpo.report_to.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError
from agentlightning_cli.train.tracker_backends import BACKENDS, MODULES

IDS_FILE = "trackers.json"


def requested(report_to: list[str] | str | None) -> list[str]:
    """The trackers named (a list, or one comma-separated string), `none` dropped; unknown names refused."""
    items = [report_to] if isinstance(report_to, str) else list(report_to or [])
    names = [n.strip() for item in items for n in str(item).split(",") if n.strip()]
    unknown = [n for n in names if n != "none" and n not in BACKENDS]
    if unknown:
        raise AlightError(f"unknown tracker(s) in train.report_to / --report-to: {', '.join(unknown)}",
                          hint=f"use any of {', '.join(BACKENDS)}, or none")
    if "none" in names and len(set(names)) > 1:
        raise AlightError(f"train.report_to / --report-to names `none` together with trackers: {', '.join(names)}",
                          hint="give the trackers, or none alone")
    return list(dict.fromkeys(n for n in names if n != "none"))


def check_installed(names: list[str]) -> None:
    """Refuse, before anything starts, a tracker that is not installed, with the pip command that installs it."""
    missing = [n for n in names if importlib.util.find_spec(MODULES[n]) is None]
    if missing:
        extras = ",".join(missing)
        raise AlightError(f"train.report_to asks for {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
                          f" not installed in {sys.prefix}",
                          hint=f"{sys.executable} -m pip install 'agentlightning-cli[{extras}]' (in a source checkout:"
                               f" pip install -e '.[{extras}]'), or drop it from --report-to")


class Tracker:
    """The trackers of one alight run. With no tracker named, every method does nothing."""

    def __init__(self, backends: list[Any], run_dir: Path | None = None):
        self.backends = backends
        self.run_dir = run_dir

    @classmethod
    def open(cls, report_to: list[str] | str | None, run_dir: Path, run_name: str) -> "Tracker":
        names = requested(report_to)
        if not names:
            return cls([])
        check_installed(names)
        run_dir = Path(run_dir).absolute()
        path = run_dir / IDS_FILE
        saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        backends = []
        for name in names:
            backend = BACKENDS[name]()
            saved[name] = backend.open(run_dir, run_name, saved.get(name) or {})
            backends.append(backend)
            # written after each: a tracker that fails to open leaves the ids of those that did for the resume
            path.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
        return cls(backends, run_dir)

    def log_round(self, step: int, metrics: dict[str, Any]) -> None:
        """Log `metrics` (name -> number; None, NaN and non-numbers are left out) to every tracker at `step`.
        The public entry for any per-round numbers, e.g. held-out evaluation: tracker.log_round(step, {...})."""
        clean = {k: float(v) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        if not clean:
            return
        for backend in self.backends:
            backend.log(int(step), clean)

    def log_once(self, key: str, step: int, metrics: dict[str, Any]) -> None:
        """log_round, unless `key` (e.g. `round:3`) was logged before in this alight run: a resumed run walks its
        finished rounds again, and would otherwise draw each of them twice. Remembered in trackers.json."""
        if not self.backends or self.run_dir is None:
            return
        path = self.run_dir / IDS_FILE
        saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if key in saved.get("logged", []):
            return
        self.log_round(step, metrics)
        saved["logged"] = [*saved.get("logged", []), key]
        path.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")

    def log_trainer_step(self, offset: int, entry: dict[str, Any]) -> None:
        """One logged optimizer step of a round's trainer (StepLog's entry), at the run's step offset + its own."""
        if self.backends:
            self.log_round(offset + int(entry["step"]), {f"train/{k}": v for k, v in entry.items() if k != "step"})

    def close(self) -> None:
        for backend in self.backends:
            try:
                backend.close()
            except Exception as exc:  # noqa: BLE001 - a tracker that cannot close must not hide the run's result
                print(f"alight: could not close the {backend.name} tracker run: {exc}", file=sys.stderr, flush=True)
        self.backends = []

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()


def step_of(store: Any, run_id: str, round_index: int) -> int:
    """The run's step at the start of round `round_index`: the optimizer steps every earlier round trained."""
    return sum(tr.steps for tr in store.list_train_rounds(run_id) if tr.round_idx < round_index)
