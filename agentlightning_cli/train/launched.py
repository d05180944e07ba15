"""Training a round under `accelerate launch`: train.processes > 1 (DDP) or train.accelerate_config (FSDP,
DeepSpeed, several machines, as accelerate is configured).

The round's GRPORun (rows with their advantages, settings, base model, previous adapter) is written to a folder
of its own; `accelerate launch ... -m agentlightning_cli.train.launched FOLDER` starts the processes, each builds
the same trainer (train/launched_process.py -> grpo.train) and TRL/accelerate shard the rows between them (each takes batch_size / N
rows of every optimizer step; the gradients are averaged, and TRL's loss normalisation counts the tokens of all
processes). The main process alone writes the adapter, each step's metrics (steps.jsonl, read back here for the
store as they arrive) and the result (result.json). One process gives the same adapter within float tolerance
(tests/test_train_accelerate.py).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError

INSIDE = "ALIGHT_TRAIN_LAUNCHED"
"""Set in the launched processes: there, grpo.train trains in place."""


def wanted(settings: Any) -> bool:
    return settings.processes > 1 or bool(settings.accelerate_config)


def inside() -> bool:
    return os.environ.get(INSIDE) == "1"


def launch_argv(settings: Any, folder: Path) -> list[str]:
    """accelerate's own launcher, by module (the one installed beside alight), around this module."""
    argv = [sys.executable, "-m", "accelerate.commands.launch"]
    if settings.accelerate_config:
        config = Path(settings.accelerate_config).expanduser()
        if not config.is_file():
            raise AlightError(f"train.accelerate_config: {config} does not exist",
                              hint="write one with `accelerate config --config_file FILE`, or unset it")
        argv += ["--config_file", str(config)]
    else:
        # accelerate's multi-process launcher (torchrun underneath); on a machine without GPUs the processes find
        # no CUDA, the trainer asks for the CPU and accelerate joins them with gloo. (Its --cpu launcher would want
        # MPI for more than one process.)
        argv += ["--multi_gpu", "--num_processes", str(settings.processes), "--num_machines", "1",
                 "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1",
                 "--main_process_port", str(_free_port())]
    return argv + ["-m", "agentlightning_cli.train.launched_process", str(folder)]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def train_launched(job: Any) -> dict[str, Any]:
    """What grpo.train returns (steps, metrics, importance; seconds), as a dict, trained by the launched
    processes (train/launched_process.py); their output goes to this process's stderr."""
    settings = job.settings
    if not settings.accelerate_config and settings.batch_size % settings.processes:  # said here, not in N tracebacks
        raise AlightError(f"train.batch_size {settings.batch_size} does not split over {settings.processes} training"
                          " processes", hint="make train.batch_size a multiple of train.processes (the rows per"
                                             " optimizer step)")
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="alight-train-"))
    on_step, job.on_step = job.on_step, None  # a callback does not cross processes: steps come back in a file
    try:
        with open(folder / "job.pkl", "wb") as fh:
            pickle.dump(job, fh)
        steps_file = folder / "steps.jsonl"
        env = {**os.environ, INSIDE: "1", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(launch_argv(job.settings, folder), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        tail: list[str] = []
        reader = threading.Thread(target=_keep_tail, args=(proc.stdout, tail), daemon=True)
        reader.start()
        seen = 0
        while proc.poll() is None:
            seen = _new_steps(steps_file, seen, on_step)
            time.sleep(0.5)
        reader.join(10)
        seen = _new_steps(steps_file, seen, on_step)
        if proc.returncode != 0 or not (folder / "result.json").is_file():
            raise AlightError(f"training under accelerate launch failed (exit {proc.returncode}):\n" + "".join(tail[-40:]),
                              hint="the lines above are the training processes' own; train.processes: 1 trains in"
                                   " one process")
        result = json.loads((folder / "result.json").read_text())
    finally:
        job.on_step = on_step
        shutil.rmtree(folder, ignore_errors=True)
    return {**result, "seconds": time.perf_counter() - started}


def _keep_tail(stream: Any, tail: list[str]) -> None:
    for line in stream:
        sys.stderr.write(line)
        tail.append(line)
        del tail[:-200]


def _new_steps(path: Path, seen: int, on_step: Any) -> int:
    if on_step is None or not path.is_file():
        return seen
    text = path.read_text()
    lines = text.splitlines()
    complete = lines if text.endswith("\n") else lines[:-1]  # a line still being written waits for the next look
    for line in complete[seen:]:
        on_step(json.loads(line))
    return max(seen, len(complete))
