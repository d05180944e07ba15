"""The guard on what a sandbox mounts: no read-only mount may expose what makes a reward worth anything.

A policy that can read a hidden test, another attempt's workspace or the store learns to read them, and its
reward then measures nothing — silently. So before a round starts, every folder an episode, setup or reward
sandbox would mount read-only is checked, once, against the protected places:

- the task set's folder, its tasks' hidden files and their local repositories (later history holds fixes);
- the run directory (runs_dir): the store, every episode's workspace and logs;
- ALIGHT_HOME, except the harness's own install folder;
- the user's HOME as a whole (a folder inside it, such as pyenv's, is fine).

A folder is refused when it is a protected place, contains one, or lies inside one. A file that a recipe's
command names (the agent's script) is mounted alone, so it may sit beside the task set; it is refused only inside
hidden files, a task's repository, the run directory or ALIGHT_HOME. `--unsafe-expose-protected-paths` lets a
user who truly wants such a mount have it, and the run summary says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentlightning_cli.errors import AlightError

OVERRIDE_FLAG = "--unsafe-expose-protected-paths"


@dataclass(frozen=True)
class Protected:
    path: Path
    what: str
    """What a mount of it would expose, for the message."""
    inside_ok: bool = False
    """A mount inside it is fine (HOME: pyenv's interpreters live there); only it or a folder holding it is not."""
    except_: Path | None = None
    """A folder inside it that may be mounted (ALIGHT_HOME: the harness's own install)."""
    files_ok: bool = False
    """A single file named by a recipe's command may lie inside it (the task set's folder: an agent beside it)."""


@dataclass(frozen=True)
class Mount:
    path: Path
    source: str
    """Where the mount comes from, for the message: "sandbox.read_only of my-agent.yaml", "the interpreter"."""
    single_file: bool = False
    """A file named by the recipe's command, mounted alone."""


def protected_places(*, task_set: Path | None = None, tasks: list = (), runs_dir: Path | None = None,
                     alight_home: Path | None = None, harness_install: Path | None = None,
                     home: Path | None = None) -> list[Protected]:
    """The places no sandbox may see, for a run of `tasks` from `task_set` (either may be absent: harness check)."""
    places: list[Protected] = []
    if task_set is not None:
        places.append(Protected(_real(Path(task_set).parent), "the task set's folder (hidden tests, reference files)",
                                files_ok=True))
    for task in tasks:
        if task.hidden_files is not None:
            places.append(Protected(_real(task.hidden_files), f"task {task.id}'s hidden files"))
        if getattr(task, "harbor", None) is not None:  # tests/ and solution/ reach a container only after the agent
            places.append(Protected(_real(task.harbor.task_dir), f"task {task.id}'s Harbor directory (its tests and "
                                    "solution)"))
        if task.repo and task.repo_kind in ("dir", "git-dir"):
            places.append(Protected(_real(Path(task.repo)), f"task {task.id}'s source repository (its later "
                                    "history and files beyond the base commit)"))
    if runs_dir is not None:
        places.append(Protected(_real(Path(runs_dir)), "the run directory (the store, every episode's workspace "
                                "and logs)"))
    if alight_home is not None:
        places.append(Protected(_real(Path(alight_home)), "ALIGHT_HOME (models, other harness installs, caches)",
                                except_=_real(harness_install) if harness_install is not None else None))
    home = Path.home() if home is None else home
    places.append(Protected(_real(home), "the user's HOME (keys, shell history, other projects)", inside_ok=True))
    return places


def exposures(mounts: list[Mount], places: list[Protected]) -> list[str]:
    """One line per mount and protected place it would expose: the path, where it comes from, what it exposes."""
    problems: list[str] = []
    for mount in mounts:
        path = _real(mount.path)
        for place in places:
            why = _exposes(path, place, mount.single_file)
            if why:
                problems.append(f"{mount.path} ({mount.source}) {why} {place.path}: {place.what}")
    return problems


def check(mounts: list[Mount], places: list[Protected], *, allow: bool = False, fix: str = "") -> list[str]:
    """Refuse (AlightError naming every path, what it would expose and the fix) unless `allow`; returns the
    exposures that `allow` let through, for the summary."""
    problems = exposures(mounts, places)
    if problems and not allow:
        lines = "\n  ".join(problems)
        raise AlightError(
            f"the sandbox would expose protected paths to the agent (it could read hidden tests or other "
            f"attempts' work, and the reward would mean nothing):\n  {lines}",
            (fix or "mount only what the agent needs: a folder of its own outside the task set and the run "
             "directory") + f"; to allow it anyway, pass {OVERRIDE_FLAG}")
    return problems


def _exposes(path: Path, place: Protected, single_file: bool) -> str | None:
    inside = path.is_relative_to(place.path)
    if path == place.path:
        return "is"
    if place.path.is_relative_to(path):
        return "contains"
    if not inside or place.inside_ok or (single_file and place.files_ok):
        return None
    if place.except_ is not None and path.is_relative_to(place.except_):
        return None
    return "lies inside"


def _real(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(path))))
