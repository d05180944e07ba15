"""Constrained sampling is never trained as if free (issue 33, item 2): calls whose tool choice the client forced
(OpenAI `required`, Anthropic `any`) go through the recording proxy to the scripted upstream, are recorded with
their constraints, and `alight train` leaves them out, counted, while it trains the free calls of the same
episodes; `alight inspect show` says why each one trains nothing. A run that would force every call
(`proxy.sampling.tool_choice: required`) and train is refused before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentlightning_cli.scripted.fake_vllm import FakeScript
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.testing.proxy_env import post, start_env, stop_env
from tests import run_support as rs

CHAT_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]
ANTHROPIC_TOOLS = [{"name": "bash", "input_schema": {"type": "object", "properties": {}}}]


def alight(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)


async def _episode_calls(env, ep: str, key: str) -> None:
    """Two forced tool choices (OpenAI chat, Anthropic Messages), then one free call."""
    def user(text: str) -> list[dict]:
        return [{"role": "user", "content": text}]

    for path, body in (
        ("/v1/chat/completions", {"model": "m", "messages": user("list the files"), "tools": CHAT_TOOLS,
                                  "tool_choice": "required", "max_tokens": 8}),
        ("/v1/messages", {"model": "claude", "max_tokens": 8, "messages": user("show calc.py"),
                          "tools": ANTHROPIC_TOOLS, "tool_choice": {"type": "any"}}),
        ("/v1/chat/completions", {"model": "m", "messages": user("say done"), "max_tokens": 8}),
    ):
        status, text, _ = await post(env.url(ep, path), json.dumps(body), key)
        assert status == 200, text


async def test_forced_tool_calls_are_recorded_and_left_out_of_training_counted(tmp_path: Path) -> None:
    env = await start_env(tmp_path, FakeScript(turns=["ok"]))
    try:
        run = env.store.create_run("r", {})
        rnd = env.store.create_round(run.id, 0, "policy-r0", None)
        episodes = []
        for attempt in range(2):  # one group of two with different rewards: something to train
            ep = env.store.create_episode(run.id, rnd.id, "t", attempt, "h", f"key-{attempt}")
            env.proxy.register_episode(ep.id, f"key-{attempt}")
            await _episode_calls(env, ep.id, f"key-{attempt}")
            env.store.update_episode(ep.id, status="done", outcome="finished", reward=float(attempt))
            episodes.append(ep.id)
        calls = await env.calls(episodes[0], 3)
        assert [c.sampling["constraints"] for c in calls] == [["tool_choice"], ["tool_choice"], []]
        assert [c.sampling.get("tool_choice") for c in calls] == ["required", "required", None]
    finally:
        await stop_env(env)

    tiny = build_tiny_model(tmp_path / "tiny")
    trained = alight(tmp_path, "train", str(env.run_dir), "--round", "0", "--base-model", str(tiny), "--json")
    assert trained.returncode == 0, trained.stderr
    report = json.loads(trained.stdout)
    assert report["dropped"].get("constrained_calls") == 4 and report["calls"] == 2, report["dropped"]
    assert "left out 4 constrained calls: sampled under a constraint" in trained.stderr, trained.stderr
    shown = alight(tmp_path, "inspect", "show", episodes[0], "--run", str(env.run_dir))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("trains nothing: sampled under a constraint (tool_choice)") == 2, shown.stdout


def test_forcing_every_tool_call_in_a_run_that_trains_is_refused_naming_the_setting(tmp_path: Path) -> None:
    tasks = rs.calc_task_set(tmp_path, [{"id": "calc", "prompt": "Fix add() in calc.py."}])
    recipe = rs.script_recipe(tmp_path, "agent", ["./agent.py", "{{ prompt_file }}"])
    (tmp_path / "alight.yaml").write_text("proxy:\n  sampling:\n    tool_choice: required\n")
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--rounds", "2",
                      "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "runs" / "x")], cwd=tmp_path,
                     timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "proxy.sampling.tool_choice is `required` in a run that trains" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing started

