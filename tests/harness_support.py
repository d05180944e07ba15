"""Helpers shared by the real-harness tests: the shared install cache and leftover-process checks."""

from __future__ import annotations

import os
from pathlib import Path

from agentlightning_cli.harness import recipe as recipes
from agentlightning_cli.harness.install import Installed, install

HARNESSES = ["mini-swe-agent", "openhands", "claude-code", "codex", "opencode", "qwen-code", "aider", "gemini-cli",
             "kilo-code", "mistral-vibe"]


def scripted(recipe: recipes.Recipe):
    """The scripted model for one real harness: a shell tool call then its way of finishing, or, for a text-mode
    recipe (Aider), an answer in the text the harness parses (harness_scripts.text_then_finish)."""
    from agentlightning_cli.scripted.harness_scripts import text_then_finish, tool_then_finish

    return tool_then_finish(recipe.name) if recipe.tool_calls else text_then_finish()


def harness_home() -> Path:
    """One install cache for every test run (CI pre-installs into it): HARNESS_TEST_HOME or ~/.cache."""
    return Path(os.environ.get("HARNESS_TEST_HOME") or Path.home() / ".cache" / "alight-test-home")


def installed(name: str) -> tuple[recipes.Recipe, Installed]:
    """The recipe and its install; installs once (idempotent, file-locked) when the cache lacks it."""
    recipe = recipes.load(name)
    return recipe, install(recipe, harness_home(), log=lambda line: None)


def processes_matching(text: str) -> list[int]:
    """PIDs whose command line contains `text` (a marker unique to one test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def processes_with_env(text: str) -> list[int]:
    """PIDs whose environment mentions `text` (e.g. an episode id inside its HOME path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if text.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
