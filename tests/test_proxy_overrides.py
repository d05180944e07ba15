"""Configured tool_choice override: forced on requests that offer tools, for every protocol, and recorded."""

from __future__ import annotations

import json

import pytest
from agentlightning_cli.testing.proxy_env import start_env, stop_env

from agentlightning_cli.scripted.fake_vllm import FakeScript

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
async def env(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=["a", "b", "c"]), sampling={"tool_choice": "required"})
    yield env
    await stop_env(env)


async def _post(env, ep, key, path, body):
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.post(env.url(ep, path), json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
            return resp.status, await resp.read()


async def test_chat_request_with_tools_gets_the_forced_tool_choice(env):
    ep, key = env.episode()
    status, _ = await _post(env, ep, key, "/v1/chat/completions",
                            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS,
                             "tool_choice": "auto"})
    assert status == 200
    assert env.fake.requests[-1]["tool_choice"] == "required"
    [call] = await env.calls(ep, 1)
    assert call.sampling["tool_choice"] == "required"
    assert call.sampling["constraints"] == ["tool_choice"]  # alight's own override constrains too: never trained
    assert json.loads(call.client_request)["tool_choice"] == "auto"  # the client's own request is kept as sent


async def test_request_without_tools_is_left_alone(env):
    ep, key = env.episode()
    status, _ = await _post(env, ep, key, "/v1/chat/completions",
                            {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200
    assert "tool_choice" not in env.fake.requests[-1]
    [call] = await env.calls(ep, 1)
    assert "tool_choice" not in call.sampling


async def test_translated_protocols_get_the_override_too(env):
    ep, key = env.episode()
    status, _ = await _post(env, ep, key, "/v1/messages",
                            {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
                             "tools": [{"name": "Bash", "input_schema": {"type": "object", "properties": {}}}]})
    assert status == 200
    assert env.fake.requests[-1]["tool_choice"] == "required"
    status, _ = await _post(env, ep, key, "/v1/responses",
                            {"model": "gpt-5", "input": "hi",
                             "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]})
    assert status == 200
    assert env.fake.requests[-1]["tool_choice"] == "required"
