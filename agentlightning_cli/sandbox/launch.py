"""Start one command in a sandbox and watch it: the glue the harness runner and the task shells share.

    box = Sandbox(spec)                                    # makes the episode's cgroup (where possible)
    argv = box.command(argv, cwd)                          # bwrap ... -- forwarder ... -- argv
    proc = Popen(argv, env=env, **box.popen_kwargs())      # cgroup and rlimits set by sh/prlimit in front
    box.started(proc.pid)                                  # the watchdog starts
    ...wait...
    box.close()                                            # -> box.limit / box.breach when a limit ended it

Killing `proc` (bubblewrap) ends everything inside: the sandbox's first process dies with its parent
(--die-with-parent) and a PID namespace does not outlive its first process.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
from pathlib import Path
from typing import Any

from agentlightning_cli.sandbox import bwrap
from agentlightning_cli.sandbox.limits import MB, PidsCgroup, apply_rlimits, rlimits
from agentlightning_cli.sandbox.watchdog import Watchdog

_PRLIMIT = shutil.which("prlimit")

# A child killed by one of these died of a per-process rlimit (the forwarder exits 128 + N for it).
SIGNAL_LIMITS = {signal.SIGXCPU: "cpu_time", signal.SIGXFSZ: "file_size"}


class Sandbox:
    def __init__(self, spec: bwrap.SandboxSpec, bwrap_exe: str | None = None, watch_interval_s: float = 0.05):
        self.spec = spec
        self.bwrap = bwrap_exe or bwrap.ensure_available()
        # A little headroom over the limit: bubblewrap itself and its init are counted too.
        self.cgroup = PidsCgroup.create(spec.limits.processes + 2)
        self._info_r = self._info_w = None
        if self.cgroup is None:
            self._info_r, self._info_w = os.pipe()
        self.watch_interval_s = watch_interval_s
        self.watchdog: Watchdog | None = None
        self.limit: str | None = None
        self.breach: str | None = None

    def command(self, argv: list[str], cwd: Path) -> list[str]:
        """sh (joins the cgroup) -> prlimit (sets the rlimits) -> bwrap: both done by small programs in front,
        so the caller needs no preexec_fn (which makes Python fork its whole process instead of vfork: ~20 ms)."""
        inner = bwrap.command(self.spec, argv, cwd, self.bwrap, info_fd=self._info_w)
        if _PRLIMIT is not None:
            flags = {resource.RLIMIT_CPU: "--cpu", resource.RLIMIT_FSIZE: "--fsize", resource.RLIMIT_CORE: "--core"}
            inner = [_PRLIMIT, *(f"{flags[r]}={soft}:{hard}" for r, soft, hard in rlimits(self.spec.limits)),
                     "--", *inner]
        if self.cgroup is not None:
            # "0" moves the writing process (this sh) in; bwrap and all it starts inherit the cgroup.
            inner = ["/bin/sh", "-c", '{ echo 0 > "$1"; } 2>/dev/null; shift; exec "$@"', "sh",
                     self.cgroup.procs_file(), *inner]
        return inner

    def popen_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if _PRLIMIT is None:  # no prlimit program: set the limits in the child between fork and exec
            values = rlimits(self.spec.limits)
            kwargs["preexec_fn"] = lambda: apply_rlimits(values)
        if self._info_w is not None:
            kwargs["pass_fds"] = (self._info_w,)
        return kwargs

    def started(self, pid: int) -> None:
        if self._info_w is not None:
            os.close(self._info_w)
            self._info_w = None
        self.watchdog = Watchdog(self.spec.limits, pid, self.cgroup, self._info_r, self.watch_interval_s).start()
        self._info_r = None  # the watchdog reads and closes it

    def exit_limit(self, exit_code: int | None) -> None:
        """The forwarder exits 128+N when the command died of signal N: SIGXCPU/SIGXFSZ are limits too."""
        if self.limit is None and exit_code is not None and exit_code > 128:
            name = SIGNAL_LIMITS.get(exit_code - 128)  # type: ignore[call-overload]
            if name is not None:
                self.limit, self.breach = name, f"{name}: the command was killed by {signal.Signals(exit_code - 128).name}"

    def close(self) -> None:
        """Stop watching; record a breach; remove the cgroup. Call once the sandbox process has exited."""
        if self.watchdog is not None:
            self.watchdog.stop()
            if self.watchdog.breach is not None:
                self.limit, self.breach = self.watchdog.limit_name, self.watchdog.breach
        for fd in (self._info_r, self._info_w):
            if fd is not None:
                os.close(fd)
        self._info_r = self._info_w = None
        if self.limit is None:
            # A write past RLIMIT_FSIZE fails (EFBIG, or SIGXFSZ for the writer) without ending anything: a
            # file left at exactly the limit is how we learn that a command hit it.
            big = _file_at_limit(self.spec.writable, self.spec.limits.file_size_mb * MB)
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


def _file_at_limit(roots: list[Path], limit: int, budget: int = 200_000) -> str | None:
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
