"""Find and kill every process an episode started, even those that left its process group.

Killing the group is not enough: mini-SWE-agent runs each command in a new session, and OpenHands' tmux
server daemonises. Every process the harness starts inherits a per-episode marker variable, so after the
episode all processes carrying it are killed (Linux: read from /proc/<pid>/environ; elsewhere only the
process group is killed).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

MARKER_VAR = "AGENT_EPISODE_MARKER"
"""Not ALIGHT_-prefixed: alight reads ALIGHT_* variables as its own settings."""

_PROC = Path("/proc")


def marked_processes(marker: str) -> list[int]:
    needle = f"{MARKER_VAR}={marker}\0".encode()
    found = []
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


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate(pgid: int, marker: str, sig: int) -> None:
    """The polite stop: the group and every marked process get `sig` (e.g. SIGTERM)."""
    killpg(pgid, sig)
    signal_all(marked_processes(marker), sig)


def kill_leftovers(pgid: int, marker: str) -> list[int]:
    """SIGKILL whatever is left of the episode; returns the pids that were still there."""
    killpg(pgid, signal.SIGKILL)
    left = marked_processes(marker)
    signal_all(left, signal.SIGKILL)
    return left
