"""Process groups: start a child in its own group, signal the group, escalate to SIGKILL after a grace, reap,
and report what survived. Used by vLLM (serve/vllm.py), harness episodes (harness/runner.py) and the setup and
reward shells (tasks/shell.py), so there is one way to stop a process tree.

Killing the group is not always enough: mini-SWE-agent runs each command in a new session, and OpenHands' tmux
server daemonises. So a harness episode also gets a marker variable that everything it starts inherits; after
the episode every process carrying the marker is killed (Linux: read from /proc/<pid>/environ; elsewhere only
the process group is killed).

Imports nothing of alight (bottom layer).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

MARKER_VAR = "AGENT_EPISODE_MARKER"
"""Not ALIGHT_-prefixed: alight reads ALIGHT_* variables as its own settings."""

_PROC = Path("/proc")


def start(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """Popen in a new session: the child leads its own process group, so one signal reaches its whole tree."""
    return subprocess.Popen(argv, start_new_session=True, **popen_kwargs)


async def start_async(argv: list[str], **kwargs: Any) -> asyncio.subprocess.Process:
    """asyncio's subprocess in a new session (see `start`)."""
    return await asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs)


def signal_group(pgid: int, sig: int) -> None:
    """Signal a whole group; a group that is gone (or not ours) is not an error."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid` (Linux /proc; empty elsewhere). Zombies are not counted."""
    found: list[int] = []
    if not _PROC.is_dir():
        return found
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces and parentheses): state, ppid, pgrp, ...
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def stop(proc: subprocess.Popen, grace_s: float, sig: int = signal.SIGTERM) -> list[int]:
    """Stop a group leader started with `start`: `sig` to the group, SIGKILL after `grace_s`, reap the leader,
    then SIGKILL whatever of the group is still there (children outlive a leader that exits first).
    Returns the pids that survived the polite signal and had to be killed. Idempotent."""
    pgid = proc.pid
    if proc.poll() is None:
        signal_group(pgid, sig)
        try:
            proc.wait(timeout=grace_s if grace_s > 0 else 0.2)
        except subprocess.TimeoutExpired:
            pass
    survivors = group_members(pgid)
    signal_group(pgid, signal.SIGKILL)
    proc.wait()
    return survivors


# --- harness episodes: the marker variable ---------------------------------------------------------------

def marked_processes(marker: str) -> list[int]:
    needle = f"{MARKER_VAR}={marker}\0".encode()
    found: list[int] = []
    if not _PROC.is_dir():
        return found
    me = os.getpid()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if needle in (entry / "environ").read_bytes() + b"\0":
                found.append(int(entry.name))
        except OSError:
            continue  # gone already, or not ours to read
    return found


def terminate(pgid: int, marker: str, sig: int) -> None:
    """The polite stop: the group and every marked process get `sig` (e.g. SIGTERM)."""
    signal_group(pgid, sig)
    signal_all(marked_processes(marker), sig)


def kill_leftovers(pgid: int, marker: str) -> list[int]:
    """SIGKILL whatever is left of the episode; returns the pids that were still there."""
    signal_group(pgid, signal.SIGKILL)
    left = marked_processes(marker)
    signal_all(left, signal.SIGKILL)
    return left
