"""What `alight harness list/install/check` do, with settings resolved (cli.py only renders)."""

from __future__ import annotations

import asyncio
from typing import Any

from agentlightning_cli import recipes
from agentlightning_cli.config import Settings, load_settings
from agentlightning_cli.harnesses import install as installs
from agentlightning_cli.harnesses.check import CheckReport, smoke_check


def _override(settings: Settings, name: str) -> tuple[str | None, str | None, float | None]:
    o = settings.harness.get(name)
    return (o.python, o.version, o.timeout_s) if o else (None, None, None)


def list_harnesses(settings: Settings | None = None) -> list[dict[str, Any]]:
    settings = settings or load_settings()
    rows = []
    for name, path in recipes.available().items():
        recipe = recipes.load_path(path)
        _, version, _ = _override(settings, name)
        found = installs.layout(recipe, settings.home, version)
        rows.append({
            "name": name, "description": recipe.description, "protocol": recipe.protocol,
            "kind": recipe.install.kind, "package": recipe.install.package, "version": found.version,
            "installed": installs.is_installed(recipe, settings.home, version), "install_dir": str(found.dir),
            "recipe": str(path), "max_turns": recipe.max_turns,
        })
    return rows


def install_harness(name: str, force: bool = False, settings: Settings | None = None) -> installs.Installed:
    settings = settings or load_settings()
    recipe = recipes.load(name)
    python, version, _ = _override(settings, recipe.name)
    return installs.install(recipe, settings.home, python=python, version=version, force=force)


def check_harness(name: str, settings: Settings | None = None) -> CheckReport:
    settings = settings or load_settings()
    recipe = recipes.load(name)
    _, version, timeout = _override(settings, recipe.name)
    installed = installs.require_installed(recipe, settings.home, version)
    return asyncio.run(smoke_check(recipe, installed, timeout_s=timeout or 300))
