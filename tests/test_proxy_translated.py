"""Anthropic Messages and OpenAI Responses through the proxy, with the real SDKs, against the fake vLLM."""

from __future__ import annotations

import json
import time

import anthropic
import openai
import pytest

from agentlightning_cli.scripted import fake_tokens as tok
from agentlightning_cli.scripted.fake_vllm import FakeScript
from agentlightning_cli.testing.proxy_env import POLICY, post, start_env, stop_env

HELLO = [{"role": "user", "content": "hello"}]
TOOL_TURN = {"content": "Let me look.", "tool_calls": [{"name": "ls", "arguments": {"path": "."}}]}
TOOLS = [{"name": "ls", "description": "list files",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


@pytest.fixture
async def env(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=[TOOL_TURN, "All done."]))
    yield env
    await stop_env(env)


def _anthropic(env, ep, key):
    return anthropic.AsyncAnthropic(base_url=env.proxy.episode_base_url(ep, "anthropic"), api_key=key, max_retries=0)


async def test_anthropic_json_tool_use_round_trip_recorded(env):
    ep, key = env.episode()
    client = _anthropic(env, ep, key)
    msg = await client.messages.create(model="claude-sonnet", max_tokens=200, messages=HELLO, tools=TOOLS,
                                       system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}])
    assert msg.stop_reason == "tool_use" and msg.model == "claude-sonnet"
    assert msg.content[0].text == "Let me look." and msg.content[1].input == {"path": "."}
    sent = env.fake.requests[-1]
    assert sent["model"] == POLICY and sent["return_token_ids"] is True and sent["tools"][0]["function"]["name"] == "ls"
    [call] = await env.calls(ep, 1)
    assert call.protocol == "anthropic-messages" and call.status == "ok" and call.client_model == "claude-sonnet"
    assert call.completion_token_ids[-1] == tok.IM_END and call.prompt_token_ids == tok.render_prompt(
        sent["messages"], sent.get("tools"))
    assert call.dropped  # cache_control is dropped and the drop recorded
    assert json.loads(call.response)["content"][1]["type"] == "tool_use"


async def test_anthropic_stream_is_incremental_and_recorded(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=["word " * 40], event_delay_s=0.01))
    try:
        ep, key = env.episode()
        client = _anthropic(env, ep, key)
        started, first_text = time.monotonic(), None
        async with client.messages.stream(model="claude", max_tokens=500, messages=HELLO) as stream:
            async for event in stream:
                if event.type == "content_block_delta" and first_text is None:
                    first_text = time.monotonic() - started
            final = await stream.get_final_message()
        total = time.monotonic() - started
        assert final.content[0].text == "word " * 40 and final.stop_reason == "end_turn"
        assert first_text < total / 3  # the first text arrived while vLLM was still generating
        [call] = await env.calls(ep, 1)
        assert call.stream and call.status == "ok"
        assert call.completion_token_ids == tok.text_ids("word " * 40) + [tok.IM_END]
        assert b"event: message_stop" in call.response and b"token_ids" not in call.response
    finally:
        await stop_env(env)


async def test_anthropic_count_tokens_uses_upstream_tokenizer(env):
    ep, key = env.episode()
    client = _anthropic(env, ep, key)
    count = await client.messages.count_tokens(model="claude", messages=HELLO)
    assert count.input_tokens == len(tok.render_prompt(HELLO))
    [call] = await env.calls(ep, 1)
    assert call.path == "/v1/messages/count_tokens" and call.status == "ok"


async def test_anthropic_beta_query_and_bad_request(env):
    ep, key = env.episode()
    body = json.dumps({"model": "c", "max_tokens": 10, "messages": HELLO})
    status, out, _ = await post(env.url(ep, "/v1/messages?beta=true"), body, None, {"x-api-key": key})
    assert status == 200 and json.loads(out)["type"] == "message"
    bad = json.dumps({"model": "c", "max_tokens": 10, "messages": [{"role": "robot", "content": "hi"}]})
    status, out, _ = await post(env.url(ep, "/v1/messages"), bad, None, {"x-api-key": key})
    assert status == 400 and json.loads(out)["error"]["type"] == "invalid_request_error"
    calls = await env.calls(ep, 2)
    assert calls[0].path == "/v1/messages?beta=true" and calls[1].status == "bad_request"


async def test_responses_json_and_stream(env):
    ep, key = env.episode()
    client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
    tools = [{"type": "function", "name": "ls", "parameters": {"type": "object", "properties": {}}},
             {"type": "web_search"}]
    resp = await client.responses.create(model="gpt-5", input="hello", instructions="be brief", tools=tools)
    calls_out = [item for item in resp.output if item.type == "function_call"]
    assert calls_out[0].name == "ls" and json.loads(calls_out[0].arguments) == {"path": "."}
    stream = await client.responses.create(model="gpt-5", input="hello", stream=True)
    events = [e.type async for e in stream]
    assert events[0] == "response.created" and events[-1] == "response.completed"
    one, two = await env.calls(ep, 2)
    assert one.protocol == two.protocol == "openai-responses"
    assert one.dropped and "web_search" in json.dumps(one.dropped)
    assert two.stream and two.status == "ok" and two.completion_token_ids[-1] == tok.IM_END
