"""Start one command in a sandbox and watch it: the glue the harness runner and the task shells share.

    box = Sandbox(spec)                                    # makes the episode's cgroup (where possible)
    argv = box.command(argv, cwd)                          # bwrap ... -- forwarder (PID 1, sets rlimits) -- argv
    proc = Popen(argv, env=env, **box.popen_kwargs())      # no preexec_fn, no program in front of bwrap
    box.started(proc.pid)                                  # the watchdog joins the cgroup, then watches
    ...wait...  (box.signal(SIGTERM) asks the command to stop, with a grace before the kill)
    box.close()                                            # -> box.limit / box.breach when a limit ended it

Killing `proc` (bubblewrap) ends everything inside: the sandbox's first process dies with its parent
(--die-with-parent) and a PID namespace does not outlive its first process.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Mapping

from agentlightning_cli.sandbox import bwrap
from agentlightning_cli.sandbox.limits import MB, PidsCgroup, rlimit_arg
from agentlightning_cli.sandbox.watchdog import Watchdog

# A child killed by one of these died of a per-process rlimit (the forwarder exits 128 + N for it).
SIGNAL_LIMITS = {signal.SIGXCPU: "cpu_time", signal.SIGXFSZ: "file_size"}
CANNOT_START = "sandbox: cannot start "
"""How forwarder.py says the command's program does not exist (or cannot run) inside the sandbox."""


class Sandbox:
    def __init__(self, spec: bwrap.SandboxSpec, bwrap_exe: str | None = None, watch_interval_s: float = 0.05):
        self.spec = spec
        self.bwrap = bwrap_exe or bwrap.ensure_available()
        # A little headroom over the limit: the forwarder (PID 1) is counted too.
        self.cgroup = PidsCgroup.create(spec.limits.processes + 1)
        # bubblewrap writes its first process's pid to info; with a cgroup it then waits on block until the
        # watchdog has moved that process in (a cgroup v1 move waits ~10 ms for an RCU grace period: done
        # meanwhile, not in a program in front of bwrap).
        self._info_r, self._info_w = os.pipe()
        self._block_r, self._block_w = os.pipe() if self.cgroup is not None else (None, None)
        self.watch_interval_s = watch_interval_s
        self.watchdog: Watchdog | None = None
        self.limit: str | None = None
        self.breach: str | None = None

    def command(self, argv: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> list[str]:
        """`env` is what the command will be started with; bubblewrap passes it through as it is."""
        return bwrap.command(self.spec, argv, cwd, self.bwrap, info_fd=self._info_w, block_fd=self._block_r,
                             rlimits=rlimit_arg(self.spec.limits))

    def popen_kwargs(self) -> dict[str, Any]:
        return {"pass_fds": tuple(fd for fd in (self._info_w, self._block_r) if fd is not None)}

    def started(self, pid: int) -> None:
        for fd in (self._info_w, self._block_r):
            if fd is not None:
                os.close(fd)
        self._info_w = self._block_r = None
        self.watchdog = Watchdog(self.spec.limits, pid, self.cgroup, self._info_r, self._block_w,
                                 self.watch_interval_s).start()
        self._info_r = self._block_w = None  # the watchdog reads and closes them

    def signal(self, sig: int, wait_s: float = 2.0) -> bool:
        """Send `sig` to the sandbox's PID 1 (the forwarder), which passes it on to the command: a polite stop
        that leaves the namespace standing. False when that process is not known (yet): kill instead."""
        pid = self.watchdog.inner_pid(wait_s) if self.watchdog is not None else None
        if pid is None:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def exit_limit(self, exit_code: int | None) -> None:
        """The forwarder exits 128+N when the command died of signal N: SIGXCPU/SIGXFSZ are limits too."""
        if self.limit is None and (found := limit_from_exit(exit_code)) is not None:
            self.limit, self.breach = found

    def close(self) -> None:
        """Stop watching; record a breach; remove the cgroup. Call once the sandbox process has exited."""
        if self.watchdog is not None:
            self.watchdog.stop()
            if self.watchdog.breach is not None:
                self.limit, self.breach = self.watchdog.limit_name, self.watchdog.breach
        for fd in (self._info_r, self._info_w, self._block_r, self._block_w):
            if fd is not None:
                os.close(fd)
        self._info_r = self._info_w = self._block_r = self._block_w = None
        if self.limit is None:
            # A write past RLIMIT_FSIZE fails (EFBIG, or SIGXFSZ for the writer) without ending anything: a
            # file left at exactly the limit is how we learn that a command hit it.
            big = file_at_limit(self.spec.writable, self.spec.limits.file_size_mb * MB)
            if big is not None:
                self.limit = "file_size"
                self.breach = f"file_size: {big} reached the {self.spec.limits.file_size_mb} MB limit"
        if self.cgroup is not None:
            for pid in self.cgroup.procs():  # nothing should be left; a stray is killed, never kept
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.cgroup.remove()

    @property
    def peak(self) -> dict[str, float]:
        return dict(self.watchdog.peak) if self.watchdog else {}


def limit_from_exit(exit_code: int | None) -> tuple[str, str] | None:
    """(limit, breach) when the sandbox's PID 1 (the forwarder) exited 128+N for a command killed by a limit's
    signal (SIGXCPU, SIGXFSZ); None otherwise."""
    if exit_code is None or exit_code <= 128:
        return None
    name = SIGNAL_LIMITS.get(exit_code - 128)  # type: ignore[call-overload]
    if name is None:
        return None
    return name, f"{name}: the command was killed by {signal.Signals(exit_code - 128).name}"


def file_at_limit(roots: list[Path], limit: int, budget: int = 200_000) -> str | None:
    """The first regular file of exactly `limit` bytes under roots (bounded walk, symlinks not followed)."""
    stack = [str(r) for r in roots]
    while stack and budget > 0:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        budget -= len(entries)
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_size >= limit:
                    return entry.path
            except OSError:
                continue
    return None
