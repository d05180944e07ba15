"""One Harbor trial's container: started from the task's image, the agent's phase exec'd in it (the oracle's
solution/solve.sh here; an episode's harness once episodes run Harbor tasks), then the verifier in the same
container, as Harbor runs it (harbor/verifier/verifier.py): tests/ copied to /tests only now, /logs/verifier made
empty, test.sh run under [verifier].timeout_sec, its reward read from what it wrote.

What the agent could do to grade itself is undone before test.sh starts: every process it left is killed (a
background writer would otherwise race the verifier), and a reward file it wrote into /logs/verifier is itself the
verdict: `reward_error`, never a score. What remains shared is the container's own tools (python3, pytest, the
shell test.sh calls): an agent with root in the container can replace them, as in Harbor; the README says so.

The container has no network (`--network none`), like every alight episode (the verifier's gets the host's
when `harbor.verifier_network` is on and the task's verifier asks for one); `cpus` and `memory_mb` are the
runtime's limits; `workdir` is every phase's working directory; `[environment].env` is set for every phase."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks.harbor_reward import RewardFileError, Verdict, read_verdict
from agentlightning_cli.tasks.model import HARBOR_VERIFIER_DIR, Task

LABEL = "alight.harbor.trial"
TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")
"""Harbor's env templates (harbor/utils/env.py): a whole value `${VAR}` or `${VAR:-default}`, read on the host."""
CONTROL_TIMEOUT_S = 120.0


@dataclass
class PhaseResult:
    exit_code: int | None
    """None: stopped at its timeout."""
    output: str


class TaskContainer:
    """A running container for one task: `with TaskContainer(...) as box: box.exec(...)`; removed on exit."""

    def __init__(self, runtime: str, flags: tuple[str, ...] | list[str], task: Task, image: str,
                 network: bool = False, workspace: Path | None = None):
        self.runtime, self.flags, self.task, self.image = runtime, list(flags), task, image
        self.network = network
        """The host's network (harbor.verifier_network, for a task whose verifier asks for one); else none."""
        self.workspace = workspace
        """An episode's workspace: the container is labelled with it, so a later run removes it if this one dies."""
        self.name = f"alight-harbor-{secrets.token_hex(6)}"
        self.notes: list[str] = []
        """What of the task's settings could not be applied here (said, never silently dropped)."""

    def __enter__(self) -> "TaskContainer":
        from agentlightning_cli.sandbox.container import ulimit_args

        h = self.task.harbor
        for env in (h.env, h.verifier_env, h.solution_env):
            resolve_env(self.task.id, env)  # a variable the host lacks fails here, before any phase
        from agentlightning_cli.sandbox.container import LABEL_WORKSPACE

        labels = ["--label", f"{LABEL_WORKSPACE}={self.workspace}"] if self.workspace is not None else []
        argv = [self.runtime, *self.flags, "run", "-d", "--pull", "never", "--name", self.name, *labels, "--label",
                f"{LABEL}={self.task.id}", "--network", "host" if self.network else "none", *ulimit_args()]
        if h.cpus is not None:
            argv += ["--cpus", f"{h.cpus:g}"]
        if h.memory_mb is not None:
            argv += ["--memory", f"{h.memory_mb}m"]
        # PID 1 only keeps the container up; every phase is an exec, as in Harbor's own environments.
        tail = ["--entrypoint", "sleep", self.image, "infinity"]
        size = ["--storage-opt", f"size={h.storage_mb}m"] if h.storage_mb is not None else []
        proc = subprocess.run(argv + size + tail, capture_output=True, text=True, timeout=CONTROL_TIMEOUT_S)
        if proc.returncode != 0 and size and "storage" in proc.stderr.lower():
            # overlay enforces a size only on XFS with project quotas (podman and docker alike): said, not fatal.
            self.notes.append(f"storage_mb = {h.storage_mb} not enforced: {proc.stderr.strip().splitlines()[-1]}")
            subprocess.run([self.runtime, *self.flags, "rm", "-f", self.name], capture_output=True)
            proc = subprocess.run(argv + tail, capture_output=True, text=True, timeout=CONTROL_TIMEOUT_S)
        if proc.returncode != 0:
            raise AlightError(f"task {self.task.id}: cannot start a container from {self.image}: "
                              f"{proc.stderr.strip()[-800:]}", "does the image have `sleep` (coreutils)?")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run([self.runtime, *self.flags, "rm", "-f", "-t", "0", self.name], capture_output=True,
                       timeout=CONTROL_TIMEOUT_S)

    def exec(self, script: str, *, timeout_s: float | None, user: str | int | None = None,
             env: dict[str, str] | None = None) -> PhaseResult:
        """`bash -c script` in the task's workdir (else the image's), as `user` (else the image's USER)."""
        h = self.task.harbor
        resolved = resolve_env(self.task.id, {**h.env, **(env or {})})
        argv = [self.runtime, *self.flags, "exec"]
        if h.workdir:
            argv += ["-w", h.workdir]
        if user is not None:
            argv += ["-u", str(user)]
        for key, value in resolved.items():
            argv += ["-e", f"{key}={value}"]
        argv += [self.name, "bash", "-c", script]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else exc.stdout
            return PhaseResult(None, out or "")
        return PhaseResult(proc.returncode, proc.stdout + proc.stderr)

    def root(self, script: str) -> PhaseResult:
        return self.exec(script, timeout_s=CONTROL_TIMEOUT_S, user=0)

    def copy_in(self, source: Path, dest: str) -> None:
        """`source`'s contents to `dest` in the container (made anew), readable by any user, its .sh executable:
        the phase may run as a task's non-root user, who could not chmod root's copy."""
        self.root(f"rm -rf {dest} && mkdir -p {dest}")
        proc = subprocess.run([self.runtime, *self.flags, "cp", f"{source}/.", f"{self.name}:{dest}"],
                              capture_output=True, text=True, timeout=CONTROL_TIMEOUT_S)
        if proc.returncode != 0:
            raise AlightError(f"task {self.task.id}: cannot copy {source} into the container: {proc.stderr.strip()}")
        self.root(f"chmod -R a+rX {dest} && find {dest} -name '*.sh' -exec chmod a+x {{}} +")

    def copy_out(self, source: str, dest: Path) -> bool:
        proc = subprocess.run([self.runtime, *self.flags, "cp", f"{self.name}:{source}/.", str(dest)],
                              capture_output=True, text=True, timeout=CONTROL_TIMEOUT_S)
        return proc.returncode == 0


def run_oracle(box: TaskContainer, timeout_multiplier: float = 1.0) -> PhaseResult:
    """Harbor's oracle agent: solution/ copied to /solution, solve.sh run as the agent's user."""
    h = box.task.harbor
    if h.solution_dir is None:
        raise AlightError(f"task {box.task.id} has no solution/solve.sh")
    box.copy_in(h.solution_dir, "/solution")
    timeout = h.agent_timeout_s * timeout_multiplier if h.agent_timeout_s else None
    return box.exec("/solution/solve.sh", timeout_s=timeout, user=h.agent_user, env=h.solution_env)


def verify(box: TaskContainer, out_dir: Path, *, key: str = "reward", timeout_multiplier: float = 1.0) -> Verdict:
    """The verifier phase in the agent's container. RewardFileError (`reward_error`, with the verifier's log) when
    the agent left a reward file, test.sh timed out, or it wrote no usable reward; `out_dir` gets /logs/verifier."""
    h = box.task.harbor
    planted = box.root(f"ls -A {HARBOR_VERIFIER_DIR} 2>/dev/null").output.split()
    # Everything but PID 1 (the agent's leftovers) is killed, then the verifier's folder is made anew, empty.
    box.root("kill -9 -1 2>/dev/null; true")
    if planted:
        raise RewardFileError(f"{HARBOR_VERIFIER_DIR} held {', '.join(sorted(planted))} before the verifier ran: "
                              "the agent wrote its own verdict")
    box.root(f"rm -rf {HARBOR_VERIFIER_DIR} && mkdir -p {HARBOR_VERIFIER_DIR} && chmod 777 {HARBOR_VERIFIER_DIR}")
    box.copy_in(h.tests_dir, "/tests")
    timeout = h.verifier_timeout_s * timeout_multiplier
    run = box.exec(f"/tests/test.sh > {HARBOR_VERIFIER_DIR}/test-stdout.txt 2>&1", timeout_s=timeout,
                   user=h.verifier_user, env=h.verifier_env)
    out_dir.mkdir(parents=True, exist_ok=True)
    box.copy_out(HARBOR_VERIFIER_DIR, out_dir)
    if run.exit_code is None:
        log_file = out_dir / "test-stdout.txt"
        log = log_file.read_text(errors="replace")[-4000:] if log_file.exists() else ""
        raise RewardFileError(f"test.sh ran past [verifier].timeout_sec ({timeout:g}s) and was stopped", log)
    return read_verdict(out_dir, key)


@dataclass
class OracleRow:
    task_id: str
    reward: float | None
    detail: dict | None
    error: str | None
    log: str = ""
    notes: list[str] | None = None

    def to_json(self) -> dict:
        return {"id": self.task_id, "reward": self.reward, "detail": self.detail, "error": self.error,
                "log": self.log, "notes": self.notes or []}


def oracle_check(runtime: str, flags: tuple[str, ...] | list[str], tasks: list[Task], images: dict[str, str],
                 key: str = "reward") -> list[OracleRow]:
    """`alight tasks check DIR --oracle`: each task with a solution, solved by it and graded by its verifier."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="alight-oracle-") as tmp:
        for task in tasks:
            if task.harbor is None or task.harbor.solution_dir is None:
                continue
            out = Path(tmp) / secrets.token_hex(4)
            box = TaskContainer(runtime, flags, task, images[task.id])
            try:
                with box:
                    solved = run_oracle(box)
                    verdict = verify(box, out, key=key)
                rows.append(OracleRow(task.id, verdict.reward, verdict.detail, None, solved.output[-2000:], box.notes))
            except RewardFileError as exc:
                rows.append(OracleRow(task.id, None, None, str(exc), exc.log, box.notes))
            except AlightError as exc:
                rows.append(OracleRow(task.id, None, None, exc.message, notes=box.notes))
            shutil.rmtree(out, ignore_errors=True)
    return rows


def oracle_report(tasks: list[Task], runtime_name: str = "auto", pull: str = "missing",
                  key: str = "reward") -> list[OracleRow]:
    """Images had (built, or present/pulled), then every task with a solution run by the oracle and graded."""
    from agentlightning_cli.sandbox.container import ensure_images, runtime_args, runtime_path
    from agentlightning_cli.tasks.harbor_image import task_images

    harbor = [t for t in tasks if t.harbor is not None]
    if not harbor:
        return []
    runtime = runtime_path(runtime_name)
    ensure_images(runtime, [t.harbor.docker_image for t in harbor if t.harbor.docker_image], pull)
    # Builds need no global flags (chroot isolation runs no OCI runtime); running does: found with a built image.
    images = task_images(runtime, (), harbor)
    return oracle_check(runtime, runtime_args(runtime, next(iter(images.values()))), harbor, images, key)


def resolve_env(task_id: str, env: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """Harbor's resolve_env_vars: a value that is wholly `${VAR}` or `${VAR:-default}` is read from the host's
    environment; anything else is literal. A variable the host lacks, without a default, is an error."""
    environ = os.environ if environ is None else environ
    out = {}
    for key, value in env.items():
        match = TEMPLATE.fullmatch(value)
        name, default = (match.group(1), match.group(2)) if match else (None, None)
        if name is None:
            out[key] = value
        elif name in environ:
            out[key] = environ[name]
        elif default is not None:
            out[key] = default
        else:
            raise AlightError(f"task {task_id}: its env {key} = {value!r} needs ${name}, which is not set here",
                              f"export {name} before running, or give it a default: ${{{name}:-value}}")
    return out
