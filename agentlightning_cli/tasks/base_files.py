"""The base-commit version of files (SWE-bench's test files) from a source the agent never controlled.

The workspace's .git belonged to the agent for the whole episode: it could add refs/replace/* (git then serves
another object for a hash), rewrite a loose object file, or point objects/info/alternates elsewhere. So:
- `git-dir` tasks (a local mirror, or the run's source cache) read the mirror itself;
- `dir` tasks read the task's folder; `none` tasks have no base files;
- `url` tasks read the workspace's object store through an empty repository of ours (none of the workspace's
  refs or config is read), and every object on the way - commit, trees, blob - is hashed and must match the
  hash its parent names, starting from the task's full base commit hash. Anything that does not match (the
  agent rewrote it) is fetched again from the URL into that private repository.
GIT_NO_REPLACE_OBJECTS=1 on every git call: a replace ref never swaps an object here.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks.model import Task

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
FETCH_TIMEOUT_S = 1800.0


def git_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_NO_REPLACE_OBJECTS": "1", **extra}


def base_versions(task: Task, workspace: Path, paths: list[str]) -> dict[str, bytes | None]:
    """{path: content at the base commit, or None when the base commit has no such file}."""
    if task.repo_kind == "none" or not paths:
        return {rel: None for rel in paths}
    if task.repo_kind == "dir":
        return {rel: _read_plain(Path(task.repo or ""), rel) for rel in paths}
    if task.repo_kind == "git-dir":
        ref = task.base_commit or "HEAD"
        return {rel: _blob_in(["-C", task.repo or "."], f"{ref}:{rel}", git_env()) for rel in paths}
    return _verified(task, Path(workspace), paths)


def _read_plain(root: Path, rel: str) -> bytes | None:
    path = root / rel
    return path.read_bytes() if path.is_file() else None


def _blob_in(where: list[str], spec: str, env: dict[str, str]) -> bytes | None:
    proc = subprocess.run(["git", *where, "cat-file", "blob", spec], capture_output=True, env=env, check=False)
    return proc.stdout if proc.returncode == 0 else None


def _verified(task: Task, workspace: Path, paths: list[str]) -> dict[str, bytes | None]:
    sha = (task.base_commit or "").lower()
    if not FULL_SHA.match(sha):
        raise AlightError(f"task {task.id}: the base files cannot be checked without the full base commit hash "
                          f"(got {task.base_commit!r})", "give base_commit as the full 40-character hash")
    with tempfile.TemporaryDirectory(prefix="alight-base-") as clean:
        subprocess.run(["git", "init", "-q", "--bare", clean], capture_output=True, check=True)
        objects = workspace / ".git" / "objects"
        env = git_env(GIT_DIR=clean, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
                      GIT_ALTERNATE_OBJECT_DIRECTORIES=str(objects) if objects.is_dir() else "")
        store = _Store(env)
        try:
            return {rel: store.file(sha, rel) for rel in paths}
        except _Tampered:
            pass
        # Something on the way did not hash to what it should: read from the URL instead, into our repository
        # alone (no alternates: the workspace's objects are not looked at again).
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = ""
        try:
            proc = subprocess.run(["git", "fetch", "-q", "--no-tags", "--depth=1", task.repo or "", sha],
                                  capture_output=True, text=True, env=env, timeout=FETCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode != 0:
            why = "timed out" if proc is None else proc.stderr.strip()[-500:]
            raise AlightError(f"task {task.id}: the workspace's copy of the base files was altered and fetching "
                              f"{sha} from {task.repo} failed: {why}", "check the network or use a local mirror")
        try:
            return {rel: _Store(env).file(sha, rel) for rel in paths}
        except _Tampered as exc:
            raise AlightError(f"task {task.id}: {sha} fetched from {task.repo} does not match its hash: {exc}") from None


class _Tampered(Exception):
    pass


class _Store:
    """Objects read through `git cat-file`, each checked against the hash it was asked for."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def get(self, sha: str, kind: str) -> bytes:
        proc = subprocess.run(["git", "cat-file", kind, sha], capture_output=True, env=self.env, check=False)
        data = proc.stdout
        if proc.returncode != 0 or hashlib.sha1(f"{kind} {len(data)}\0".encode() + data).hexdigest() != sha:
            raise _Tampered(f"{kind} {sha}")
        return data

    def file(self, commit: str, rel: str) -> bytes | None:
        head = self.get(commit, "commit").split(b"\n", 1)[0]
        if not head.startswith(b"tree "):
            raise _Tampered(f"commit {commit} has no tree")
        sha, mode = head[5:].decode(), "40000"
        for part in Path(rel).parts:
            if mode != "40000":
                return None
            entry = _entries(self.get(sha, "tree")).get(part.encode())
            if entry is None:
                return None
            mode, sha = entry
        if mode == "40000" or mode == "160000":  # a folder or a submodule, not a file
            return None
        return self.get(sha, "blob")


def _entries(tree: bytes) -> dict[bytes, tuple[str, str]]:
    """A tree object's entries: name -> (mode, hex hash). Format: `<mode> <name>\\0<20-byte hash>` repeated."""
    out, i = {}, 0
    while i < len(tree):
        space = tree.index(b" ", i)
        nul = tree.index(b"\0", space)
        out[tree[space + 1:nul]] = (tree[i:space].decode(), tree[nul + 1:nul + 21].hex())
        i = nul + 21
    return out
