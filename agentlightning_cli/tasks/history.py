"""A workspace's git history: the base commit and its ancestors, nothing else.

A repository as an image or a user keeps it often holds commits past the task's base commit - behind a tag, a
branch, a remote-tracking ref, a reflog entry, ORIG_HEAD/FETCH_HEAD, a stash, notes, or as unreachable objects
still in a pack. The fix the agent is asked to write may be one of them (`git log --all -S …`, `git show <sha>`:
a known reward hack, mini-swe-agent #787, SWE-bench #465/#581). So no workspace gets a repository's `.git` as it
is: `clean_history` writes a new bare repository holding exactly the objects `git rev-list --objects <base>`
names, in one pack, with one ref; `install_history` gives a workspace a `.git` of its own from it (plain copies
of that pack: no alternates, no hard links into any store). Both run without replace refs and never read the
source repository's config (an image's config is not ours to run); only a host checkout's files are written with
this machine's git config (filters such as LFS, line endings), as `git checkout` would.

Making the clean repository costs a pass over the history (seconds to minutes on a large one), so it is made
once per (source, base commit) into a cache (`cached_history`) and copied per workspace (a fraction of a second).

`clean_history(source_git_dir, base, dest)` is the public entry for anything else that needs a repository
reduced to a commit's history (e.g. a git bundle of it: `git bundle create F base` in the result).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from agentlightning_cli.errors import AlightError

HEX = re.compile(r"^[0-9a-f]{4,64}$")
GIT_TIMEOUT_S = 3600.0
BASE_REF = "refs/heads/base"
CACHE_BYTES = 8 * 1024**3
"""What the clean repositories of one cache (a run's, on one machine) may take before the least recently used go."""


@dataclass
class History:
    """A clean bare repository (`git_dir`: one pack, `refs/heads/base` at `base`, a `shallow` file when the source
    was shallow) and what the source held beyond it."""

    git_dir: Path
    base: str
    branch: str = "main"
    """The branch the source's HEAD named (a workspace's HEAD gets the same name), or main."""
    dropped_refs: list[str] = field(default_factory=list)
    """The source's refs (and ORIG_HEAD, FETCH_HEAD, ...) that named anything but the base commit."""
    dropped_objects: int = 0
    """Objects the source held that the base commit does not reach (later commits, dangling ones)."""
    reflogs: int = 0
    """Reflog files the source had (each may name later commits)."""

    @property
    def scrubbed(self) -> bool:
        """Whether anything past the base commit was left out."""
        return bool(self.dropped_refs or self.dropped_objects or self.reflogs)

    def to_json(self) -> dict:
        """For the episode's record: counts and a few names, not every ref."""
        return {"base": self.base, "scrubbed": self.scrubbed, "refs_removed": len(self.dropped_refs),
                "refs": self.dropped_refs[:10], "objects_removed": self.dropped_objects,
                "reflogs_removed": self.reflogs}


def clean_history(source: Path, base: str | None, dest: Path, *, borrowed: bool = False) -> History:
    """A new bare repository at `dest` (absent) holding only `base`'s history from the git directory `source`.

    `base`: a full or abbreviated commit hash, a branch or tag name of the source, or None for its HEAD. The
    source is only read: its objects (through an alternate, for this process only), its ref files and `shallow`.
    `borrowed`: the source's own alternates (objects/info/alternates) are followed - for a repository of this
    machine's (`clone --shared`/`--reference`); otherwise (an image's copy, whose paths mean another machine) a
    source that borrows objects is refused. The result borrows nothing either way. AlightError when the base
    commit is not there.
    """
    source, dest = Path(source).absolute(), Path(dest).absolute()
    objects = source / "objects"
    if not objects.is_dir():
        raise AlightError(f"{source} is not a git directory (no objects folder)")
    if not borrowed and (objects / "info" / "alternates").exists():
        # The objects it borrows may be anywhere (a path on the machine that built an image); we follow none.
        raise AlightError(f"the repository {source} borrows objects from elsewhere (objects/info/alternates)",
                          "make the repository self-contained (`git repack -a -d` then remove objects/info/alternates)")
    refs = _read_refs(source)
    head = _head(source, refs)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(["init", "-q", "--bare", str(dest)], None)
    env = _env(dest, objects)
    shallow = source / "shallow"
    if shallow.is_file():  # a shallow source: its boundary commits have no parents here either
        lines = [ln for ln in shallow.read_text().split() if HEX.match(ln)]
        (dest / "shallow").write_text("".join(ln + "\n" for ln in lines))
    sha = _resolve(base, refs, head, env, source)
    # Exactly what `rev-list --objects <base>` names, reusing the source's deltas (no recompression).
    # No commit-graph: parents come from the commit objects themselves, as `rev-list` in the result reads them.
    _git(["-c", "core.commitGraph=false", "pack-objects", "--revs", "--delta-base-offset", "-q",
          str(dest / "objects" / "pack" / "pack")], env, stdin=sha + "\n")
    own = _env(dest, None)
    _git(["update-ref", BASE_REF, sha], own)
    _git(["symbolic-ref", "HEAD", BASE_REF], own)
    kept = _count_objects(own)
    counter = _empty(dest)
    every = _count_objects(_env(counter, objects))
    shutil.rmtree(counter, ignore_errors=True)
    dropped = sorted(name for name, target in refs.items() if target != sha)
    reflogs = sum(len(files) for _, _, files in os.walk(source / "logs")) if (source / "logs").is_dir() else 0
    branch = head[1] if head and head[1] else "main"
    return History(dest, sha, branch, dropped, max(every - kept, 0), reflogs)


@contextlib.contextmanager
def cached_history(cache: Path, key: str, make: Callable[[Path], History],
                   budget_bytes: int = CACHE_BYTES) -> Iterator[History]:
    """The History made once under `cache/<key>` by `make(dest)` and reused by every later caller, held for the
    `with` block (a shared file lock: across processes, e.g. a Ray node's workers). Made under an exclusive lock;
    a report written last marks it complete. Past `budget_bytes` in all, the entries used least recently and in
    use by no one are removed (a SWE-bench set has a large pack per task; a removed one is made again if needed)."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    dest, report = cache / f"{key}.git", cache / f"{key}.json"
    with open(cache / f"{key}.lock", "a") as held:
        while True:
            fcntl.flock(held, fcntl.LOCK_SH)
            if report.is_file():
                data = json.loads(report.read_text())
                os.utime(report)  # used now: the last to be removed
                yield History(**{k: v for k, v in data.items() if k != "bytes"} | {"git_dir": Path(data["git_dir"])})
                return
            fcntl.flock(held, fcntl.LOCK_EX)
            if not report.is_file():
                shutil.rmtree(dest, ignore_errors=True)  # a half-made one from a killed process
                made = make(dest)
                size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
                report.write_text(json.dumps({**asdict(made), "git_dir": str(made.git_dir), "bytes": size}))
            fcntl.flock(held, fcntl.LOCK_UN)
            _evict(cache, budget_bytes, keep=key)


def _evict(cache: Path, budget_bytes: int, keep: str) -> None:
    """Remove the least recently used complete entries that no one holds until the rest fit the budget."""
    entries = []
    for report in cache.glob("*.json"):
        try:
            entries.append((report.stat().st_mtime, report.stem, int(json.loads(report.read_text()).get("bytes", 0))))
        except (OSError, ValueError):
            continue
    total = sum(size for _, _, size in entries)
    for _, key, size in sorted(entries):
        if total <= budget_bytes:
            return
        if key == keep:
            continue
        with open(cache / f"{key}.lock", "a") as held:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use
            (cache / f"{key}.json").unlink(missing_ok=True)
            shutil.rmtree(cache / f"{key}.git", ignore_errors=True)
            total -= size


def install_history(history: History, workspace: Path, *, checkout: bool, branch: str | None = None) -> None:
    """`workspace/.git` (absent) from the clean repository: HEAD on `history.branch` at the base commit, no
    reflog, no remote (`branch` overrides the name). `checkout`: write the base commit's files too (an empty
    workspace); otherwise the files are already there (an image's project) and only the index is made, then
    refreshed against them."""
    workspace = Path(workspace).absolute()
    if (workspace / ".git").exists() or (workspace / ".git").is_symlink():
        raise AlightError(f"{workspace} already has a .git")
    _git(["init", "-q", str(workspace)], None)
    git_dir = workspace / ".git"
    pack_dir = git_dir / "objects" / "pack"
    for item in (history.git_dir / "objects" / "pack").iterdir():
        if item.suffix in (".pack", ".idx"):
            shutil.copyfile(item, pack_dir / item.name)  # a copy: the agent may write to its own store
    if (history.git_dir / "shallow").is_file():
        shutil.copyfile(history.git_dir / "shallow", git_dir / "shallow")
    env = {**_env(git_dir, None), "GIT_WORK_TREE": str(workspace)}
    branch = f"refs/heads/{branch or history.branch}"
    quiet = ["-c", "core.logAllRefUpdates=false"]  # no reflog entry, not even the base commit's
    _git([*quiet, "update-ref", branch, history.base], env)
    _git([*quiet, "symbolic-ref", "HEAD", branch], env)
    for key, value in (("user.name", "alight"), ("user.email", "alight@localhost"), ("commit.gpgsign", "false")):
        _git(["config", key, value], env)  # so an agent's own `git commit` works in the workspace
    if checkout:  # this machine's own repository: its files come out as a checkout here would (LFS, autocrlf)
        mine = {k: v for k, v in env.items() if k not in ("GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL")}
        _git(["read-tree", "--reset", "-u", "HEAD"], mine, cwd=workspace)
    else:
        _git(["read-tree", "HEAD"], env, cwd=workspace)
        # Exit 1 means some files differ from the base commit (the image's own changes): that is the truth.
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=workspace, env=env, capture_output=True,
                       timeout=GIT_TIMEOUT_S)


def scrub_checkout(project: Path, base: str | None, cache: Path, key: str, *,
                   inside: Path | None = None) -> History | None:
    """A copied-out project (an image's /testbed: files and `.git`) with its `.git` replaced by the base commit's
    history (made once under `cache/<key>`), and each submodule the base commit pins that is checked out in it
    likewise reduced to its pinned commit (none of its later commits either; one whose pinned commit is not
    there keeps its files and loses its repository). A `.git` that points outside `inside` (default: the
    project) is never followed, only removed. Returns what was left out, submodules' included; None when the
    project has no repository."""
    project = Path(project).absolute()
    inside = Path(inside or project).resolve()
    dot = project / ".git"
    source = _own_git_dir(dot, inside)
    if source is None:
        _remove(dot)
        return None
    with cached_history(cache, key, lambda made: clean_history(source, base, made)) as history:
        return _scrub_checkout(project, history, source, cache, key, inside)


def _scrub_checkout(project: Path, history: History, source: Path, cache: Path, key: str, inside: Path) -> History:
    refs, objects, reflogs = list(history.dropped_refs), history.dropped_objects, history.reflogs
    for rel, pinned in _gitlinks(history):
        sub = project / rel
        if not sub.resolve().is_relative_to(project.resolve()) or not (sub / ".git").exists():
            continue  # not checked out (or a path that leaves the project)
        sub_key = hashlib.sha256(f"{key}\0{rel}".encode()).hexdigest()[:24]
        try:
            found = scrub_checkout(sub, pinned, cache, sub_key, inside=inside)
        except AlightError:  # its pinned commit is not in its repository: no history of it rather than a wrong one
            _remove(sub / ".git")
            continue
        if found is not None:
            refs += [f"{rel}:{name}" for name in found.dropped_refs]
            objects, reflogs = objects + found.dropped_objects, reflogs + found.reflogs
    if inside == project.resolve():  # the top: no other `.git` file may point into the one removed now
        _remove_pointers_into(project, source)
    _remove(project / ".git")  # after the submodules: theirs may live in it (.git/modules)
    install_history(history, project, checkout=False)
    return dataclasses.replace(history, dropped_refs=refs, dropped_objects=objects, reflogs=reflogs)


def _own_git_dir(dot: Path, inside: Path) -> Path | None:
    """The git directory a work tree's `.git` is (a folder) or names (`gitdir: …`, a submodule's), if inside."""
    if dot.is_symlink():
        return None
    if dot.is_dir():
        return dot
    if dot.is_file():
        text = dot.read_text(errors="replace").strip()
        if text.startswith("gitdir:"):
            target = (dot.parent / text[len("gitdir:"):].strip()).resolve()
            if target.is_relative_to(inside) and (target / "objects").is_dir():
                return target
    return None


def _remove_pointers_into(project: Path, git_dir: Path) -> None:
    """Remove each `.git` file under project that names a folder inside git_dir (a submodule the base commit no
    longer has, still checked out): it would point at nothing, and git refuses a work tree holding one."""
    git_dir = git_dir.resolve()
    for root, dirs, files in os.walk(project):
        dirs[:] = [d for d in dirs if d != ".git"]
        if ".git" in files and Path(root) != project:
            dot = Path(root) / ".git"
            text = dot.read_text(errors="replace").strip() if not dot.is_symlink() else ""
            target = (dot.parent / text[len("gitdir:"):].strip()).resolve() if text.startswith("gitdir:") else None
            if target is not None and target.is_relative_to(git_dir):
                dot.unlink()


def _gitlinks(history: History) -> list[tuple[str, str]]:
    """(path, pinned commit) of every submodule the base commit has."""
    out = _git(["ls-tree", "-r", "-z", "--full-tree", history.base], _env(history.git_dir, None))
    links = []
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[0] == "160000" and HEX.match(parts[2]):
            links.append((path, parts[2]))
    return links


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _read_refs(git_dir: Path) -> dict[str, str]:
    """Every ref the source names, as files say it (loose refs, packed-refs, and the *_HEAD files): name -> what
    it points at (a hash, or "ref: ..." for a symbolic one). Read as data: no git runs in the source."""
    found: dict[str, str] = {}
    packed = git_dir / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(errors="replace").splitlines():
            parts = line.split(" ", 1)
            if len(parts) == 2 and HEX.match(parts[0]) and not line.startswith(("#", "^")):
                found[parts[1]] = parts[0]
    refs = git_dir / "refs"
    if refs.is_dir():
        for root, _, files in os.walk(refs):
            for name in files:
                path = Path(root) / name
                found[path.relative_to(git_dir).as_posix()] = path.read_text(errors="replace").strip()
    for path in git_dir.glob("*_HEAD"):
        if path.is_file():  # FETCH_HEAD has one line per ref fetched; every hash in it counts
            for i, line in enumerate(path.read_text(errors="replace").splitlines()):
                if line.split():
                    found[path.name + (f"[{i}]" if i else "")] = line.split()[0]
    return found


def _head(git_dir: Path, refs: dict[str, str]) -> tuple[str, str | None] | None:
    """(HEAD's commit hash, its branch name or None when detached), or None when unborn or unreadable."""
    text = (git_dir / "HEAD").read_text(errors="replace").strip() if (git_dir / "HEAD").is_file() else ""
    if text.startswith("ref: "):
        name = text[5:].strip()
        target = refs.get(name, "")
        branch = name[len("refs/heads/"):] if name.startswith("refs/heads/") else None
        return (target, branch) if HEX.match(target) else None
    return (text, None) if HEX.match(text) else None


def _resolve(base: str | None, refs: dict[str, str], head: tuple[str, str | None] | None, env: dict[str, str],
             source: Path) -> str:
    """The full hash of the base commit, checked to be a commit the source has."""
    if base is None or base == "HEAD":
        if head is None:
            raise AlightError(f"the repository {source} has no HEAD commit",
                              "give the task's base_commit (the full hash)")
        wanted = head[0]
    else:
        names = (base, f"refs/heads/{base}", f"refs/tags/{base}")
        wanted = next((refs[n] for n in names if HEX.match(refs.get(n, ""))), base)
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{wanted}^{{commit}}"], env=env,
                          capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    if proc.returncode != 0:
        raise AlightError(f"commit {base or 'HEAD'!r} is not in the repository {source}",
                          "check the task's base_commit against the repository (or the image's project)")
    return proc.stdout.strip()


def _count_objects(env: dict[str, str]) -> int:
    proc = subprocess.run(["git", "cat-file", "--batch-all-objects", "--unordered", "--batch-check=%(objectname)"],
                          env=env, capture_output=True, timeout=GIT_TIMEOUT_S)
    return proc.stdout.count(b"\n")


def _empty(dest: Path) -> Path:
    """An empty repository beside dest: with an alternate, it counts the source's objects alone."""
    empty = dest.with_name(dest.name + ".count")
    shutil.rmtree(empty, ignore_errors=True)
    _git(["init", "-q", "--bare", str(empty)], None)
    return empty


def _env(git_dir: Path, alternate: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(git_dir), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               GIT_NO_REPLACE_OBJECTS="1", GIT_TERMINAL_PROMPT="0")
    if alternate is not None:
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(alternate)
    return env


def _git(args: list[str], env: dict[str, str] | None, *, stdin: str | None = None, cwd: Path | None = None) -> str:
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    proc = subprocess.run(["git", *args], env=env, input=stdin, capture_output=True, text=True, cwd=cwd,
                          timeout=GIT_TIMEOUT_S)
    if proc.returncode != 0:
        raise AlightError(f"`git {' '.join(args[:3])}` failed while reducing a repository to its base commit: "
                          f"{proc.stderr.strip()[-800:]}")
    return proc.stdout


def temporary_cache() -> tempfile.TemporaryDirectory:
    """A cache for one call when the caller keeps none (the clean repository is made and dropped)."""
    return tempfile.TemporaryDirectory(prefix="alight-history-")
