"""Sandboxed episodes through the harness runner: a recipe whose command is the script agent
(agentlightning_cli/testing/sandbox_agent.py), the real proxy and store, the scripted upstream."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest
import yaml

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.harness import recipe as recipes
from agentlightning_cli.harness.install import Installed, layout
from agentlightning_cli.sandbox.bwrap import forwarder_python
from agentlightning_cli.testing import sandbox_agent
from agentlightning_cli.testing.loopback import LoopbackServer
from agentlightning_cli.testing.proxy_env import SmokeEnvironment

AGENT = Path(sandbox_agent.__file__)
PYTHON, _ = forwarder_python()


def agent_recipe(tmp_path: Path, **probe) -> tuple[recipes.Recipe, object]:
    """A recipe (external: nothing to install) running the script agent with `probe` as its instructions."""
    # base_url and api_key are the episode's: spliced in by jinja at launch.
    cfg = json.dumps(probe)[:-1] + (", " if probe else "") + \
        '"base_url": {{ base_url | tojson }}, "api_key": {{ api_key | tojson }}}'
    data = {
        "name": "script-agent", "description": "sandbox test agent", "protocol": "openai-chat",
        "command": [PYTHON, "-I", str(AGENT), cfg],
        # The agent lives in alight's package folder, which an episode does not see unless a recipe says so.
        "sandbox": {"read_only": [str(AGENT.parent)]},
        "stop": {"signal": "SIGTERM", "grace_s": 1},
    }
    folder = tmp_path / "recipe"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "script-agent.yaml"
    path.write_text(yaml.safe_dump(data))
    recipe = recipes.load(str(path))
    return recipe, layout(recipe, tmp_path / "home")


def report(spec) -> dict:
    return json.loads((spec.workspace / "report.json").read_text())


async def test_episode_reaches_the_proxy_and_its_workspace_only(tmp_path: Path) -> None:
    server = LoopbackServer()
    home_secret = Path.home() / f".alight-episode-probe-{os.getpid()}"
    home_secret.write_text("user secret")
    hidden = tmp_path / "taskset" / "hidden" / "tests" / "test_hidden.py"
    hidden.parent.mkdir(parents=True)
    hidden.write_text("HIDDEN")
    try:
        async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hello."}) as env:
            other = env.new_episode(agent_recipe(tmp_path)[0], tmp_path / "other-ws")
            (other.workspace / "work.txt").write_text("other episode")
            store_db = next((tmp_path / "run").glob("*.db"))
            probe = {
                "read": [str(hidden), str(store_db), str(other.workspace / "work.txt"), str(home_secret)],
                "write": [str(tmp_path / "run" / "planted.txt"), str(Path.home() / "planted.txt"), "/usr/planted"],
                "connect": [["127.0.0.1", server.port]], "resolve": ["example.com"],
            }
            recipe, inst = agent_recipe(tmp_path, **probe)
            spec = env.new_episode(recipe, tmp_path / "ws", timeout_s=60)
            outcome = await env.run(recipe, inst, spec)
            calls = env.store.get_calls(spec.episode_id)
        assert outcome.status == "finished", (outcome, Path(outcome.stderr_path).read_text()[-2000:])
        # alight's proxy took the sandbox's loopback listener: nothing relays the calls
        assert outcome.detail["sandbox"]["mode"] == "bwrap"
        assert outcome.detail["sandbox"]["proxy"] == "listener handed over"
        seen = report(spec)
        assert seen["model"]["ok"] and seen["model"]["value"] == [200, "Hello."]
        assert len(calls) == 1 and calls[0].status == "ok"
        assert (spec.workspace / "out.txt").exists()
        assert seen["home"] == str(tmp_path / "run" / "harness" / spec.episode_id / "home")
        for path in probe["read"]:
            assert "FileNotFoundError" in seen["read"][path]["error"], path
        assert not (tmp_path / "run" / "planted.txt").exists() and not (Path.home() / "planted.txt").exists()
        assert not seen["write"]["/usr/planted"]["ok"]
        assert not seen["connect"][f"127.0.0.1:{server.port}"]["ok"] and server.seen == []
        assert not seen["resolve"]["example.com"]["ok"]
    finally:
        home_secret.unlink()
        server.sock.close()


async def test_none_runs_on_the_host_and_is_explicit(tmp_path: Path) -> None:
    secret = tmp_path / "taskset" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("visible without a sandbox")
    recipe, inst = agent_recipe(tmp_path, read=[str(secret)])
    async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hi."}) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", timeout_s=60, sandbox="none")
        outcome = await env.run(recipe, inst, spec)
    assert outcome.status == "finished" and outcome.detail["sandbox"] == "none"
    assert report(spec)["read"][str(secret)] == {"ok": True, "value": "visible without a sandbox"}


async def test_fork_bomb_and_memory_hog_end_as_resource_limit_while_another_episode_goes_on(tmp_path: Path) -> None:
    limits = EpisodeLimits(processes=40, memory_mb=300)
    async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hi."}) as env:
        bomb, inst = agent_recipe(tmp_path / "b", mode="fork_bomb")
        hog, _ = agent_recipe(tmp_path / "h", mode="memory_hog")
        calm, _ = agent_recipe(tmp_path / "c")
        calm.command = ["bash", "-c", "sleep 2; exec \"$0\" \"$@\"", *calm.command]  # outlives the other two
        specs = [env.new_episode(r, tmp_path / f"ws-{i}", timeout_s=90, limits=limits)
                 for i, r in enumerate((bomb, hog, calm))]
        outcomes = await asyncio.gather(*(env.run(r, inst, s) for r, s in zip((bomb, hog, calm), specs)))
    assert outcomes[0].status == "resource_limit" and outcomes[0].reason.startswith("processes"), outcomes[0]
    assert outcomes[1].status == "resource_limit" and outcomes[1].reason.startswith("memory"), outcomes[1]
    assert outcomes[2].status == "finished", outcomes[2]


async def test_after_a_timeout_no_process_of_the_episode_exists(tmp_path: Path) -> None:
    recipe, inst = agent_recipe(tmp_path, mode="sleep_with_daemon")
    async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hi."}) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", timeout_s=4)
        outcome = await env.run(recipe, inst, spec)
    assert outcome.status == "timeout"
    assert report(spec)["pid"]  # it ran, then slept (with a daemon in its own session)
    await asyncio.sleep(0.2)
    left = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and spec.episode_id.encode() in (entry / "environ").read_bytes():
                left.append(entry.name)
        except OSError:
            continue
    assert left == []


async def test_without_bubblewrap_an_episode_fails_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe, inst = agent_recipe(tmp_path)
    async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hi."}) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", timeout_s=30)
        monkeypatch.setenv("PATH", "/nonexistent")  # a machine without bwrap
        with pytest.raises(AlightError) as err:
            await env.run(recipe, inst, spec)
    assert "bubblewrap" in err.value.message and "apt-get install bubblewrap" in err.value.hint


async def test_a_file_size_hit_in_a_tool_ends_the_episode_at_once_while_another_goes_on(tmp_path: Path) -> None:
    limits = EpisodeLimits(file_size_mb=4)
    async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hi."}) as env:
        writer, inst = agent_recipe(tmp_path / "w", mode="big_file_tool", bytes=8 * 1024 * 1024)
        calm, _ = agent_recipe(tmp_path / "c")
        calm.command = ["bash", "-c", "sleep 2; exec \"$0\" \"$@\"", *calm.command]
        specs = [env.new_episode(r, tmp_path / f"ws-{i}", timeout_s=90, limits=limits)
                 for i, r in enumerate((writer, calm))]
        outcomes = await asyncio.gather(*(env.run(r, inst, s) for r, s in zip((writer, calm), specs)))
    assert outcomes[0].status == "resource_limit" and outcomes[0].reason.startswith("file_size"), outcomes[0]
    assert "SIGXFSZ" in outcomes[0].reason and outcomes[0].wall_s < 15, outcomes[0]
    assert outcomes[1].status == "finished", outcomes[1]


async def test_a_file_size_hit_ends_the_episode_at_once_while_alight_itself_is_busy(tmp_path: Path) -> None:
    # Threads holding the GIL delay the exit-notice thread past the life of the writer's parent shell (it reaps
    # the writer and exits at once): the hit must still reach the episode, through the shell's own exit notice.
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinners = [threading.Thread(target=spin, daemon=True) for _ in range(2)]
    for thread in spinners:
        thread.start()
    try:
        async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hi."}) as env:
            writer, inst = agent_recipe(tmp_path / "w", mode="big_file_tool", bytes=8 * 1024 * 1024)
            spec = env.new_episode(writer, tmp_path / "ws", timeout_s=60, limits=EpisodeLimits(file_size_mb=4))
            outcome = await env.run(writer, inst, spec)
    finally:
        stop.set()
    assert outcome.status == "resource_limit" and "SIGXFSZ" in outcome.reason, outcome
    assert outcome.wall_s < 30, outcome


async def test_a_stopped_or_cancelled_harness_gets_its_grace_to_flush_inside_the_sandbox(tmp_path: Path) -> None:
    recipe, inst = agent_recipe(tmp_path, mode="flush_on_term")  # stop: SIGTERM, grace_s 1
    async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hi."}) as env:
        stopped = env.new_episode(recipe, tmp_path / "ws-stop", timeout_s=60)
        cancelled = env.new_episode(recipe, tmp_path / "ws-cancel", timeout_s=60)
        timed_out = env.new_episode(recipe, tmp_path / "ws-timeout", timeout_s=8)  # room to start on a busy machine
        runs = [asyncio.ensure_future(env.run(recipe, inst, s)) for s in (stopped, cancelled, timed_out)]
        for spec in (stopped, cancelled):
            await _until(lambda spec=spec: (spec.workspace / "waiting").exists())
        env.stopper(stopped.episode_id, "call budget spent")
        runs[1].cancel()
        outcome = await runs[0]
        with pytest.raises(asyncio.CancelledError):
            await runs[1]
        late = await runs[2]
    assert outcome.status == "budget_exceeded", outcome
    assert late.status == "timeout", late
    for spec in (stopped, cancelled, timed_out):  # written half a second after SIGTERM: the sandbox waited
        assert json.loads((spec.workspace / "flushed.json").read_text()) == {"signal": 15}, spec.workspace


async def _until(check, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


async def test_a_program_missing_inside_the_sandbox_is_named(tmp_path: Path) -> None:
    # An installed harness sees its install folder only: a program elsewhere on the host is not visible inside.
    tool = tmp_path / "elsewhere" / "my-harness"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    recipe, _ = agent_recipe(tmp_path)
    recipe.command = [str(tool)]
    install = tmp_path / "install"
    (install / "bin").mkdir(parents=True)
    inst = Installed(install, install / "bin", install / "bin" / "my-harness", "1.0")
    async with SmokeEnvironment(tmp_path / "run", lambda body: {"content": "Hi."}) as env:
        outcome = await env.run(recipe, inst, env.new_episode(recipe, tmp_path / "ws", timeout_s=30))
    assert outcome.status == "harness_error", outcome
    assert str(tool) in outcome.reason and "No such file" in outcome.reason and "sandbox.read_only" in outcome.reason
