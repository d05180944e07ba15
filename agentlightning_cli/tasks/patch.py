"""The agent's changes as one patch: what a SWE-bench prediction submits (`model_patch`), for every episode.

Made the way SWE-bench's agents make it (`git add -A` then `git diff --cached --binary` against the starting
point), with two differences that keep it exact and safe:

- The starting point is the workspace *after setup*, snapshotted before the agent starts (`snapshot_base`), so
  files a task's setup wrote are not counted as the agent's. The snapshot is a tree in a git directory of our own
  outside the workspace (`<run_dir>/patch-bases/<episode>.git`), which no sandbox mounts.
- Every git command runs with that git directory and the workspace as its work tree: the workspace's own `.git`
  was the agent's (its config could name filter drivers or an external diff, its hooks run programs, its index
  and objects may be anything), so none of it is read. The base's objects are reached through an alternate on the
  workspace's object store, read-only, written by us before the agent ran; an agent that rewrites those objects
  can only spoil its own patch, never run anything on the host.

Ignored files (the workspace's `.gitignore`) are left out, as `git add -A` leaves them out for every SWE-bench
agent. A patch over `MAX_PATCH_BYTES` is not kept (its size is).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agentlightning_cli.tasks.base_files import git_env

MAX_PATCH_BYTES = 16 * 1024 * 1024
GIT_TIMEOUT_S = 300.0
NO_RUN = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "diff.external=",
          "-c", "core.autocrlf=false", "-c", "core.safecrlf=false"]
"""Nothing configurable that runs a program or rewrites content, whatever a global config says."""


@dataclass(frozen=True)
class AgentPatch:
    """The agent's diff against the workspace it was given; `patch` None when it could not be made or kept."""

    patch: bytes | None
    files: int
    size: int
    error: str | None = None


def patch_base_dir(run_dir: Path, episode_id: str) -> Path:
    return Path(run_dir).absolute() / "patch-bases" / f"{episode_id}.git"


def snapshot_base(workspace: Path, git_dir: Path) -> str:
    """Record the workspace as it is now (after setup, before the agent) as a tree; returns the tree's id.

    The workspace's own index is copied in first (written by us while preparing, so trusted): its stat data
    lets `git add -A` hash only what setup changed instead of every file of a large repository.
    """
    workspace, git_dir = Path(workspace).absolute(), Path(git_dir).absolute()
    if git_dir.exists():
        shutil.rmtree(git_dir)
    git_dir.parent.mkdir(parents=True, exist_ok=True)
    _run(["git", "init", "-q", "--bare", str(git_dir)], workspace)
    theirs = workspace / ".git" / "objects"
    if theirs.is_dir():
        (git_dir / "objects" / "info" / "alternates").write_text(f"{theirs}\n", encoding="utf-8")
    index = workspace / ".git" / "index"
    if index.is_file():
        shutil.copyfile(index, git_dir / "index")
    _git(git_dir, workspace, "add", "-A")
    tree = _git(git_dir, workspace, "write-tree").decode().strip()
    (git_dir / "alight-base").write_text(tree + "\n", encoding="utf-8")
    return tree


def agent_patch(workspace: Path, git_dir: Path, *, max_bytes: int = MAX_PATCH_BYTES) -> AgentPatch:
    """The agent's changes since `snapshot_base`, as a binary-safe git patch (empty bytes: no change)."""
    workspace, git_dir = Path(workspace).absolute(), Path(git_dir).absolute()
    try:
        tree = (git_dir / "alight-base").read_text(encoding="utf-8").strip()
        _git(git_dir, workspace, "add", "-A")
        names = _git(git_dir, workspace, "diff", "--cached", "--name-only", "-z", "--no-renames", tree)
        files = len([n for n in names.split(b"\0") if n])
        patch = _git(git_dir, workspace, "diff", "--cached", "--binary", "--no-color", "--no-ext-diff",
                     "--no-textconv", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/", tree)
    except (OSError, subprocess.SubprocessError, GitFailed) as exc:
        return AgentPatch(None, 0, 0, f"the agent's patch could not be made: {exc}")
    if len(patch) > max_bytes:
        return AgentPatch(None, files, len(patch),
                          f"the agent's patch is {len(patch):,} bytes, over the {max_bytes:,}-byte limit: not kept")
    return AgentPatch(patch, files, len(patch))


def remove_base(git_dir: Path) -> None:
    shutil.rmtree(git_dir, ignore_errors=True)


class GitFailed(RuntimeError):
    pass


def _git(git_dir: Path, workspace: Path, *args: str) -> bytes:
    return _run(["git", *NO_RUN, "--git-dir", str(git_dir), "--work-tree", str(workspace), *args], workspace)


def _run(argv: list[str], cwd: Path) -> bytes:
    # GIT_CONFIG_NOSYSTEM and a global config of /dev/null: the user's own aliases and drivers do not apply either.
    env = git_env(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, env=env, timeout=GIT_TIMEOUT_S)
    if proc.returncode != 0:
        raise GitFailed(f"{' '.join(argv[-2:])} exited with {proc.returncode}: "
                        f"{proc.stderr.decode(errors='replace').strip()[-500:]}")
    return proc.stdout
