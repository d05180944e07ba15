"""Helpers for the `alight run` end-to-end tests: small task sets on local repos, the CLI as a subprocess,
scripted models for mini-SWE-agent, and reading the run's store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from agentlightning_cli.scripted.harness_scripts import SHELL_TOOLS, shell_call
from tests.harness_support import harness_home, installed

ALIGHT = [sys.executable, "-m", "agentlightning_cli"]
CALC = "def add(a, b):\n    return a - b\n"
HIDDEN_TEST = ("import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
               "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")


CALL_MODEL_ONCE = '''#!/usr/bin/env python3
import json, os, sys, urllib.request
body = {"model": "policy", "messages": [{"role": "user", "content": open(sys.argv[1]).read()}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
urllib.request.urlopen(req, timeout=60).read()
'''
"""The start of a script agent: one call to the model through the proxy (its prompt file is argv[1])."""


def ensure_mini() -> None:
    installed("mini-swe-agent")


def calc_task_set(root: Path, lines: list[dict[str, Any]]) -> Path:
    """A task set under root with repos/calc (buggy add) and hidden/calc (the test the reward runs)."""
    (root / "repos" / "calc").mkdir(parents=True, exist_ok=True)
    (root / "repos" / "calc" / "calc.py").write_text(CALC)
    (root / "hidden" / "calc").mkdir(parents=True, exist_ok=True)
    (root / "hidden" / "calc" / "test_hidden_calc.py").write_text(HIDDEN_TEST)
    path = root / "tasks.jsonl"
    defaults = {"repo": "repos/calc", "hidden_files": "hidden/calc", "reward": "python3 -m unittest -q test_hidden_calc"}
    path.write_text("".join(json.dumps({**defaults, **line}) + "\n" for line in lines))
    return path


def env_for_cli(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The CLI sees the shared harness installs (ALIGHT_HOME) and nothing of the developer's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIGHT_")}
    env.update(extra or {})
    env["ALIGHT_HOME"] = str(harness_home())
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    return env


def alight(args: list[str], cwd: Path, timeout: float = 600, env: dict[str, str] | None = None,
           **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([*ALIGHT, *args], cwd=cwd, env=env_for_cli(env), capture_output=True, text=True,
                          timeout=timeout, **kw)


def start_alight(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([*ALIGHT, *args], cwd=cwd, env=env_for_cli(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def mini_script(first_command: Callable[[str], str | None]) -> Callable[[dict], dict]:
    """mini-SWE-agent: step 0 runs first_command(task text) (None: submit at once), then it submits."""

    def reply(body: dict) -> dict:
        messages = body.get("messages") or []
        text = json.dumps(messages)
        done = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
        command = first_command(text) if done == 0 else None
        if command is not None:
            return shell_call("mini-swe-agent", command)
        return dict(SHELL_TOOLS["mini-swe-agent"].finish)

    return reply


def read_store(run_dir: Path) -> tuple[Any, list[Any]]:
    from agentlightning_cli.store import Store

    store = Store.open(run_dir)
    return store, store.list_episodes()


SCRIPT_RECIPE = """\
name: {name}
description: {description}
protocol: openai-chat
command: {command}
env:
  OPENAI_BASE_URL: "{{{{ base_url }}}}"
  OPENAI_API_KEY: "{{{{ api_key }}}}"
timeout_s: 60
outcome:
  format: jsonl
  require: {{event: finished}}
{extra}"""


def script_recipe(folder: Path, name: str, command: list[str], description: str = "a script agent",
                  extra: str = "") -> Path:
    """An external recipe (no `install`) at folder/NAME.yaml running `command`, a script agent that reads the
    episode's URL and key from OPENAI_BASE_URL / OPENAI_API_KEY and reports {"event": "finished"} on stdout."""
    path = folder / f"{name}.yaml"
    path.write_text(SCRIPT_RECIPE.format(name=name, description=description, command=json.dumps(command),
                                         extra=extra))
    return path
