"""Run one shell command for a task (setup, reward) in its own process group, with a hard time limit."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from agentlightning_cli import process
from agentlightning_cli.sandbox import SandboxSpec, open_sandbox

TAIL_BYTES = 8192
# Enough to find a final JSON line even after pages of test output.
LAST_LINE_BYTES = 65536


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None
    """None when the command was killed for running past its limit; negative N when killed by signal N."""
    stdout_tail: str
    stderr_tail: str
    last_stdout_line: str
    duration_s: float
    timed_out: bool
    resource_limit: str | None = None
    """Set when the sandbox ended the command at one of its limits: which one, and by how much."""


def run_shell(
    command: str,
    cwd: Path,
    timeout_s: float | None,
    env: dict[str, str] | None = None,
    kill_grace_s: float = 2.0,
    sandbox: SandboxSpec | None = None,
) -> ShellResult:
    """`bash -c command` in cwd. On timeout the whole process group gets SIGTERM, then SIGKILL after a grace.

    Output goes to temporary files rather than pipes: a grandchild that keeps a pipe open can never make this
    hang, and a chatty command cannot fill a pipe buffer and stall.
    """
    full_env = {**os.environ, **(env or {}), "GIT_TERMINAL_PROMPT": "0"}
    argv, box, start_kwargs = ["bash", "-c", command], None, {}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory(prefix="alight-sh-") as home:
        if sandbox is not None:
            # The user's HOME is not visible inside: a private one, and pyenv's shims told where pyenv is.
            full_env["HOME"] = home
            full_env.setdefault("PYENV_ROOT", str(Path(os.environ.get("HOME", "/root")) / ".pyenv"))
            box = open_sandbox(replace(sandbox, writable=[*sandbox.writable, Path(home)]))
            # In a container the command lives in the image's environment (its PATH, its tools), with only the
            # task's own variables added; under bubblewrap it keeps this machine's.
            inside = full_env if sandbox.image is None else {**(env or {}), "HOME": home, "GIT_TERMINAL_PROMPT": "0"}
            argv, start_kwargs = box.command(argv, Path(cwd), inside), box.popen_kwargs()
        started = time.monotonic()
        # Its own process group, so a timeout takes its children down with it.
        proc = process.start(argv, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             **start_kwargs)
        if box is not None:
            box.started(proc.pid)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            process.stop(proc, kill_grace_s)
        finally:
            # Interrupted (Ctrl-C) while waiting: stop it now. Finished: background leftovers die with it;
            # nothing may outlive its step.
            process.stop(proc, 0)
            if box is not None:
                box.exit_limit(proc.returncode)
                box.close()
        duration = time.monotonic() - started
        stdout_tail = _tail(out, TAIL_BYTES)
        last = _tail(out, LAST_LINE_BYTES).rstrip().rsplit("\n", 1)[-1].strip()
        code = proc.returncode
        if box is not None and code is not None and 128 < code <= 128 + 64:
            code = 128 - code  # bubblewrap reports death by signal N as 128 + N, like a shell
        return ShellResult(
            exit_code=None if timed_out else code,
            stdout_tail=stdout_tail,
            stderr_tail=_tail(err, TAIL_BYTES),
            last_stdout_line=last,
            duration_s=duration,
            timed_out=timed_out,
            resource_limit=box.breach if box is not None else None,
        )


def _tail(f: IO[bytes], n: int) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - n))
    return f.read().decode("utf-8", errors="replace")
