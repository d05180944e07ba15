"""Watch one sandbox from the host: all its processes' CPU seconds, resident memory and count; past a limit,
kill the sandbox (its PID namespace goes with it) and remember which limit it was.

Processes are found through the episode's pids cgroup when there is one (one small file), otherwise by
scanning /proc for processes in the sandbox's PID namespace (bubblewrap tells us its first process).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.sandbox.limits import MB, PidsCgroup

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Watchdog:
    """A daemon thread polling every `interval_s`; `breach` is None or e.g. "memory: 812 MB > 256 MB"."""

    def __init__(self, limits: EpisodeLimits, sandbox_pid: int, cgroup: PidsCgroup | None,
                 info_fd: int | None, interval_s: float = 0.05):
        self.limits, self.sandbox_pid, self.cgroup = limits, sandbox_pid, cgroup
        self.info_fd, self.interval_s = info_fd, interval_s
        self.breach: str | None = None
        self.limit_name: str | None = None
        self.peak = {"processes": 0, "memory_mb": 0.0, "cpu_s": 0.0}
        self._ns: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sandbox-watchdog-{sandbox_pid}", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)

    def _run(self) -> None:
        if self.cgroup is None:
            self._ns = self._read_namespace()
        while not self._stop.wait(self.interval_s):
            found = self.check()
            if found is not None:
                self.limit_name, self.breach = found
                try:
                    os.kill(self.sandbox_pid, signal.SIGKILL)  # bubblewrap's init dies with it: the whole namespace
                except ProcessLookupError:
                    pass
                return

    def _read_namespace(self) -> str | None:
        """bubblewrap's --info-fd JSON names the sandbox's first process; its PID namespace is the episode."""
        if self.info_fd is None:
            return None
        import json

        data = b""
        try:
            while chunk := os.read(self.info_fd, 4096):
                data += chunk
                if b"}" in data:
                    break
            child = json.loads(data.decode())["child-pid"]
            return os.readlink(f"/proc/{child}/ns/pid")
        except (OSError, ValueError, KeyError):
            return None
        finally:
            os.close(self.info_fd)

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
