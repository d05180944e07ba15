"""External recipes (no `install`): a harness that is already there, here the shipped script agent, run through
the real proxy and store against the scripted upstream; plus duplicate YAML keys and literal secrets in `env`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.harness import recipe as recipes
from agentlightning_cli.harness.install import install, layout
from agentlightning_cli.testing import script_agent
from agentlightning_cli.scripted.harness_scripts import OUT_FILE, OUT_TEXT, tool_then_finish
from agentlightning_cli.testing.proxy_env import SmokeEnvironment

AGENT = Path(script_agent.__file__)
RECIPE = """\
name: my-agent
description: a script agent in the user's repo
protocol: openai-chat
command: [{program}, "--prompt-file", "{{{{ prompt_file }}}}", "--max-turns", "{{{{ max_turns }}}}"]
env:
  OPENAI_BASE_URL: "{{{{ base_url }}}}"
  OPENAI_API_KEY: "{{{{ api_key }}}}"
{extra_env}max_turns: 4
timeout_s: 60
outcome:
  format: jsonl
  errors: [{{match: {{event: error}}, reason: "{{{{ record.message }}}}"}}]
  turn_limit: {{event: turn_limit}}
  require: {{event: finished}}
"""
SECRET = "sk-proj-4fT9xQ2LmZ8vB1nR7kW3yC6hJ0pD5sGa"


def _write(folder: Path, program: str = "./agent.py", extra_env: str = "") -> Path:
    """The recipe and, beside it, an executable copy of the script agent."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(AGENT, folder / "agent.py")
    (folder / "agent.py").chmod(0o755)
    path = folder / "my-agent.yaml"
    path.write_text(RECIPE.format(program=json.dumps(program), extra_env=extra_env))
    return path


def alight(*args: str, home: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ALIGHT_HOME": str(home)}
    env.pop("ALIGHT_LOG_LEVEL", None)
    return subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


async def test_script_agent_without_install_runs_through_the_real_proxy(tmp_path: Path) -> None:
    recipe = recipes.load(str(_write(tmp_path / "repo")))
    assert recipe.external and recipe.install is None and recipe.check == []
    installed = install(recipe, tmp_path / "home", log=lambda line: None)  # nothing to install
    assert installed.external and installed.executable == (tmp_path / "repo" / "agent.py").resolve()
    async with SmokeEnvironment(tmp_path / "run", tool_then_finish("script-agent")) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", "Write out.txt.", timeout_s=60)
        outcome = await env.run(recipe, installed, spec)
        calls = env.store.get_calls(spec.episode_id)
    assert outcome.status == "finished", outcome
    assert (tmp_path / "ws" / OUT_FILE).read_text().strip() == OUT_TEXT
    assert len(calls) == 2 and all(c.prompt_token_ids and c.completion_token_ids for c in calls)
    assert outcome.calls == 2


@pytest.mark.parametrize("where", ["path", "absolute", "workspace"])
async def test_command_on_path_absolute_or_workspace_relative(tmp_path: Path, where: str, monkeypatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    if where == "path":
        # `python3` from PATH; the script beside the recipe ({{ recipe_dir }}). The default sandbox shows the
        # system folders, so PATH here is the system's (a pyenv shim would need `sandbox.read_only`).
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        path = _write(tmp_path / "repo", program="python3")
        path.write_text(path.read_text().replace('"python3",', '"python3", "{{ recipe_dir }}/agent.py",'))
    elif where == "absolute":
        path = _write(tmp_path / "repo", program=str(tmp_path / "repo" / "agent.py"))
    else:  # not beside the recipe: in the workspace (a script the task's repository ships)
        folder = tmp_path / "recipes"
        folder.mkdir()
        shutil.copy(AGENT, ws / "run-agent.py")
        (ws / "run-agent.py").chmod(0o755)
        path = folder / "my-agent.yaml"
        path.write_text(RECIPE.format(program='"./run-agent.py"', extra_env=""))
    recipe = recipes.load(str(path))
    installed = layout(recipe, tmp_path / "home")
    async with SmokeEnvironment(tmp_path / "run", tool_then_finish("script-agent")) as env:
        spec = env.new_episode(recipe, ws, "Write out.txt.", timeout_s=60)
        outcome = await env.run(recipe, installed, spec)
    assert outcome.status == "finished", outcome
    assert (ws / OUT_FILE).read_text().strip() == OUT_TEXT


def test_list_shows_external_and_install_has_nothing_to_do(tmp_path: Path) -> None:
    path = _write(tmp_path / "repo")
    out = alight("harness", "list", str(path), "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    row = {r["name"]: r for r in json.loads(out.stdout)}["my-agent"]
    assert row["kind"] == "external" and row["installed"] and row["install_dir"] is None
    assert row["command"] == str((tmp_path / "repo" / "agent.py").resolve())
    table = alight("harness", "list", str(path), home=tmp_path / "home")
    assert "external" in table.stdout
    out = alight("harness", "install", str(path), home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert "nothing to install: my-agent is external" in out.stderr
    assert not (tmp_path / "home" / "harnesses").exists()


def test_harness_check_runs_an_external_recipe(tmp_path: Path) -> None:
    out = alight("harness", "check", str(_write(tmp_path / "repo")), "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and report["calls"] == 2 and report["out_txt"].strip() == OUT_TEXT


def test_duplicate_key_in_a_recipe_names_the_key_and_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "repo")
    text = path.read_text().replace("timeout_s: 60\n", "timeout_s: 60\nmax_turns: 9\n")
    path.write_text(text)
    with pytest.raises(AlightError) as err:
        recipes.load(str(path))
    first = text.splitlines().index("max_turns: 4") + 1
    assert err.value.message == f"{path}: duplicate key 'max_turns' on lines {first} and {first + 2}"
    # Nested mappings too (two OPENAI_API_KEY entries under env).
    path.write_text(text.replace("max_turns: 9\n", "").replace(
        'OPENAI_API_KEY: "{{ api_key }}"\n', 'OPENAI_API_KEY: "{{ api_key }}"\n  OPENAI_API_KEY: "x"\n'))
    with pytest.raises(AlightError, match=r"duplicate key 'OPENAI_API_KEY' on lines 7 and 8"):
        recipes.load(str(path))


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    from agentlightning_cli.yaml_files import load_yaml

    assert load_yaml("base: &b {a: 1, b: 2}\nover:\n  <<: *b\n  a: 3\n", "x.yaml")["over"] == {"a": 3, "b": 2}


def test_literal_secret_in_env_warns_and_is_masked(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path / "repo", extra_env=f'  UPSTREAM_KEY: "{SECRET}"\n  MODE: "fast"\n')
    with caplog.at_level("WARNING", logger="alight"):
        recipe = recipes.load(str(path))
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "env.UPSTREAM_KEY" in warning and "looks like a secret" in warning and SECRET not in warning
    assert recipe.literal_secrets() == ["UPSTREAM_KEY"]
    dumped = json.dumps(recipe.model_dump(), ensure_ascii=False)
    assert SECRET not in dumped and "sk-p…(masked)" in dumped and '"MODE": "fast"' in dumped
    assert recipe.env["UPSTREAM_KEY"] == SECRET  # the harness itself still gets the value
    # What alight prints: the warning on stderr, the listing; neither holds the value.
    out = alight("harness", "list", str(path), "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert SECRET not in out.stdout + out.stderr
    assert "alight: warning:" in out.stderr and "UPSTREAM_KEY" in out.stderr
    row = {r["name"]: r for r in json.loads(out.stdout)}["my-agent"]
    assert row["env"]["UPSTREAM_KEY"] == "sk-p…(masked)" and row["env"]["OPENAI_API_KEY"] == "{{ api_key }}"


@pytest.mark.parametrize("value, secret", [
    (SECRET, True), ("ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4", True), ("AKIAIOSFODNN7EXAMPLE", True),
    ("9f8e7d6c5b4a39281706f5e4d3c2b1a0ffeeddcc", True),  # a long random hex token
    ("{{ api_key }}", False), ("fast", False), ("/usr/local/lib/python3.12/site-packages/openhands", False),
    ("http://127.0.0.1:8000/v1", False), ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", False),
])
def test_what_looks_like_a_secret(value: str, secret: bool) -> None:
    from agentlightning_cli.masking import looks_like_secret

    assert looks_like_secret(value) is secret
