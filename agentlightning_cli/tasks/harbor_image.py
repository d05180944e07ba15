"""The images Harbor tasks run in, had before the round: `[environment].docker_image` as given (present, or pulled
like any task image), else built from the task's environment/Dockerfile with the container runtime in use.

A built image is tagged by the content hash of its build context (tasks/harbor.py: context_hash), so an unchanged
task is never rebuilt and two tasks with the same environment share one image. Each build streams its output as
progress, is killed at the task's `build_timeout_sec`, and every task that cannot build is named in one error
before any episode starts (never one failed episode per attempt)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Callable

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks.model import Task

REPOSITORY = "localhost/alight-harbor"
LABEL_TASK = "alight.harbor.task"
LOG_TAIL = 25


def built_image_name(context_sha256: str) -> str:
    return f"{REPOSITORY}:{context_sha256[:32]}"


def task_images(runtime: str, flags: tuple[str, ...] | list[str], tasks: list[Task],
                log: Callable[[str], None] | None = None) -> dict[str, str]:
    """task id -> the image its episodes run in, for every Harbor task (built here when needed). AlightError
    naming every task whose image cannot be built; prebuilt `docker_image`s are left to ensure_images."""
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    images: dict[str, str] = {}
    failed: list[str] = []
    for task in tasks:
        h = task.harbor
        if h is None:
            continue
        if h.docker_image is not None:
            images[task.id] = h.docker_image
            continue
        name = built_image_name(h.context_sha256)
        images[task.id] = name
        if _exists(runtime, name):
            continue
        try:
            build(runtime, flags, task, name, say)
        except AlightError as exc:
            failed.append(f"{task.id} ({h.task_dir / 'environment' / 'Dockerfile'}): {exc.message}")
    if failed:
        raise AlightError(f"{len(failed)} Harbor task image(s) cannot be built:\n  " + "\n  ".join(failed),
                          "fix the Dockerfile, make its base image present (`podman load -i FILE`), or raise "
                          "[environment].build_timeout_sec; the build log's last lines are above")
    return images


def build(runtime: str, flags: tuple[str, ...] | list[str], task: Task, name: str, say: Callable[[str], None]) -> None:
    """`runtime build` of the task's environment/ folder into `name`, its output streamed to `say`, killed (the
    whole process group) after build_timeout_sec. AlightError with the log's last lines when it fails."""
    from agentlightning_cli.sandbox.container import ulimit_args

    h = task.harbor
    argv = [runtime, *flags, "build", "-t", name, "--label", f"{LABEL_TASK}={task.id}",
            "-f", str(h.build_context / "Dockerfile")]
    if Path(runtime).name == "podman":
        # chroot isolation: RUN steps are this build's own child processes, so the timeout's kill of its process
        # group stops them (with an OCI runtime they outlive a killed `podman build`, reparented to init).
        argv += ["--isolation", "chroot", "--force-rm", *ulimit_args()]
    argv.append(str(h.build_context))
    say(f"alight: building the image of {task.id} ({name}, at most {h.build_timeout_s:g}s)")
    started = time.monotonic()
    before = _working_containers(runtime, flags)
    tail: deque[str] = deque(maxlen=LOG_TAIL)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    timer = _Deadline(proc, h.build_timeout_s)
    try:
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            say(f"  {task.id}: {line.rstrip()}")
        proc.wait()
    finally:
        timer.cancel()
    log = "\n".join(f"    {line}" for line in tail)
    if timer.fired:
        # A killed podman build leaves its buildah working container (storage only): the one that appeared
        # while it ran. (SIGINT does not end a RUN step any sooner, so there is no gentler stop to wait for.)
        for cid in _working_containers(runtime, flags) - before:
            subprocess.run([runtime, *flags, "rm", "-f", cid], capture_output=True, timeout=120)
        raise AlightError(f"the build took longer than build_timeout_sec = {h.build_timeout_s:g}s and was stopped"
                          f"\n{log}")
    if proc.returncode != 0:
        raise AlightError(f"`{Path(runtime).name} build` exited {proc.returncode}\n{log}")
    say(f"alight: built {name} for {task.id} in {time.monotonic() - started:.1f}s")


class _Deadline:
    """Kills a build's process group once its time is up (a thread: the build's output is read meanwhile)."""

    def __init__(self, proc: subprocess.Popen, seconds: float):
        import threading

        self.fired = False
        self._proc = proc
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()


def _exists(runtime: str, image: str) -> bool:
    return subprocess.run([runtime, "image", "inspect", image], capture_output=True, timeout=120).returncode == 0


def _working_containers(runtime: str, flags: tuple[str, ...] | list[str]) -> set[str]:
    """podman's buildah working containers (`ps --external`, named `...-working-container[-N]`); none for docker."""
    if Path(runtime).name != "podman":
        return set()
    proc = subprocess.run([runtime, *flags, "ps", "-a", "--external", "--format", "{{.ID}} {{.Names}}"],
                          capture_output=True, text=True, timeout=120)
    rows = (line.split() for line in proc.stdout.splitlines())
    return {row[0] for row in rows if len(row) == 2 and "working-container" in row[1]}
