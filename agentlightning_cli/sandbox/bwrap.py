"""The bubblewrap command line for one sandboxed command: what it sees, what it may write, how it reaches the proxy.

Visible, read-only: the system directories (/usr, /etc and the /bin, /lib symlinks), the interpreter that runs
the in-sandbox forwarder, and the paths the caller names (the harness install, the interpreters its recipe
needs, a recipe's `sandbox.read_only`). Read-write: the paths the caller names (workspace, episode folder with
the private HOME, a private tmp folder) and a fresh /tmp. Everything else of the host (the task set, the run
directory, ALIGHT_HOME, the user's HOME) simply does not exist inside. Network: a private namespace with only
loopback; forwarder.py binds 127.0.0.1:<proxy port> inside, so a harness keeps its plain
http://127.0.0.1:<port>/e/<episode>/v1 URL, and either hands that listening socket to alight's proxy
(/run/alight/listeners.sock: the proxy accepts from the sandbox directly) or relays each connection to a
proxy's HTTP Unix socket bound in at /run/alight/proxy.sock. The forwarder is the sandbox's PID 1 for every
command (setup and reward shells too): it sets the rlimits and reaps orphans (see forwarder.py).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox.limits import MB


SOCKET_INSIDE = "/run/alight/proxy.sock"
LISTENERS_INSIDE = "/run/alight/listeners.sock"
FORWARDER_DIR_INSIDE = "/run/alight/lib"
FORWARDER_INSIDE = "/run/alight/lib/forwarder.pyc"
FORWARDER = Path(__file__).with_name("forwarder.py")
FORWARDER_SOURCES = (FORWARDER, Path(__file__).with_name("relay_inside.py"))
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
INSTALL_HINT = "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`; scripts/install.sh does it), or run on the host with `--sandbox none`"


@dataclass
class SandboxSpec:
    writable: list[Path]
    """Bound read-write at the same path: workspace, episode folder (with the private HOME), private tmp."""
    read_only: list[Path] = field(default_factory=list)
    """Bound read-only at the same path: harness install, interpreters, a recipe's extra paths."""
    proxy_socket: Path | None = None
    """The host's Unix socket of the proxy; with proxy_port, the forwarder serves it on loopback inside."""
    proxy_port: int | None = None
    proxy_listeners: Path | None = None
    """The proxy's listener inbox (proxy/listener_inbox.py); with proxy_port, the forwarder hands its listening
    socket to the proxy instead of relaying (nothing added per call). Wins over proxy_socket."""
    network: bool = False
    """True shares the host's network (a task's `setup_network: true`); nothing is forwarded then."""
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    image: str | None = None
    """`sandbox: container`: the image the command runs in (container.py); None for bubblewrap."""
    runtime: str = "auto"
    """The container runtime: podman, docker, or auto (the first installed)."""
    workdir: str | None = None
    """A container only: where the image expects its project (SWE-bench's /testbed). The command's folder is bound
    there too (the same files at both paths) and the command starts there."""
    task_fs: Any = None
    """A container only: a sandbox.task_fs.TaskFS (a Harbor task): the command works in the image's own file
    system, which is kept for the task's verifier when it ends."""


def bwrap_path() -> str:
    """The bubblewrap executable, or a clear error naming the fix."""
    found = shutil.which("bwrap")
    if found is None:
        raise AlightError("sandbox 'bwrap' needs bubblewrap, and `bwrap` is not on PATH", INSTALL_HINT)
    return found


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str | None:
    """None when bubblewrap can make user, PID and network namespaces here; otherwise why not."""
    try:
        res = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if res.returncode == 0 else (res.stderr.strip() or f"exit code {res.returncode}")


def ensure_available() -> str:
    """bwrap's path once it is known to work on this machine; AlightError with the fix otherwise."""
    bwrap = bwrap_path()
    why = _probe(bwrap)
    if why is not None:
        raise AlightError(
            f"bubblewrap cannot create namespaces here: {why}",
            "allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`, or on Ubuntu "
            "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`), or run on the host with `--sandbox none`",
        )
    return bwrap


def forwarder_python() -> tuple[str, Path]:
    """The interpreter that runs forwarder.py (this one, without its virtualenv) and the folder to mount."""
    exe = Path(os.path.realpath(sys.executable))
    prefix = Path(os.path.realpath(sys.base_prefix))
    return str(exe), prefix if exe.is_relative_to(prefix) else exe.parent.parent


@functools.lru_cache(maxsize=1)
def compiled_forwarder() -> Path:
    """forwarder.py compiled once per alight process into a private folder: the sandbox runs the .pyc, so no
    episode pays for parsing it (several ms each)."""
    import atexit
    import py_compile
    import tempfile

    folder = tempfile.mkdtemp(prefix="alight-fwd-")  # 0700: nothing else on the host can swap the files
    atexit.register(shutil.rmtree, folder, True)
    for source in FORWARDER_SOURCES:  # relay mode imports its neighbour, sourceless, from this folder
        py_compile.compile(str(source), cfile=os.path.join(folder, source.stem + ".pyc"), doraise=True)
    return Path(folder) / "forwarder.pyc"


def command(spec: SandboxSpec, argv: list[str], cwd: Path, bwrap: str = "bwrap", info_fd: int | None = None,
            block_fd: int | None = None, rlimits: str = "-") -> list[str]:
    """The full command line: bwrap, its mounts, and forwarder.py as the sandbox's PID 1 wrapping argv.

    info_fd: bubblewrap writes the sandbox's first process id there; block_fd: it waits for a byte there before
    starting anything (the host moves that process into the episode's cgroup meanwhile). rlimits: the
    forwarder's RES=SOFT:HARD list, set inside before argv starts."""
    args = [bwrap, "--die-with-parent", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "alight-episode", "--as-pid-1"]
    if not spec.network:
        args.append("--unshare-net")
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        args += ["--block-fd", str(block_fd)]
    args += _system_mounts()
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm",
             "--size", str(spec.limits.file_size_mb * MB), "--tmpfs", "/tmp"]
    python, python_prefix = forwarder_python()
    for path in outermost([*spec.read_only, python_prefix]):
        args += ["--ro-bind", str(path), str(path)]
    for path in outermost(spec.writable):
        args += ["--bind", str(path), str(path)]
    args += ["--chdir", str(cwd), "--ro-bind", str(compiled_forwarder().parent), FORWARDER_DIR_INSIDE]
    mode, address = "none", "-"
    if spec.network or spec.proxy_port is None:
        pass
    elif spec.proxy_listeners is not None:
        args += ["--bind", str(spec.proxy_listeners), LISTENERS_INSIDE]
        mode, address = "hand-over", LISTENERS_INSIDE
    elif spec.proxy_socket is not None:
        args += ["--bind", str(spec.proxy_socket), SOCKET_INSIDE]
        mode, address = "relay", SOCKET_INSIDE
    port = str(spec.proxy_port) if mode != "none" else "-"
    return [*args, "--", python, "-I", "-S", FORWARDER_INSIDE, mode, address, port, rlimits, "--", *argv]


@functools.lru_cache(maxsize=1)
def _system_mounts() -> tuple[str, ...]:
    """The system folders, read-only (their links as links): the same for every sandbox of this process."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return tuple(args)


def outermost(paths: list[Path]) -> list[Path]:
    """Absolute, existing, de-duplicated, without paths already inside another one of the list."""
    resolved = sorted({Path(os.path.abspath(p)) for p in paths if os.path.exists(p)}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in resolved:
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept
