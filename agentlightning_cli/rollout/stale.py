"""What a run leaves when it dies (`kill -9`, a crash, a power cut), found and removed by the next run.

Every process an episode starts carries a marker of the run directory in its environment: harnesses get
HOME=<run_dir>/harness/<episode>/home, setup and reward shells TASK_WORKSPACE=<run_dir>/workspaces/<episode>.
So the next run (and an interrupted one, on its way out) can find them in /proc and kill them, even those
that left their process group. A lock file keeps two live runs from sharing one run directory.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
from pathlib import Path
from typing import Iterable

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks import patch_base_dir

LOCK_NAME = "run.lock"


def workspaces_root(run_dir: Path) -> Path:
    return Path(run_dir).absolute() / "workspaces"


def harness_root(run_dir: Path) -> Path:
    return Path(run_dir).absolute() / "harness"


def run_processes(run_dir: Path) -> list[int]:
    """PIDs (not this process) whose environment marks them as belonging to an episode of this run."""
    needles = [f"\0HOME={harness_root(run_dir)}/".encode(), f"\0TASK_WORKSPACE={workspaces_root(run_dir)}/".encode()]
    me, found = os.getpid(), []
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = b"\0" + (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(n in env for n in needles):
            found.append(int(entry.name))
    return found


def kill_run_processes(run_dir: Path) -> list[int]:
    """SIGKILL every process of this run's episodes; returns those that were there."""
    pids = run_processes(run_dir)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return pids


def remove_leftovers(run_dir: Path, episode_ids: Iterable[str]) -> int:
    """Delete the half-made workspaces, private harness folders and patch bases of episodes that never ended."""
    removed = 0
    for ep in episode_ids:
        for folder in (workspaces_root(run_dir) / ep, harness_root(run_dir) / ep, patch_base_dir(run_dir, ep)):
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    return removed


class RunLock:
    """An exclusive lock on the run directory for as long as this run is alive (the kernel drops it on death)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fh = None

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise AlightError(f"run directory {self.path.parent} is in use by a running alight (pid {holder})",
                              "wait for it to finish or stop it (Ctrl-C), then run the command again") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
