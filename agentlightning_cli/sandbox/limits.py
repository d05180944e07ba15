"""Per-episode resource limits: kernel limits set before the sandbox starts, plus a pids cgroup when one is writable.

Two layers, because neither alone is enough:
- rlimits are exact but per process: RLIMIT_CPU and RLIMIT_FSIZE stop one runaway command (SIGXCPU / SIGXFSZ).
  RLIMIT_NPROC is not used: the kernel exempts root (who runs alight in containers) even inside a user
  namespace, and on kernels before 5.14 it counts every process the user has on the machine. RLIMIT_AS is not
  used either: Node/V8 (Claude Code, Codex's launcher) reserves many GB of address space it never touches
  (WebAssembly memories fail under a 4 GB cap). RLIMIT_DATA (committed writable memory per process) at twice
  the episode's memory is the backstop between two looks of the watchdog.
- the watchdog (watchdog.py) sums every process of the episode: CPU seconds, resident memory, process count;
  past a limit it kills the whole sandbox and names the limit.
A pids cgroup, where the machine lets us create one, makes the process limit a hard kernel limit too, so a fork
bomb stalls at the limit instead of racing the watchdog's next look.
"""

from __future__ import annotations

import os
import resource
import secrets
import time
from pathlib import Path

from agentlightning_cli.config import EpisodeLimits

MB = 1024 * 1024


def rlimits(limits: EpisodeLimits) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for the sandbox's first process; everything it starts inherits them."""
    cpu = max(1, int(limits.cpu_s))
    data = 2 * limits.memory_mb * MB
    return [
        (resource.RLIMIT_CPU, cpu, cpu + 5),  # SIGXCPU at soft, SIGKILL at hard: one process's share
        (resource.RLIMIT_FSIZE, limits.file_size_mb * MB, limits.file_size_mb * MB),
        (resource.RLIMIT_CORE, 0, 0),  # a crashed tool must not write a core dump of the harness's memory
        # A backstop for the polled memory limit: one process cannot commit (allocate writable memory, touched
        # or not) past twice the episode's memory, even between two looks of the watchdog. Thread stacks count
        # (8 MB each), reserved-but-inaccessible address space (V8's cage, WebAssembly) does not.
        (resource.RLIMIT_DATA, data, data),
    ]


def rlimit_arg(limits: EpisodeLimits) -> str:
    """The rlimits as the in-sandbox forwarder takes them (RES=SOFT:HARD,...): it sets them as PID 1, so
    no program runs in front of bubblewrap to do it (a fork + exec each, and no preexec_fn in the caller)."""
    return ",".join(f"{res}={soft}:{hard}" for res, soft, hard in rlimits(limits))


class PidsCgroup:
    """A pids cgroup for one episode (cgroup v1 `pids` hierarchy, or v2 where pids is already delegated)."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, limit: int) -> "PidsCgroup | None":
        """A fresh cgroup with pids.max = limit, or None where the machine does not let us make one."""
        for parent in _candidate_parents():
            if parent not in _swept:  # once per process: a gone process's cgroups do not come back
                _swept.add(parent)
                _sweep_stale(parent)
            path = parent / f"alight-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "pids.max").write_text(str(limit))
                return cls(path)
            except OSError:
                _rmdir(path)
        return None

    def procs(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def refused_forks(self) -> int:
        """How many forks the limit refused ("max N" in pids.events)."""
        try:
            for line in (self.path / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def join(self, pid: int) -> bool:
        """Move `pid` in (its children follow from then on). False when the kernel refuses."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
            return True
        except OSError:
            return False

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the cgroup once the kernel has let go of its exited processes (that takes a moment)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.002)


_swept: set[Path] = set()


def _candidate_parents() -> list[Path]:
    found = []
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").is_file():
        found.append(v1)
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
                if "pids" in (own / "cgroup.subtree_control").read_text().split():
                    found.append(own)
    except OSError:
        pass
    return found


def _sweep_stale(parent: Path) -> None:
    """Remove empty episode cgroups left by an alight process that is gone (the kernel can hold a finished
    sandbox's cgroup busy for a while after its last process exited, longer than remove() waits)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith("alight-")]
    except OSError:
        return
    for name in names:
        owner = name.split("-")[1]
        if owner.isdigit() and int(owner) != os.getpid() and not os.path.exists(f"/proc/{owner}"):
            _rmdir(parent / name)  # fails harmlessly while it still has processes


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
