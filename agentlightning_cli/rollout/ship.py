"""A task's local sources, shipped from the head to the Ray nodes through Ray's object store: a cluster needs no
shared file system.

What a node cannot see of the head's disk it must not silently do without: a hidden-files folder that is not
there would be "revealed" as nothing, and the reward would run against whatever the agent wrote under those names.
So the head packs every local path a task names, once per run — the `hidden_files` folder and a plain-folder `repo`
as tar archives, a local git `repo` as a git bundle that holds only the base commit's history (no later commit,
tag or branch reaches a node) — and puts each in the object store. A node unpacks each once into its own folder
(locked across its worker processes, as the git source cache is) and runs the task from there. Remote git URLs
are not shipped: each node fetches them itself (rollout/sources.py).
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError

BASE_REF = "refs/heads/base"
"""The one ref a shipped bundle holds: the base commit."""


@dataclass(frozen=True)
class Shipment:
    """One local source of a task, packed on the head (picklable: it travels in the NodeJob)."""

    what: str
    """"hidden_files" or "repo": the task field it replaces on the node."""
    head_path: str
    """Where it is on the head (named in errors)."""
    form: str
    """"tar" (a folder) or "bundle" (a git repository's base-commit history)."""
    key: str
    """Its folder's name on a node: a hash of (what, path, commit)."""
    ref: Any
    """The packed bytes in Ray's object store (an ObjectRef)."""
    commit: str | None = None
    """A bundle's base commit (full hash)."""


class Shipper:
    """The head's side: each (field, path, commit) packed and put once per run, whichever of its tasks names it."""

    def __init__(self, ray: Any):
        import threading

        self._ray = ray
        self._sent: dict[tuple[str, str, str | None], Shipment] = {}
        self._lock = threading.Lock()  # the attempts of a task start together: one packs, the others reuse it

    def for_task(self, task: Any) -> list[Shipment]:
        """The task's local sources, packed (blocking). AlightError naming the path when the head cannot read one."""
        with self._lock:
            return self._for_task(task)

    def _for_task(self, task: Any) -> list[Shipment]:
        wanted = []
        if task.hidden_files is not None:
            wanted.append(("hidden_files", str(task.hidden_files), None, "tar"))
        if task.repo_kind == "dir":
            wanted.append(("repo", str(task.repo), None, "tar"))
        elif task.repo_kind == "git-dir":
            wanted.append(("repo", str(task.repo), task.base_commit or "HEAD", "bundle"))
        out = []
        for what, path, ref, form in wanted:
            found = self._sent.get((what, path, ref))
            if found is None:
                data, commit = (_tar(task, what, Path(path)), None) if form == "tar" else _bundle(task, Path(path), ref)
                key = hashlib.sha256(f"{what}\0{path}\0{commit}".encode()).hexdigest()[:20]
                found = self._sent[(what, path, ref)] = Shipment(what, path, form, key, self._ray.put(data), commit)
            out.append(found)
        return out


def _tar(task: Any, what: str, folder: Path) -> bytes:
    if not folder.is_dir():
        raise AlightError(f"task {task.id} ({task.where}): its {what} folder {folder} is not on the head any more, so "
                          "it cannot be sent to the nodes", "restore it, or fix the task set, and rerun the command")
    buffer = io.BytesIO()
    skip_git = what == "repo"  # a plain-folder repo's workspace is made without its .git (tasks/workspace.py)
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=".", filter=lambda info: None if skip_git and _is_git(info.name) else info)
    return buffer.getvalue()


def _is_git(name: str) -> bool:
    return Path(name).parts[:1] == (".git",)  # "./.git/..." (the archive's root is ".")


def _bundle(task: Any, repo: Path, ref: str | None) -> tuple[bytes, str]:
    """A bundle of the base commit and its ancestors only: fetched into an empty repository of ours (no tags, no
    other refs), then bundled from its one ref. The user's repository is only read."""
    if not repo.is_dir():
        raise AlightError(f"task {task.id} ({task.where}): its repo {repo} is not on the head any more, so it "
                          "cannot be sent to the nodes", "restore it, or fix the task set, and rerun the command")
    sha = _git(task, ["-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
               f"commit {ref!r} not found in {repo}").strip()
    with tempfile.TemporaryDirectory(prefix="alight-ship-") as tmp:
        bare = Path(tmp) / "base.git"
        _git(task, ["init", "-q", "--bare", str(bare)], "cannot make a temporary repository")
        _git(task, ["-C", str(bare), "fetch", "-q", "--no-tags", str(repo), sha], f"cannot read {sha} from {repo}")
        _git(task, ["-C", str(bare), "update-ref", BASE_REF, sha], "cannot set the bundle's ref")
        _git(task, ["-C", str(bare), "bundle", "create", "-q", str(Path(tmp) / "base.bundle"), BASE_REF],
             f"cannot bundle {sha} of {repo}")
        return (Path(tmp) / "base.bundle").read_bytes(), sha


# -- the node's side ----------------------------------------------------------------------------------------
def localize(task: Any, shipments: list[Shipment], root: Path) -> Any:
    """The task with each shipped source replaced by this node's unpacked copy under root (unpacked once per node)."""
    import fcntl

    import ray

    update: dict[str, Any] = {}
    root.mkdir(parents=True, exist_ok=True)
    for item in shipments:
        dest = root / item.key
        with open(root / f"{item.key}.lock", "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # the node's other worker processes wait for this one unpacking
            if not (root / f"{item.key}.done").is_file():
                _unpack(task, item, ray.get(item.ref), dest)
                (root / f"{item.key}.done").write_text(item.head_path)
        if item.what == "hidden_files":
            update["hidden_files"] = dest
        elif item.form == "tar":
            update["repo"] = str(dest)
        else:
            update.update(repo=str(dest), repo_kind="git-dir", base_commit=item.commit)
    return task.model_copy(update=update) if update else task


def _unpack(task: Any, item: Shipment, data: bytes, dest: Path) -> None:
    import shutil

    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if item.form == "tar":
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(partial, filter="tar")  # no absolute paths, no links out of the folder
    else:
        bundle = partial.with_suffix(".bundle")
        bundle.write_bytes(data)
        try:
            _git(task, ["init", "-q", "--bare", str(partial)], "cannot make the node's repository")
            _git(task, ["-C", str(partial), "fetch", "-q", "--no-tags", str(bundle), f"{BASE_REF}:{BASE_REF}"],
                 f"cannot unbundle the base commit of {item.head_path}")
        finally:
            bundle.unlink(missing_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)


def _git(task: Any, args: list[str], what: str) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise AlightError(f"task {task.id}: {what}: {proc.stderr.strip()[-800:]}")
    return proc.stdout


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_NO_REPLACE_OBJECTS": "1"}
