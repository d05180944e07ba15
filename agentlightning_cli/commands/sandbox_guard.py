"""The sandbox guard as commands use it: the read-only mounts a recipe's episodes (and a run's setup and reward
commands) would get, checked against the places no agent may see (sandbox/exposure.py).

`alight run` refuses before anything starts; `alight harness check` before its one episode; `alight doctor
--recipe FILE` reports. One function builds the mounts and places for all three, so they agree.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentlightning_cli.sandbox import exposure

if TYPE_CHECKING:
    from agentlightning_cli.config import Settings
    from agentlightning_cli.harness.install import Installed
    from agentlightning_cli.harness.recipe import Recipe
    from agentlightning_cli.tasks.model import Task


def recipe_mounts(recipe: Recipe, installed: Installed, tasks: Sequence[Task] = ()) -> list[exposure.Mount]:
    """The harness's mounts (sandboxed.planned_mounts) and the setup/reward commands' interpreters."""
    from agentlightning_cli.harness.sandboxed import planned_mounts
    from agentlightning_cli.sandbox.paths import task_shell_roots

    with_alight = any(t.swebench is not None for t in tasks)
    return [*planned_mounts(recipe, installed),
            *(exposure.Mount(p, "the setup and reward commands' interpreters") for p in task_shell_roots(with_alight))]


def places(settings: Settings, installed: Installed, *, task_set: Path | None = None, tasks: Sequence[Task] = (),
           runs_dir: Path | None = None, run_dir: Path | None = None) -> list[exposure.Protected]:
    """The protected places for this recipe's install, the settings' ALIGHT_HOME and runs_dir (or `runs_dir`), a
    task set and its tasks, and one run's own directory."""
    found = exposure.protected_places(
        task_set=task_set, tasks=list(tasks), runs_dir=settings.runs_dir if runs_dir is None else runs_dir,
        alight_home=settings.home, harness_install=None if installed.external else installed.dir)
    if run_dir is not None:
        found.append(exposure.Protected(Path(run_dir), "this run's directory (the store, every episode's workspace "
                                        "and logs)"))
    return found


def fix_hint(recipe: Recipe, installed: Installed) -> str:
    if installed.external or recipe.sandbox.read_only:
        return (f"keep what the agent needs in a folder of its own, outside the task set, the run directory and your "
                f"HOME, and name only that in `sandbox.read_only` of {recipe.source}")
    return "install the harness again (`alight harness install`), or keep the task set and runs_dir apart from it"


def problems(settings: Settings, recipe: Recipe, installed: Installed, **where: Any) -> list[str]:
    """What would be exposed (empty: nothing); for reports (`alight doctor`)."""
    return exposure.exposures(recipe_mounts(recipe, installed, where.get("tasks", ())),
                              places(settings, installed, **where))


def refuse_exposures(settings: Settings, recipe: Recipe, installed: Installed, *, allow: bool = False,
                     **where: Any) -> list[str]:
    """AlightError naming every exposing mount and the fix, unless `allow` (then: the exposures it let through).
    Nothing to check when episodes run unsandboxed (`sandbox: none` shows them everything anyway)."""
    if settings.sandbox == "none":
        return []
    return exposure.check(recipe_mounts(recipe, installed, where.get("tasks", ())),
                          places(settings, installed, **where), allow=allow, fix=fix_hint(recipe, installed))
