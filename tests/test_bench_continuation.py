"""bench/continuation.py's pure part: `--mini-prompts own` runs the shipped mini-SWE-agent-text recipe with mini's own
system and instance templates (its config file without the recipe's two), every other setting as shipped. The
benchmark itself (real vLLM, real harnesses, minutes) is a benchmark, not a test."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from agentlightning_cli.harness import recipe as recipes

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_continuation", ROOT / "bench" / "continuation.py")
continuation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(continuation)

CONTEXT = {"model": "policy-r0", "base_url": "http://127.0.0.1:1/v1", "api_key": "ek-x", "max_turns": 8,
           "prompt": "Create a file named greeting.txt"}


def rendered(recipe: recipes.Recipe, text: str) -> dict:
    return yaml.safe_load(recipe.render(text, CONTEXT))


def test_mini_own_prompts_drops_exactly_the_two_templates():
    recipe = recipes.load("mini-swe-agent-text")
    shipped = rendered(recipe, recipe.files["alight-mini.yaml"])
    own = rendered(recipe, continuation.mini_own_prompts(recipe.files["alight-mini.yaml"]))
    assert {"system_template", "instance_template"} <= shipped["agent"].keys()
    expected = {**shipped, "agent": {k: v for k, v in shipped["agent"].items()
                                     if k not in ("system_template", "instance_template")}}
    assert own == expected  # the model settings, action regex, observation template, limits and task as shipped
    # mini's own templates, which then apply, are the text-based config's (its first -c file): a long instruction
    assert recipe.command[1:3] == ["-c", "mini_textbased.yaml"]


def test_mini_own_prompts_refuses_a_config_without_the_templates():
    with pytest.raises(RuntimeError, match="no system / instance template"):
        continuation.mini_own_prompts("model:\n  model_name: x\nagent:\n  step_limit: 3\n")
