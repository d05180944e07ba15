"""Stopping real harnesses: wall-clock timeout kills the whole group (and OpenHands' tmux), the proxy's
call budget stops an episode, concurrent episodes keep their records apart, no calls is a failure."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
import yaml
from harness_support import installed, processes_matching, processes_with_env

from agentlightning_cli.harness import recipe as recipes
from agentlightning_cli.config import Budgets, ProxySettings
from agentlightning_cli.testing.proxy_env import SmokeEnvironment
from agentlightning_cli.scripted.harness_scripts import detect, endless, shell_call

pytestmark = pytest.mark.harness


@pytest.mark.parametrize("name", ["mini-swe-agent", "openhands"])
async def test_timeout_kills_the_process_group_and_leaves_nothing(name: str, tmp_path: Path) -> None:
    marker = f"{317 + len(name)}.{int(time.time() * 1000) % 100000}"  # unique sleep argument per run
    command = f"touch started.flag; sleep {marker}"
    recipe, inst = installed(name)
    async with SmokeEnvironment(tmp_path / "run", endless(name, command)) as env:
        # A short timeout first: the test waits it out in full. Only when the harness had not yet reached its
        # tool command (a slow start on a loaded machine) does a second episode get the long one; the
        # assertions below hold for whichever episode ran the command.
        for attempt, timeout in enumerate((15, 75) if name == "openhands" else (12, 30)):
            spec = env.new_episode(recipe, tmp_path / f"ws{attempt}", "Wait.", timeout_s=timeout)
            outcome = await env.run(recipe, inst, spec)
            if (spec.workspace / "started.flag").exists():
                break
    assert (spec.workspace / "started.flag").exists(), "the tool command never ran; the test proves nothing"
    assert outcome.status == "timeout" and "killed" in outcome.reason
    assert processes_matching(f"sleep {marker}") == []
    # Every process a harness starts inherits its episode HOME; none may outlive the episode. For OpenHands
    # this includes the daemonised tmux server that runs its terminal tool, outside the process group.
    assert processes_with_env(spec.episode_id) == []


async def test_call_budget_stops_the_harness(tmp_path: Path) -> None:
    recipe, inst = installed("codex")  # no turn limit of its own: only the budget can stop it
    settings = ProxySettings(budgets=Budgets(max_calls=3))
    async with SmokeEnvironment(tmp_path / "run", endless("codex"), proxy_settings=settings) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", "Loop.", timeout_s=120)
        outcome = await env.run(recipe, inst, spec)
        calls = env.store.get_calls(spec.episode_id)
    assert outcome.status == "budget_exceeded" and "budget" in outcome.reason
    assert [c.status for c in calls][:3] == ["ok", "ok", "ok"]
    assert outcome.wall_s < 60


def _token_script(body: dict) -> dict:
    """Writes the episode's own token (found in its prompt) to out.txt, then finishes."""
    text = str(body.get("messages"))
    token = re.search(r"TOKEN-[0-9a-f]{8}", text).group(0)  # type: ignore[union-attr]
    harness = detect(body)
    if sum(1 for m in body["messages"] if m.get("role") == "tool") == 0:
        return shell_call(harness, f"printf {token} > out.txt")
    return {"content": "Done."}


async def test_concurrent_episodes_never_mix_records(tmp_path: Path) -> None:
    recipe, inst = installed("codex")
    tokens = ["TOKEN-0000aaaa", "TOKEN-1111bbbb", "TOKEN-2222cccc"]
    async with SmokeEnvironment(tmp_path / "run", _token_script) as env:
        specs = [env.new_episode(recipe, tmp_path / f"ws{i}", f"Write {t} to out.txt.", timeout_s=120)
                 for i, t in enumerate(tokens)]
        outcomes = await asyncio.gather(*(env.run(recipe, inst, s) for s in specs))
        for spec, token, outcome in zip(specs, tokens, outcomes):
            assert outcome.status == "finished", outcome
            assert (spec.workspace / "out.txt").read_text() == token
            calls = env.store.get_calls(spec.episode_id)
            assert len(calls) == 2 and [c.seq for c in calls] == [0, 1]
            for call in calls:
                body = call.client_request.decode()
                assert token in body and not any(t in body for t in tokens if t != token)


async def test_a_harness_that_makes_no_call_is_a_failure(tmp_path: Path) -> None:
    data = yaml.safe_load(Path(recipes.available()["codex"]).read_text())
    data["name"] = "codex-no-call"
    data["command"] = ["{{ executable }}", "--version"]
    path = tmp_path / "no-call.yaml"
    path.write_text(yaml.safe_dump(data))
    recipe = recipes.load(str(path))
    _, inst = installed("codex")
    async with SmokeEnvironment(tmp_path / "run", endless("codex")) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", "Nothing.", timeout_s=60)
        outcome = await env.run(recipe, inst, spec)
    assert outcome.status == "no_calls" and outcome.calls == 0
    assert "without a single LLM call" in outcome.reason and outcome.exit_code == 0


async def test_provider_environment_of_the_parent_never_reaches_the_harness(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.255.255.1:9/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://10.255.255.1:9")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-real-key")
    recipe, inst = installed("claude-code")
    from agentlightning_cli.scripted.harness_scripts import tool_then_finish

    async with SmokeEnvironment(tmp_path / "run", tool_then_finish("claude-code", "env > env.txt")) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", "Dump the environment.", timeout_s=120)
        outcome = await env.run(recipe, inst, spec)
    assert outcome.status == "finished", outcome
    dumped = (spec.workspace / "env.txt").read_text()
    assert "10.255.255.1" not in dumped and "sk-real-key" not in dumped
    assert f"HOME={tmp_path / 'run' / 'harness' / spec.episode_id / 'home'}" in dumped
