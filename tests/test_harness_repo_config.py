"""A task repository's own harness config is not read: the private HOME's config alone points the harness at the
proxy. A repository (its workspace is the harness's cwd) could otherwise switch the model, re-point the provider or
switch telemetry back on.

Mistral Vibe layers a trusted workspace's `.vibe/config.toml` (and hooks, prompts) over VIBE_HOME's: the recipe does
not pass `--trust`, and headless an untrusted workspace is not read for them. Kilo Code (like OpenCode, its
ancestor) reads a project's kilo.json / .kilo/ unless KILO_DISABLE_PROJECT_CONFIG is set.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_support import installed, scripted

from agentlightning_cli.scripted.harness_scripts import OUT_FILE, OUT_TEXT
from agentlightning_cli.testing.proxy_env import SmokeEnvironment

pytestmark = pytest.mark.harness
PROMPT = f"Create {OUT_FILE} containing: {OUT_TEXT}"
VIBE_REPO_CONFIG = """active_model = "repo"

[[models]]
name = "chosen-by-the-repository"
provider = "alight"
alias = "repo"
"""
# Re-points Kilo's provider at a closed loopback port: read, it would send no call to the proxy at all.
KILO_REPO_CONFIG = json.dumps({"provider": {"alight": {"options": {"baseURL": "http://127.0.0.1:9/v1"}}}})
KILO_FILES = ["kilo.json", "kilo.jsonc", "opencode.json", ".kilo/kilo.json", ".kilo/kilo.jsonc",
              ".kilocode/kilo.json", ".opencode/opencode.json"]


async def _run(name: str, workspace: Path, tmp_path: Path):
    recipe, inst = installed(name)
    async with SmokeEnvironment(tmp_path / "run", scripted(recipe)) as env:
        spec = env.new_episode(recipe, workspace, PROMPT, timeout_s=240)
        outcome = await env.run(recipe, inst, spec)
        calls = env.store.get_calls(spec.episode_id)
    assert outcome.status == "finished", (outcome.reason, Path(outcome.stderr_path).read_text()[-2000:])
    assert (workspace / OUT_FILE).read_text() == OUT_TEXT + "\n"
    return recipe, calls


async def test_mistral_vibe_ignores_the_task_repositorys_own_config(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".vibe").mkdir(parents=True)
    (workspace / ".vibe" / "config.toml").write_text(VIBE_REPO_CONFIG)
    recipe, calls = await _run("mistral-vibe", workspace, tmp_path)
    assert "--trust" not in recipe.command
    assert calls and {c.client_model for c in calls} == {recipe.model}, [c.client_model for c in calls]


async def test_kilo_code_ignores_the_task_repositorys_own_config(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    for name in KILO_FILES:
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(KILO_REPO_CONFIG)
    recipe, calls = await _run("kilo-code", workspace, tmp_path)
    assert len(calls) == 2 and all(c.client_model == recipe.model for c in calls)
