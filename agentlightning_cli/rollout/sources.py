"""A per-run cache of remote git sources: each (URL, base commit) is fetched once, every attempt copies locally.

Eight attempts at a task on a 500 MB repository must not mean eight network fetches (nor one per process on a
Ray worker node: the fetch is locked across processes). The first workspace
for a task fetches its base commit (and ancestors, never later commits or tags) into a bare repository under
`<run_dir>/sources/`; every workspace is then made from that bare repository, which is a local fetch.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError

FETCH_TIMEOUT_S = 1800.0


class SourceCache:
    def __init__(self, root: Path):
        self.root = Path(root)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._ready: dict[str, str] = {}
        self.fetches = 0
        """Network fetches made (one per distinct source), for tests and the benchmark."""

    def local_task(self, task: Any) -> Any:
        """The task with its remote repo replaced by the local cache (fetched on first use); others unchanged."""
        if task.repo_kind != "url":
            return task
        key = hashlib.sha256(f"{task.repo}\0{task.base_commit or 'HEAD'}".encode()).hexdigest()[:20]
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # other attempts at the same task wait for the one fetch instead of starting their own
            if key not in self._ready:
                self._ready[key] = self._fetch_once(task, key)
        return task.model_copy(update={"repo": str(self.root / key), "repo_kind": "git-dir",
                                       "base_commit": self._ready[key]})

    def _fetch_once(self, task: Any, key: str) -> str:
        """The fetched commit, fetching only if no process did before: the episodes of a Ray worker node run in
        several processes that share one cache folder, so a file lock and a done-marker make it once per node."""
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        done = self.root / f"{key}.commit"
        with open(self.root / f"{key}.lock", "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            if done.is_file():
                return done.read_text().strip()
            sha = self._fetch(task, self.root / key)
            done.write_text(sha)
            return sha

    def _fetch(self, task: Any, dest: Path) -> str:
        ref = task.base_commit or "HEAD"
        dest.mkdir(parents=True, exist_ok=True)
        _git(["init", "-q", "--bare"], dest, task)
        try:
            proc = subprocess.run(["git", "fetch", "-q", "--no-tags", task.repo, ref], cwd=dest, capture_output=True,
                                  text=True, timeout=FETCH_TIMEOUT_S, env=_env())
        except subprocess.TimeoutExpired:
            raise AlightError(f"task {task.id}: fetching {ref} from {task.repo} took longer than {FETCH_TIMEOUT_S:g}s") from None
        if proc.returncode != 0:
            raise AlightError(f"task {task.id} ({task.where}): cannot fetch {ref} from {task.repo}: "
                              f"{proc.stderr.strip()[-800:]}", "check the URL and the network")
        self.fetches += 1
        sha = _git(["rev-parse", "FETCH_HEAD^{commit}"], dest, task).strip()
        _git(["update-ref", "refs/heads/base", sha], dest, task)  # keeps the objects reachable
        return sha


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "GIT_TERMINAL_PROMPT": "0"}


def _git(args: list[str], cwd: Path, task: Any) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise AlightError(f"task {task.id}: `git {' '.join(args)}` failed in {cwd}: {proc.stderr.strip()[-800:]}")
    return proc.stdout
