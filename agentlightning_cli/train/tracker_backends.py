"""The four experiment trackers `train.report_to` names, each behind the same three methods: open (start or resume
its run), log(step, metrics), close. Each keeps its own run object instead of the tracker's process-global "active
run", because `alight run` trains each round in a new thread (MLflow's active run is thread-local) and TRL's own
integration callbacks end or restart that global run with every trainer (see trackers.py).

Offline by default: TensorBoard event files and MLflow's SQLite store in the run folder, wandb in offline mode (its
files under the run folder; `wandb sync` uploads them later), trackio in its local database (TRACKIO_DIR, default
~/.cache/huggingface/trackio, where `trackio show` looks). The environment variables each tracker documents still
win: MLFLOW_TRACKING_URI / MLFLOW_EXPERIMENT_NAME, WANDB_MODE / WANDB_PROJECT / WANDB_DIR, TRACKIO_DIR.
Heavy imports (torch's SummaryWriter, mlflow, wandb, trackio) happen in open() only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

PROJECT = "alight"  # wandb project, MLflow experiment and trackio project when the environment names none


class TensorBoard:
    name = "tensorboard"

    def open(self, run_dir: Path, run_name: str, saved: dict[str, Any]) -> dict[str, Any]:
        from torch.utils.tensorboard import SummaryWriter

        # One folder for the whole run: each open (a resume, `alight train`) adds an event file beside the earlier
        # ones, and TensorBoard reads a folder's files as one run.
        folder = Path(saved.get("dir") or run_dir / "logs" / "tensorboard")
        self.writer = SummaryWriter(log_dir=str(folder))
        return {"dir": str(folder)}

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class MLflow:
    name = "mlflow"

    def open(self, run_dir: Path, run_name: str, saved: dict[str, Any]) -> dict[str, Any]:
        from mlflow import MlflowClient

        # SQLite, not ./mlruns: MLflow 3 refuses its file store unless MLFLOW_ALLOW_FILE_STORE is set.
        uri = saved.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{run_dir / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=uri)
        run_id = saved.get("run_id")
        if run_id is None:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT
            found = self.client.get_experiment_by_name(name)
            experiment = found.experiment_id if found else self.client.create_experiment(name)
            run_id = self.client.create_run(experiment, run_name=run_name, tags={"alight.run_dir": str(run_dir)}).info.run_id
        else:  # a resumed alight run: the same MLflow run, marked running again (close() ended it)
            self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id
        return {"tracking_uri": uri, "run_id": run_id}

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(_mlflow_key(k), v, now, step) for k, v in metrics.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class Wandb:
    name = "wandb"

    def open(self, run_dir: Path, run_name: str, saved: dict[str, Any]) -> dict[str, Any]:
        import wandb

        run_id = saved.get("id") or uuid.uuid4().hex[:12]  # kept in trackers.json: the resume's WANDB_RUN_ID
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or saved.get("project") or PROJECT, name=run_name, id=run_id,
            resume="allow", mode=os.environ.get("WANDB_MODE") or "offline", dir=os.environ.get("WANDB_DIR") or str(run_dir),
            reinit="create_new", settings=wandb.Settings(console="off", silent=True))
        # wandb drops a step= lower than its last one. Its x-axis is therefore alight's step as a metric
        # (`alight/step`, as transformers' callback uses train/global_step), never wandb's own step counter.
        self.run.define_metric("alight/step")
        self.run.define_metric("*", step_metric="alight/step")
        return {"id": run_id, "project": self.run.project}

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({**metrics, "alight/step": step})

    def close(self) -> None:
        self.run.finish()


class Trackio:
    name = "trackio"

    def open(self, run_dir: Path, run_name: str, saved: dict[str, Any]) -> dict[str, Any]:
        import trackio

        project = saved.get("project") or PROJECT
        # resume="allow" finds the run by name in the project; its steps are ours (log passes step=).
        with contextlib.redirect_stdout(sys.stderr):  # trackio prints its banner on stdout, which is --json's
            self.run = trackio.init(project=project, name=saved.get("name") or run_name, resume="allow",
                                    space_id=None, embed=False, auto_log_gpu=False, auto_log_cpu=False)
        return {"project": project, "name": self.run.name, "id": self.run.id}

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            self.run.finish()


BACKENDS = {b.name: b for b in (TensorBoard, MLflow, Wandb, Trackio)}
MODULES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb", "trackio": "trackio"}


def _mlflow_key(key: str) -> str:
    # MLflow refuses some characters TRL's keys may hold (as transformers' MLflowCallback also rewrites).
    import re

    return re.sub(r"[^0-9A-Za-z_\-. :/]", "_", key)
