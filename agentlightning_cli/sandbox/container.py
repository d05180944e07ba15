"""`sandbox: container`: one command in a container from an image (podman or docker), with the same guarantees and
the same interface as the bubblewrap sandbox (launch.Sandbox), so the harness runner and the task shells use
either without knowing which.

What the container sees: the image's own file system; at the same paths as on the host, read-write the paths the
caller names (workspace, episode folder with the private HOME, a private tmp folder) and read-only the harness
install and its interpreters; a fresh /tmp; the proxy's Unix socket or listener inbox. Network: `--network none`
(only its loopback), or the host's for a task's `setup_network`. The in-sandbox forwarder is the container's
PID 1, exactly as under bubblewrap: it binds 127.0.0.1:<proxy port> inside (so a harness keeps its base URL),
sets the rlimits and passes a stop signal on; it runs on this machine's interpreter, mounted read-only, so an
image needs a C library that interpreter can run on (checked once per image: `check_image`).

Limits are watched as under bubblewrap (watchdog.py, on the container's PID namespace: CPU seconds, resident
memory and processes of the episode together; past one, `resource_limit` naming it), with the runtime's own as
hard backstops: `--pids-limit`, `--memory` at twice the memory limit (an OOM kill there is `resource_limit:
memory` too), and the forwarder's rlimits (CPU seconds and file size per process). Every
container is labelled with its working folder (an episode's workspace), so a later run removes what a killed
one left in its run directory (`remove_under`).

The runtime's own flags: podman's default OCI runtime (crun) cannot run on hosts with hybrid cgroups and
rootful podman cannot set rlimits it was not given explicitly without CAP_SYS_RESOURCE; `runtime_args` finds,
once per process, the first of a few known-good flag sets that runs a container here (`container.runtime_args`
in the settings overrides it).
"""

from __future__ import annotations

import functools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox import bwrap
from agentlightning_cli.sandbox.limits import MB, rlimit_arg

LABEL_WORKSPACE = "alight.workspace"
RUNTIMES = ("podman", "docker")
# Tried in order until one runs a container (podman: crun fails on hybrid cgroups, runc + cgroupfs works).
PODMAN_FLAG_SETS = ([], ["--runtime", "runc", "--cgroup-manager", "cgroupfs"], ["--cgroup-manager", "cgroupfs"])
INSTALL_HINT = "install podman (`apt-get install podman runc`) or docker, or use `--sandbox bwrap`"
PROBE_TIMEOUT_S = 120.0
NPROC_CAP = 16384


def runtime_path(name: str = "auto") -> str:
    """The container runtime's executable: `name` (podman or docker), or the first of them installed."""
    for candidate in (RUNTIMES if name == "auto" else (name,)):
        found = shutil.which(candidate)
        if found is not None:
            return found
    raise AlightError(f"sandbox 'container' needs {'podman or docker' if name == 'auto' else name}, and it is not"
                      " on PATH", INSTALL_HINT)


@functools.lru_cache(maxsize=8)
def runtime_args(runtime: str, image: str) -> tuple[str, ...]:
    """The runtime's global flags that run `image` here (the first set that works); AlightError naming each
    failure and the fix when none does."""
    sets = PODMAN_FLAG_SETS if Path(runtime).name == "podman" else ([],)
    failures = []
    for flags in sets:
        argv = [runtime, *flags, "run", "--rm", "--pull", "never", "--network", "none", *ulimit_args(), image, "true"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            failures.append(f"{' '.join(flags) or '(default flags)'}: {exc}")
            continue
        if proc.returncode == 0:
            return tuple(flags)
        failures.append(f"{' '.join(flags) or '(default flags)'}: {_last_line(proc.stderr)}")
    raise AlightError(f"{Path(runtime).name} cannot run a container from {image} here:\n  " + "\n  ".join(failures),
                      "is the image present (`" + Path(runtime).name + f" image exists {image}`)? for podman as root "
                      "on hybrid cgroups install runc (`apt-get install runc`); `alight doctor` checks the runtime")


def ulimit_args() -> list[str]:
    """Open-file and process limits given explicitly: without them the OCI runtime tries to raise them and fails
    where CAP_SYS_RESOURCE is withheld. Open files: this process's own. Processes: at most NPROC_CAP (runc
    could not set this machine's own 96,362 nor 40,000, where 16,384 works; the episode's process limit is
    `--pids-limit` anyway, and RLIMIT_NPROC does not bind root)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = tuple(NPROC_CAP if v == resource.RLIM_INFINITY else min(v, NPROC_CAP) for v in nproc)
    nofile = tuple(-1 if v == resource.RLIM_INFINITY else v for v in nofile)
    return ["--ulimit", f"nofile={nofile[0]}:{nofile[1]}", "--ulimit", f"nproc={nproc[0]}:{nproc[1]}"]


def ensure_images(runtime: str, images: list[str], pull: str = "missing") -> list[str]:
    """Every image present before the round: pulled once when missing (`pull: missing`, progress on stderr), or
    always (`always`), or never (`never`). Returns the images pulled; one AlightError naming every image that
    cannot be had (never an episode failure per attempt)."""
    pulled, failed = [], []
    for image in dict.fromkeys(images):
        present = subprocess.run([runtime, "image", "inspect", image], capture_output=True,
                                 timeout=PROBE_TIMEOUT_S).returncode == 0
        if present and pull != "always":
            continue
        if pull == "never":
            failed.append(f"{image} (not present, and container.pull is never)")
            continue
        print(f"alight: pulling {image} with {Path(runtime).name}", file=sys.stderr, flush=True)
        proc = subprocess.run([runtime, "pull", image], stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            failed.append(f"{image} (pull failed: {_last_line(proc.stderr)})")
        else:
            pulled.append(image)
    if failed:
        raise AlightError(f"{len(failed)} image(s) needed by this task set cannot be had:\n  " + "\n  ".join(failed),
                          f"build or load them (`{Path(runtime).name} load -i FILE`, `{Path(runtime).name} import`), "
                          "make the registry reachable, or fix the tasks' `image` / `container.image`")
    return pulled


@functools.lru_cache(maxsize=16)
def check_image(runtime: str, image: str) -> None:
    """Once per image: a container from it starts here and this machine's interpreter (the forwarder's, and the
    harness's when it is a Python install) runs in it. AlightError with the fix otherwise."""
    flags = runtime_args(runtime, image)
    python, prefix = bwrap.forwarder_python()
    argv = [runtime, *flags, "run", "--rm", "--pull", "never", "--network", "none", *ulimit_args(), "-v", f"{prefix}:{prefix}:ro",
            "--entrypoint", python, image, "-I", "-S", "-c", "import sys; print(sys.version_info[:2])"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if proc.returncode != 0:
        raise AlightError(
            f"the image {image} cannot run this machine's Python ({python}): {_last_line(proc.stderr)}",
            "episodes run the harness and alight's forwarder on the host's interpreters, mounted into the "
            "container, so the image needs a C library at least as new as this machine's (e.g. an image on the "
            "same or a newer Debian/Ubuntu release); rebuild the image on a newer base, or use `--sandbox bwrap`")


def check_harness(runtime: str, image: str, name: str, argv: list[str], read_only: list[Path],
                  env: Mapping[str, str], user: str | int | None = None) -> str:
    """Once per image, before the round: the harness's own check command (`--version`, `--help`) run in a
    container from `image` with the mounts an episode gets (`read_only`: its install, its interpreters) and the
    episode's PATH, no network; as `user` (a Harbor task's [agent].user) when given. Returns its first output line;
    AlightError with the fix when the image cannot run the harness (a missing interpreter or library, an older C
    library, an install another user cannot reach), instead of a failure per episode."""
    flags = runtime_args(runtime, image)
    args = [runtime, *flags, "run", "--rm", "--pull", "never", "--network", "none", *ulimit_args(),
            "--tmpfs", "/tmp:rw,mode=1777", "-w", "/tmp", "-e", "HOME=/tmp"]
    if user is not None:
        args += ["--user", str(user)]
    for path in bwrap.outermost(read_only):
        args += ["-v", f"{path}:{path}:ro"]
    for key in sorted(env):
        args += ["-e", f"{key}={env[key]}"]
    proc = subprocess.run([*args, "--entrypoint", argv[0], image, *argv[1:]], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    if proc.returncode != 0 and user is not None:
        raise AlightError(
            f"{name} cannot run in the image {image} as the task's [agent].user {user}: `{' '.join(argv)}` exited "
            f"{proc.returncode}: {_last_line(proc.stderr or proc.stdout)}",
            "the harness runs from its host install and interpreters, mounted at their host paths, which that user "
            "must be able to reach: install harnesses and their Python outside root's home (ALIGHT_HOME=/opt/alight,"
            " a system Python), or drop [agent].user from the task")
    if proc.returncode != 0:
        raise AlightError(
            f"{name} cannot run in the image {image}: `{' '.join(argv)}` exited {proc.returncode}: "
            f"{_last_line(proc.stderr or proc.stdout)}",
            "the harness runs inside the container from its host install (mounted read-only at the same path) and "
            "its interpreters (a Python outside the system folders, Node for an npm install); the image must supply "
            "what they link against (a C library at least as new as this machine's, libstdc++ for Node): use an "
            "image on the same or a newer Debian/Ubuntu release, or `--sandbox bwrap`")
    lines = [line for line in (proc.stdout or proc.stderr).splitlines() if line.strip()]
    return lines[0] if lines else ""


def image_id(runtime: str, image: str) -> str:
    """The image's content id (what a tag names now): a cache keyed by it is never reused for a rebuilt image."""
    proc = subprocess.run([runtime, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True,
                          timeout=PROBE_TIMEOUT_S)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise AlightError(f"cannot read the id of the image {image}: {_last_line(proc.stderr)}",
                          f"is it present (`{Path(runtime).name} image exists {image}`)?")
    return proc.stdout.strip().splitlines()[0]


def copy_out(runtime: str, image: str, path: str, dest: Path) -> None:
    """The contents of `path` in `image` copied into the folder `dest` (an episode's workspace made from the
    image's own project, built artifacts included). AlightError naming the image and path when it fails."""
    flags = runtime_args(runtime, image)
    made = subprocess.run([runtime, *flags, "create", "--pull", "never", *ulimit_args(), image, "true"],
                          capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if made.returncode != 0:
        raise AlightError(f"cannot create a container from {image}: {_last_line(made.stderr)}")
    cid = made.stdout.strip().splitlines()[-1]
    try:
        Path(dest).mkdir(parents=True, exist_ok=True)
        copied = subprocess.run([runtime, *flags, "cp", f"{cid}:{path.rstrip('/')}/.", str(dest)],
                                capture_output=True, text=True, timeout=3600)
        if copied.returncode != 0:
            raise AlightError(f"cannot copy {path} out of {image}: {_last_line(copied.stderr)}",
                              f"does the image have its project at {path}?")
    finally:
        subprocess.run([runtime, *flags, "rm", "-f", cid], capture_output=True, timeout=PROBE_TIMEOUT_S)


def remove_under(runtime: str, folder: Path) -> int:
    """Remove every container of alight's whose working folder is under `folder` (a run directory: what a killed
    run left, running or not), then the images made from such containers (a Harbor episode's committed agent
    container, killed before its verifier ended); returns how many containers."""
    ids = [cid for cid, workspace in labelled(runtime) if Path(workspace).is_relative_to(Path(folder).absolute())]
    if ids:
        subprocess.run([runtime, "rm", "-f", *ids], capture_output=True, timeout=PROBE_TIMEOUT_S)
    images = [iid for iid, workspace in labelled(runtime, images=True)
              if Path(workspace).is_relative_to(Path(folder).absolute())]
    if images:
        subprocess.run([runtime, "rmi", "-f", *images], capture_output=True, timeout=PROBE_TIMEOUT_S)
    return len(ids)


def labelled(runtime: str, images: bool = False) -> list[tuple[str, str]]:
    """(id, workspace) of alight's containers, running or not (of its images with `images`). Read with `inspect`,
    whose labels are a map in podman and docker alike (`ps --format` differs: podman has no .Label, docker's
    .Labels is a string)."""
    listing = ["images", "-q"] if images else ["ps", "-a", "-q"]
    listed = subprocess.run([runtime, *listing, "--filter", f"label={LABEL_WORKSPACE}"],
                            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    ids = list(dict.fromkeys(listed.stdout.split()))
    if not ids:
        return []
    found = subprocess.run([runtime, "image" if images else "container", "inspect", "--format",
                            '{{.Id}} {{index .Config.Labels "' + LABEL_WORKSPACE + '"}}', *ids],
                           capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    return [(line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in found.stdout.splitlines() if " " in line]


class ContainerSandbox:
    """launch.Sandbox's interface for one command in a container: command, popen_kwargs, started, signal,
    exit_limit, close, limit/breach, peak."""

    def __init__(self, spec: bwrap.SandboxSpec, runtime: str | None = None):
        if spec.image is None:
            raise ValueError("a container sandbox needs spec.image")
        self.spec = spec
        self.runtime = runtime or runtime_path(spec.runtime)
        self.flags = runtime_args(self.runtime, spec.image)
        self.name = f"alight-{secrets.token_hex(8)}"
        self.limit: str | None = None
        self.breach: str | None = None
        self.watch_interval_s = 0.05
        self.watchdog: Any = None
        self._client: int | None = None
        self._closed = False

    def command(self, argv: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> list[str]:
        spec = self.spec
        python, prefix = bwrap.forwarder_python()
        # -i: the command's stdin is the client's (a recipe's `stdin:` file; Codex reads its prompt there).
        args = [self.runtime, *self.flags, "run", "-i", "--pull", "never", "--name", self.name,
                "--hostname", "alight-episode",
                "--network", "host" if spec.network else "none", *ulimit_args(),
                "--pids-limit", str(spec.limits.processes + 1),
                "--memory", f"{2 * spec.limits.memory_mb}m", "--memory-swap", f"{2 * spec.limits.memory_mb}m",
                "--security-opt", "no-new-privileges", "--log-driver", "none"]
        task_fs = spec.task_fs
        if task_fs is None:
            args += ["--tmpfs", f"/tmp:rw,size={spec.limits.file_size_mb}m"]
        else:  # a Harbor task: the image's own file system, /tmp included (tasks keep files there)
            if task_fs.user is not None:  # the task's agent user must write its HOME and tmp (made by root here)
                args += ["--user", str(task_fs.user)]
                _open_to_all(spec.writable)
            if task_fs.cpus is not None:
                args += ["--cpus", f"{task_fs.cpus:g}"]
            if task_fs.storage_mb is not None:
                args += ["--storage-opt", f"size={task_fs.storage_mb}m"]
            for key, value in task_fs.env.items():
                args += ["-e", f"{key}={value}"]
        args += ["--label", f"{LABEL_WORKSPACE}={cwd}"]  # a later run finds what a killed one left by it
        for path in bwrap.outermost([*spec.read_only, prefix]):
            args += ["-v", f"{path}:{path}:ro"]
        for path in bwrap.outermost(spec.writable):
            args += ["-v", f"{path}:{path}"]
        args += ["-v", f"{bwrap.compiled_forwarder().parent}:{bwrap.FORWARDER_DIR_INSIDE}:ro"]
        if task_fs is not None:  # nothing bound over the image's files; its workdir, else the image's WORKDIR
            args += ["-w", task_fs.workdir] if task_fs.workdir else []
        elif spec.workdir is not None:  # the project where the image's installs expect it, the same files
            args += ["-v", f"{cwd}:{spec.workdir}", "-w", spec.workdir]
        else:
            args += ["-w", str(cwd)]
        mode, address = "none", "-"
        if not spec.network and spec.proxy_port is not None:
            if spec.proxy_listeners is not None:
                args += ["-v", f"{spec.proxy_listeners}:{bwrap.LISTENERS_INSIDE}"]
                mode, address = "hand-over", bwrap.LISTENERS_INSIDE
            elif spec.proxy_socket is not None:
                args += ["-v", f"{spec.proxy_socket}:{bwrap.SOCKET_INSIDE}"]
                mode, address = "relay", bwrap.SOCKET_INSIDE
        for name in sorted(env or {}):
            args += ["-e", name]  # the value is the runtime client's own (the env it is started with)
        port = str(spec.proxy_port) if mode != "none" else "-"
        return [*args, "--entrypoint", python, spec.image, "-I", "-S", bwrap.FORWARDER_INSIDE, mode, address, port,
                rlimit_arg(spec.limits), "--", *argv]

    def popen_kwargs(self) -> dict[str, Any]:
        return {}

    def started(self, pid: int) -> None:
        """Watch the container as bubblewrap's sandboxes are watched (watchdog.py: its processes' CPU seconds,
        resident memory and count, by its PID namespace; past a limit the episode ends naming it). The runtime's
        own `--memory` is twice the limit, the backstop between two looks (as RLIMIT_DATA is under bubblewrap)."""
        from agentlightning_cli.sandbox.watchdog import Watchdog

        self._client = pid
        self.watchdog = Watchdog(self.spec.limits, pid, None, None, interval_s=self.watch_interval_s,
                                 find_inner=self._container_pid).start()

    def _container_pid(self) -> int | None:
        """The container's first process as the host sees it, once the runtime has started it."""
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while time.monotonic() < deadline:
            proc = subprocess.run([self.runtime, *self.flags, "inspect", "--format", "{{.State.Pid}}", self.name],
                                  capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
            pid = proc.stdout.strip()
            if pid.isdigit() and int(pid) > 0:
                return int(pid)
            if self._client is None or not _alive(self._client):
                return None
            time.sleep(0.05)
        return None

    def signal(self, sig: int, wait_s: float = 2.0) -> bool:
        """`sig` to the container's PID 1 (the forwarder), which passes it on to the command."""
        try:
            proc = subprocess.run([self.runtime, *self.flags, "kill", "--signal", signal.Signals(sig).name, self.name],
                                  capture_output=True, timeout=max(wait_s, 10.0))
        except (OSError, subprocess.TimeoutExpired):
            return False
        return proc.returncode == 0

    def exit_limit(self, exit_code: int | None) -> None:
        from agentlightning_cli.sandbox.launch import limit_from_exit

        if self.limit is None and (found := limit_from_exit(exit_code)) is not None:
            self.limit, self.breach = found

    def close(self) -> None:
        """Stop watching, read how the container ended (an OOM kill past the runtime's backstop is the memory
        limit too), then remove it whatever state it is in: a runtime client killed on a timeout or by the
        watchdog leaves its container running."""
        if self._closed:
            return
        self._closed = True
        if self.watchdog is not None:
            self.watchdog.stop()
            if self.watchdog.breach is not None:
                self.limit, self.breach = self.watchdog.limit_name, self.watchdog.breach
        state = subprocess.run([self.runtime, *self.flags, "inspect", "--format", "{{.State.OOMKilled}}", self.name],
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        if self.spec.task_fs is not None:
            self._commit(self.spec.task_fs)
        subprocess.run([self.runtime, *self.flags, "rm", "-f", self.name], capture_output=True, timeout=PROBE_TIMEOUT_S)
        if self.limit is None and state.stdout.strip() == "true":
            self.limit = "memory"
            self.breach = f"memory: the container went past {2 * self.spec.limits.memory_mb} MB and was OOM-killed"
        if self.limit is None:
            from agentlightning_cli.sandbox.launch import file_at_limit

            big = file_at_limit(self.spec.writable, self.spec.limits.file_size_mb * MB)
            if big is not None:
                self.limit = "file_size"
                self.breach = f"file_size: {big} reached the {self.spec.limits.file_size_mb} MB limit"

    def _commit(self, task_fs: Any) -> None:
        """The ended container's file system kept as `task_fs.commit_to` for the task's verifier (stopped first:
        a commit of a running container would race the processes the agent left)."""
        subprocess.run([self.runtime, *self.flags, "stop", "-t", "0", self.name], capture_output=True,
                       timeout=PROBE_TIMEOUT_S)
        # labelled with the episode's workspace: a later run removes it if this one dies before its verifier ends
        workspace = subprocess.run([self.runtime, *self.flags, "inspect", "--format",
                                    '{{index .Config.Labels "' + LABEL_WORKSPACE + '"}}', self.name],
                                   capture_output=True, text=True, timeout=PROBE_TIMEOUT_S).stdout.strip()
        change = ["--change", f"LABEL {LABEL_WORKSPACE}={workspace}"] if workspace else []
        proc = subprocess.run([self.runtime, *self.flags, "commit", *change, self.name, task_fs.commit_to],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S * 5)
        if proc.returncode == 0:
            task_fs.committed = True
        else:
            task_fs.commit_error = f"{Path(self.runtime).name} commit failed: {_last_line(proc.stderr)}"

    @property
    def peak(self) -> dict[str, float]:
        return dict(self.watchdog.peak) if self.watchdog is not None else {}


def _open_to_all(folders: list[Path]) -> None:
    """Every file under the episode's own writable folders readable and writable by any user (they are private
    to the episode; the container's user is the task's, not this process's)."""
    for folder in folders:
        for here, dirs, files in os.walk(folder):
            for name in [*dirs, *files]:
                target = os.path.join(here, name)
                if not os.path.islink(target):
                    os.chmod(target, os.stat(target).st_mode | 0o666 | (0o111 if name in dirs else 0))
        if Path(folder).is_dir():
            os.chmod(folder, os.stat(folder).st_mode | 0o777)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "(no output)"
