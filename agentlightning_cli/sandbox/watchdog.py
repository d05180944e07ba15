"""Watch one sandbox from the host: all its processes' CPU seconds, resident memory and count; past a limit,
kill the sandbox (its PID namespace goes with it; a container's runtime client, the container then removed by
its owner) and remember which limit it was.

Processes are found through the episode's pids cgroup when there is one (one small file; this thread moves
the sandbox's first process in while bubblewrap waits), otherwise by scanning /proc for processes in the
sandbox's PID namespace (bubblewrap tells us its first process). A process killed by SIGXFSZ / SIGXCPU
anywhere in the episode is reported by the kernel (exits.py) and trips the watchdog at once.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Callable

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.sandbox import exits
from agentlightning_cli.sandbox.limits import MB, PidsCgroup

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Watchdog:
    """A daemon thread polling every `interval_s`; `breach` is None or e.g. "memory: 812 MB > 256 MB"."""

    def __init__(self, limits: EpisodeLimits, sandbox_pid: int, cgroup: PidsCgroup | None,
                 info_fd: int | None, block_fd: int | None = None, interval_s: float = 0.05,
                 find_inner: Callable[[], int | None] | None = None):
        """find_inner: how to learn the sandbox's first process when no bubblewrap info fd says it (a
        container: its runtime is asked)."""
        self.find_inner = find_inner
        self.limits, self.sandbox_pid, self.cgroup = limits, sandbox_pid, cgroup
        self.info_fd, self.block_fd, self.interval_s = info_fd, block_fd, interval_s
        self.breach: str | None = None
        self.limit_name: str | None = None
        self.peak = {"processes": 0, "memory_mb": 0.0, "cpu_s": 0.0}
        self._inner: int | None = None
        self._inner_known = threading.Event()
        self._ns: str | None = None
        self._notices: exits.ExitListener | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sandbox-watchdog-{sandbox_pid}", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)
        if self._notices is not None and self._ns is not None:
            self._notices.unwatch(self._ns)  # after the join: the thread registers it

    def inner_pid(self, wait_s: float = 0.0) -> int | None:
        """The sandbox's first process (the forwarder, PID 1 inside), once bubblewrap has said which it is."""
        self._inner_known.wait(wait_s)
        return self._inner

    def trip(self, limit_name: str, breach: str) -> None:
        """A limit was hit (seen here or reported by exits.py): remember it and kill the whole sandbox."""
        if self.breach is None:
            self.limit_name, self.breach = limit_name, breach
        self._stop.set()
        try:
            os.kill(self.sandbox_pid, signal.SIGKILL)  # the forwarder (PID 1) dies with it: the whole namespace
        except ProcessLookupError:
            pass

    def _run(self) -> None:
        try:
            self._inner = self._read_inner()
            if self._inner is not None:
                try:
                    self._ns = os.readlink(f"/proc/{self._inner}/ns/pid")
                except OSError:
                    pass
            if self.cgroup is not None and not (self._inner and self.cgroup.join(self._inner)):
                self.cgroup = None  # not moved in: watch by PID namespace instead
            if self._ns is not None and (notices := exits.listener()) is not None:
                notices.watch(self._ns, self.trip)  # a limit kill deep in the tree ends the episode now
                self._notices = notices
        finally:
            self._inner_known.set()
            if self.block_fd is not None:
                os.close(self.block_fd)  # bubblewrap goes on (EOF or a byte alike)
                self.block_fd = None
        while not self._stop.wait(self.interval_s):
            found = self.check()
            if found is not None:
                self.trip(*found)
                return

    def _read_inner(self) -> int | None:
        """bubblewrap's --info-fd JSON names the sandbox's first process; its PID namespace is the episode."""
        if self.info_fd is None:
            return self.find_inner() if self.find_inner is not None else None
        import json

        data = b""
        try:
            while chunk := os.read(self.info_fd, 4096):
                data += chunk
                if b"}" in data:
                    break
            return int(json.loads(data.decode())["child-pid"])
        except (OSError, ValueError, KeyError):
            return None
        finally:
            os.close(self.info_fd)
            self.info_fd = None

    def processes(self) -> list[int]:
        if self.cgroup is not None:
            return self.cgroup.procs()
        if self._ns is None:
            return []
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.readlink(f"/proc/{name}/ns/pid") == self._ns:
                        found.append(int(name))
                except OSError:
                    continue
        return found

    def check(self) -> tuple[str, str] | None:
        limits = self.limits
        if self.cgroup is not None and self.cgroup.refused_forks():
            return "processes", f"processes: more than {limits.processes} at once (forks refused)"
        pids = self.processes()
        cpu = rss = 0.0
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_bytes()
                fields = stat[stat.rindex(b")") + 2:].split()
                # utime stime cutime cstime: a reaped child's time lives on in its reaper's c-fields
                cpu += sum(int(x) for x in fields[11:15]) / _TICK
                rss += int(fields[21]) * _PAGE
            except (OSError, ValueError, IndexError):
                continue
        peak = self.peak
        peak["processes"] = max(peak["processes"], len(pids))
        peak["memory_mb"] = max(peak["memory_mb"], round(rss / MB, 1))
        peak["cpu_s"] = max(peak["cpu_s"], round(cpu, 2))
        if len(pids) > limits.processes:
            return "processes", f"processes: {len(pids)} alive > {limits.processes}"
        # RSS counts pages shared by forked processes once per process; past the limit, the proportional
        # share (PSS, dearer to read) decides.
        if rss > limits.memory_mb * MB and (pss := _pss(pids)) > limits.memory_mb * MB:
            return "memory", f"memory: {pss / MB:.0f} MB resident > {limits.memory_mb} MB"
        if cpu > limits.cpu_s:
            return "cpu_time", f"cpu_time: {cpu:.1f} CPU seconds > {limits.cpu_s:g}"
        return None


def _pss(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            continue
    return total
