"""Make a task's workspace (repo at its commit, setup run) and reveal the hidden files after the agent.

Every workspace is a git repository whose HEAD is the starting point, so the agent's changes are `git diff HEAD`
(plus untracked files) whatever the source was. It holds the base commit and its ancestors only - no later
commits, tags, other branches, remotes, reflogs or unreachable objects: those could contain the very fix the agent
is asked to write (history.py). A local repository or an image's project is reduced to that once per (source, base
commit) into `history_cache` and copied into each workspace; a URL (or a `fetch_depth`) is fetched at the base
commit alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox.choice import resolve, task_shell_spec
from agentlightning_cli.sandbox.container import copy_out, image_id, runtime_path
from agentlightning_cli.tasks.base_files import base_versions, git_env
from agentlightning_cli.tasks.history import (History, cached_history, clean_history, install_history, scrub_checkout,
                                              temporary_cache)
from agentlightning_cli.tasks.model import Task
from agentlightning_cli.tasks.shell import run_shell
from agentlightning_cli.tasks.swebench import test_patch_paths

GIT_IDENTITY = ["-c", "user.name=alight", "-c", "user.email=alight@localhost", "-c", "commit.gpgsign=false"]
FETCH_TIMEOUT_S = 1800.0
UNTRUSTED_REPO = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
"""For git commands in a workspace after the agent had it: none of its hooks or fsmonitor may run on the host."""


def prepare_workspace(
    task: Task,
    dest: Path,
    *,
    setup_timeout_s: float = 900.0,
    fetch_timeout_s: float = FETCH_TIMEOUT_S,
    fetch_depth: int | None = None,
    sandbox: str | None = None,
    limits: EpisodeLimits | None = None,
    container_runtime: str = "auto",
    history_cache: Path | None = None,
    on_history: Callable[[History], None] | None = None,
) -> Path:
    """Create dest (absent or empty) with the task's repository at its base commit, then run its setup commands.

    fetch_depth limits the history fetched from a git source (None: all ancestors, as SWE-bench's images have;
    1 is much faster for big repositories, at the price of `git log` in the workspace). Each setup command runs as `bash -c` in the workspace with its own limit (setup_timeout_s); the first
    failure raises AlightError naming the task, the command and the tail of its output.

    history_cache: where the base commit's history of a local repository or an image's project is kept once
    made (a run's source cache; None: made for this call alone). on_history: told what the source held past it.
    """
    dest = Path(dest).absolute()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise AlightError(f"task {task.id}: workspace {dest} already exists and is not empty", "use a fresh folder")
    dest.mkdir(parents=True, exist_ok=True)
    in_image = task.container_workdir is not None and task.image is not None and resolve(sandbox, limits)[0] == "container"
    with temporary_cache() as scratch:
        cache = Path(history_cache) if history_cache is not None else Path(scratch)
        if in_image:  # the project as the image has it (installed, built): the agent's starting point
            runtime = runtime_path(container_runtime)
            copy_out(runtime, task.image, task.container_workdir, dest)
            history = _image_history(task, dest, runtime, cache)
        else:
            history = _make_repo(task, dest, fetch_timeout_s, fetch_depth, cache)
    if history is not None and on_history is not None:
        on_history(history)
    # Setup runs sandboxed like the agent (`sandbox`/`limits`, None: the settings); network only with setup_network.
    box = task_shell_spec(dest, network=task.setup_network, mode=sandbox, limits=limits, image=task.image,
                          runtime=container_runtime, workdir=task.container_workdir) if task.setup else None
    for i, command in enumerate(task.setup, start=1):
        res = run_shell(command, dest, setup_timeout_s, env=task_env(task, dest), sandbox=box)
        if res.timed_out or res.exit_code != 0 or res.resource_limit:
            why = f"ran past {setup_timeout_s:g}s" if res.timed_out else f"exited with {res.exit_code}"
            why = f"ended at a sandbox limit ({res.resource_limit})" if res.resource_limit else why
            output = (res.stdout_tail[-1500:] + "\n" + res.stderr_tail[-1500:]).strip() or "(no output)"
            raise AlightError(
                f"task {task.id} ({task.where}): setup command {i} of {len(task.setup)} {why}: {command}\n"
                f"--- last output ---\n{output}",
                "run the command by hand in a copy of the repo to see why",
            )
    return dest


def _make_repo(task: Task, dest: Path, fetch_timeout_s: float, fetch_depth: int | None, cache: Path) -> History | None:
    """The task's repository at its base commit in dest (empty, plain folder, local git or URL)."""
    if task.repo_kind == "git-dir" and not fetch_depth:
        return _local_history(task, dest, cache)
    _git(task, dest, "init", "-q")
    for key, value in (("user.name", "alight"), ("user.email", "alight@localhost"), ("commit.gpgsign", "false")):
        _git(task, dest, "config", key, value)  # so an agent's own `git commit` works in the workspace
    if task.repo_kind == "none":
        _git(task, dest, "commit", "-q", "--allow-empty", "-m", "alight: empty workspace")
    elif task.repo_kind == "dir":
        shutil.copytree(task.repo, dest, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
        _git(task, dest, "add", "-A")
        _git(task, dest, "commit", "-q", "--allow-empty", "-m", f"alight: {task.id} starting point")
    else:
        _fetch_base(task, dest, fetch_timeout_s, fetch_depth)
    return None


def _local_history(task: Task, dest: Path, cache: Path) -> History:
    """A local repository's base commit, its history made clean once per (repository, commit) and copied in."""
    source = task.repo or ""
    sha = _resolve_local(task, source, task.base_commit or "HEAD")
    common = Path(_git(task, Path(source), "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    key = hashlib.sha256(f"local\0{common.resolve()}\0{sha}".encode()).hexdigest()[:24]
    with cached_history(cache, key, lambda made: clean_history(common, sha, made, borrowed=True)) as history:
        install_history(history, dest, checkout=True, branch="main")
    return history


def _image_history(task: Task, dest: Path, runtime: str, cache: Path) -> History | None:
    """The image's project with its `.git` (and its submodules') reduced to the base commit's history, made clean
    once per (image, folder, base commit). None when the project is no git repository."""
    ident = f"image\0{image_id(runtime, task.image or '')}\0{task.container_workdir}\0{task.base_commit or 'HEAD'}"
    key = hashlib.sha256(ident.encode()).hexdigest()[:24]
    try:
        return scrub_checkout(dest, task.base_commit, cache, key)
    except AlightError as exc:
        raise AlightError(f"task {task.id}: the project at {task.container_workdir} in {task.image}: {exc.message}",
                          exc.hint) from None


def task_env(task: Task, workspace: Path) -> dict[str, str]:
    """Variables setup and reward commands can use. Not ALIGHT_*: that prefix is alight's own settings."""
    return {"TASK_ID": task.id, "TASK_WORKSPACE": str(workspace)}


def reveal_hidden_files(task: Task, workspace: Path) -> None:
    """After the agent: copy the hidden folder in (overwriting), or reset and apply a SWE-bench test_patch."""
    workspace = Path(workspace)
    if task.hidden_files is not None:
        copy_over(task.hidden_files, workspace)
    if task.swebench is None:
        return
    # Like SWE-bench's own harness: the test files go back to the base commit first, so an agent that edited
    # or deleted them can neither break the patch nor weaken the tests. The base versions come from a source
    # the agent never had (base_files.py): the workspace's .git is the agent's, refs, replace objects and
    # object files included. They are written by us, as plain files (no checkout, no filters).
    paths = test_patch_paths(task.swebench.test_patch)
    for rel, content in base_versions(task, workspace, paths).items():
        target = workspace / rel
        _real_dir(workspace, Path(rel).parent)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.exists():
            shutil.rmtree(target)
        if content is not None:
            target.write_bytes(content)
    with tempfile.TemporaryDirectory(prefix="alight-apply-") as clean:
        patch = Path(clean) / "test.patch"
        patch.write_text(task.swebench.test_patch, encoding="utf-8")
        # Applied with an empty repository of our own as GIT_DIR: the workspace's config (filter drivers that
        # `git apply` would run while writing files) is not read at all.
        subprocess.run(["git", "init", "-q", "--bare", str(Path(clean) / "git")], capture_output=True, check=True)
        proc = subprocess.run(
            ["git", *UNTRUSTED_REPO, "--git-dir", str(Path(clean) / "git"), "--work-tree", str(workspace),
             "apply", "--whitespace=nowarn", str(patch)],
            cwd=workspace, capture_output=True, text=True, env=git_env(),
        )
    if proc.returncode != 0:
        raise AlightError(f"task {task.id}: test_patch does not apply in {workspace}: {proc.stderr.strip()[-1500:]}")


def copy_over(src: Path, dest: Path) -> None:
    """Copy the tree src into dest, replacing whatever the agent left at each of its paths.

    The agent had the workspace to itself: a hidden file's path may now be its own edit, a folder, or a symlink
    pointing out of the workspace (copying through it would write on the host). Each path is removed first
    and every parent folder on the way is made a real folder, so the copies land in the workspace, verbatim.
    """
    src, dest = Path(src), Path(dest)
    if not src.is_dir():  # os.walk would walk it as an empty folder: the reward would run without the hidden files
        raise AlightError(f"the hidden files folder {src} does not exist here ({os.uname().nodename})",
                          "it must exist where the episode runs; `--executor ray` sends it to the nodes itself")
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        _real_dir(dest, rel)
        for name in [*files, *(d for d in dirs if (Path(root) / d).is_symlink())]:
            target = dest / rel / name
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            shutil.copy2(Path(root) / name, target, follow_symlinks=False)


def _real_dir(base: Path, rel: Path) -> None:
    path = base
    for part in rel.parts:
        path = path / part
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            path.unlink()
        path.mkdir(exist_ok=True)


def _resolve_local(task: Task, source: str, ref: str) -> str:
    """Short hashes and branch names resolved in the task's own (local) repository."""
    proc = subprocess.run(["git", "-C", source, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise AlightError(f"task {task.id} ({task.where}): commit {ref!r} not found in {source}")
    return proc.stdout.strip()


def _fetch_base(task: Task, dest: Path, timeout_s: float, depth: int | None) -> None:
    source = task.repo or ""
    ref = task.base_commit or "HEAD"
    if task.repo_kind == "git-dir":  # fetching by an abbreviated hash is not possible
        ref = _resolve_local(task, source, ref)
    try:
        proc = subprocess.run(
            ["git", "fetch", "-q", "--no-tags", *([f"--depth={depth}"] if depth else []), source, ref],
            cwd=dest, capture_output=True, text=True, timeout=timeout_s,
            env=_git_env(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AlightError(f"task {task.id}: fetching {ref} from {source} took longer than {timeout_s:g}s") from None
    if proc.returncode != 0:
        hint = "check the URL and the network" + (
            "; for SWE-bench use a local mirror (--swebench-mirror DIR)" if task.kind == "swebench" else ""
        )
        why = proc.stderr.strip()[-800:]
        raise AlightError(f"task {task.id} ({task.where}): cannot fetch {ref} from {source}: {why}", hint)
    # The fetch brought the base commit's history alone; no reflog and no FETCH_HEAD (it names the source) stay.
    _git(task, dest, "-c", "core.logAllRefUpdates=false", "checkout", "-q", "-B", "main", "FETCH_HEAD")
    (dest / ".git" / "FETCH_HEAD").unlink(missing_ok=True)


def _git_env() -> dict[str, str]:
    import os

    return {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # never wait for a password prompt


def _git(task: Task, cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *GIT_IDENTITY, *args], cwd=cwd, capture_output=True, text=True, env=_git_env())
    if proc.returncode != 0:
        raise AlightError(f"task {task.id}: `git {' '.join(args)}` failed in {cwd}: {proc.stderr.strip()[-800:]}")
    return proc.stdout
