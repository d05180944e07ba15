"""Proxy routing, auth and the chat-completions passthrough, through real sockets with real SDK clients."""

from __future__ import annotations

import json

import aiohttp
import anthropic
import openai
import pytest

from agentlightning_cli.scripted import fake_tokens as tok
from agentlightning_cli.scripted.fake_vllm import FakeScript
from agentlightning_cli.testing.proxy_env import POLICY, post, start_env, stop_env

VLLM_ONLY = ("prompt_token_ids", "token_ids", "stop_reason", "prompt_logprobs", "prompt_text",
             "kv_transfer_params", "ec_transfer_params", "metrics", "routed_experts")
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
async def env(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=["Hi there!", "Second answer."]),
                          model_aliases={"small-model": "base"}, sampling={"temperature": 0.5, "max_tokens_cap": 64})
    yield env
    await stop_env(env)


def _keys_everywhere(obj) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _keys_everywhere(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _keys_everywhere(v)}
    return set()


async def test_chat_json_rewrites_request_strips_answer_and_records_tokens(env):
    ep, key = env.episode()
    client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(model="gpt-4o", messages=HELLO, max_tokens=500,
                                                                 temperature=1.0)
    seen = json.loads(raw.content)
    assert seen["choices"][0]["message"]["content"] == "Hi there!"
    assert seen["model"] == "gpt-4o"
    assert not _keys_everywhere(seen) & set(VLLM_ONLY)
    assert seen["choices"][0]["logprobs"] is None
    sent = env.fake.requests[-1]
    assert sent["model"] == POLICY and sent["logprobs"] is True and sent["return_token_ids"] is True
    assert sent["temperature"] == 0.5 and sent["max_tokens"] == 64
    [call] = await env.calls(ep, 1)
    assert call.status == "ok" and call.http_status == 200 and not call.stream
    assert call.client_model == "gpt-4o" and call.model == POLICY
    # every key the trainer models goes upstream explicitly (neutral where the client sent none), so a server's
    # generation_config.json fills nothing in, and the record is the whole setting vLLM sampled under
    neutral = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
               "repetition_penalty": 1.0}
    assert {k: sent[k] for k in neutral} == neutral
    assert call.sampling == {"temperature": 0.5, "max_tokens": 64, **neutral, "constraints": []}
    assert call.prompt_token_ids == tok.render_prompt(HELLO)
    assert call.completion_token_ids == tok.text_ids("Hi there!") + [tok.IM_END]
    assert call.completion_logprobs == [tok.logprob_of(t, i) for i, t in enumerate(call.completion_token_ids)]
    assert call.response == raw.content and call.finish_reason == "stop"
    assert json.loads(call.client_request)["model"] == "gpt-4o"
    assert json.loads(call.upstream_request)["return_token_ids"] is True
    assert "authorization" not in {k.lower() for k in call.client_headers}
    assert call.usage["completion_tokens"] == len(call.completion_token_ids)
    assert call.started_at <= call.ended_at


async def test_chat_keeps_what_the_client_asked_for(env):
    ep, key = env.episode()
    body = {"model": "small-model", "messages": HELLO, "logprobs": True, "top_logprobs": 2, "return_token_ids": True}
    status, out, _ = await post(env.url(ep), json.dumps(body), key)
    seen = json.loads(out)
    assert status == 200 and env.fake.requests[-1]["model"] == "base"  # alias
    assert env.fake.requests[-1]["top_logprobs"] == 2
    choice = seen["choices"][0]
    assert len(choice["logprobs"]["content"][0]["top_logprobs"]) == 2
    assert choice["token_ids"] == tok.text_ids("Hi there!") + [tok.IM_END]
    assert seen["prompt_token_ids"] == tok.render_prompt(HELLO)
    assert "stop_reason" not in choice and "kv_transfer_params" not in seen


@pytest.mark.parametrize("with_usage", [False, True])
async def test_chat_stream_passes_events_strips_and_records(env, with_usage):
    ep, key = env.episode()
    client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
    extra = {"stream_options": {"include_usage": True}} if with_usage else {}
    stream = await client.chat.completions.create(model="gpt-4o", messages=HELLO, stream=True, **extra)
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hi there!"
    assert (chunks[-1].usage is not None) == with_usage
    assert env.fake.requests[-1]["stream_options"] == {"include_usage": True}
    [call] = await env.calls(ep, 1)
    assert call.stream and call.status == "ok"
    assert call.completion_token_ids == tok.text_ids("Hi there!") + [tok.IM_END]
    assert len(call.completion_logprobs) == len(call.completion_token_ids)
    assert call.prompt_token_ids == tok.render_prompt(HELLO)
    assert call.usage["completion_tokens"] == len(call.completion_token_ids)
    assert call.response.endswith(b"data: [DONE]\n\n")
    for event in call.response.split(b"\n\n")[:-2]:
        data = json.loads(event[len(b"data: "):])
        assert not _keys_everywhere(data) & set(VLLM_ONLY)
        assert data["model"] == "gpt-4o"
    assert call.first_byte_at is not None and call.started_at <= call.first_byte_at <= call.ended_at


async def test_conversation_prompt_extends_previous_call(env):
    ep, key = env.episode()
    client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
    first = await client.chat.completions.create(model="m", messages=HELLO)
    messages = HELLO + [{"role": "assistant", "content": first.choices[0].message.content},
                        {"role": "user", "content": "more"}]
    await client.chat.completions.create(model="m", messages=messages)
    one, two = await env.calls(ep, 2)
    assert [one.seq, two.seq] == [0, 1]
    assert two.prompt_token_ids[: len(one.prompt_token_ids) + len(one.completion_token_ids)] == (
        one.prompt_token_ids + one.completion_token_ids)


async def test_wrong_or_missing_key_is_401_in_protocol_shape_and_writes_nothing(env):
    ep, key = env.episode()
    status, out, _ = await post(env.url(ep), json.dumps({"messages": HELLO}), "wrong")
    assert status == 401 and json.loads(out)["error"]["type"] == "authentication_error"
    status, out, _ = await post(env.url(ep), json.dumps({"messages": HELLO}), None)
    assert status == 401
    client = anthropic.AsyncAnthropic(base_url=env.proxy.episode_base_url(ep, "anthropic"), api_key="nope",
                                      max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        await client.messages.create(model="c", max_tokens=10, messages=HELLO)
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "authentication_error"
    status, _, _ = await post(env.url(ep), json.dumps({"messages": HELLO}), None, {"x-api-key": key})
    assert status == 200  # x-api-key works as well as Bearer
    calls = await env.calls(ep, 1)
    assert len(calls) == 1 and env.fake.requests.__len__() == 1


async def test_unknown_episode_404_unknown_path_404_recorded(env):
    status, out, _ = await post(env.url("ep-nope"), json.dumps({"messages": HELLO}), "k")
    assert status == 404 and "unknown episode" in json.loads(out)["error"]["message"]
    ep, key = env.episode()
    status, out, _ = await post(env.url(ep, "/v1/embeddings"), "{}", key)
    assert status == 404 and json.loads(out)["error"]["type"] == "not_found_error"
    [call] = await env.calls(ep, 1)
    assert call.status == "client_error" and call.http_status == 404 and call.path == "/v1/embeddings"
    status, out, _ = await post(env.proxy.base_url + "/v1/chat/completions", "{}", key)
    assert status == 404


async def test_preflights_and_model_list(env):
    ep, key = env.episode()
    async with aiohttp.ClientSession() as s:
        for path in ("/", "/api/hello", f"/e/{ep}", f"/e/{ep}/", f"/e/{ep}/api/hello"):
            async with s.head(env.proxy.base_url + path) as r:
                assert r.status == 200, path
    client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
    names = [m.id async for m in client.models.list()]
    assert names == ["small-model", POLICY]
    assert await env.calls(ep, 0, timeout=0) == []


async def test_ad_hoc_episodes_created_on_first_use(tmp_path):
    env = await start_env(tmp_path, ad_hoc=True)
    try:
        status, _, _ = await post(env.url("my-ep"), json.dumps({"messages": HELLO}), "secret-1")
        assert status == 200
        assert env.store.get_episode("my-ep") is not None
        status, _, _ = await post(env.url("my-ep"), json.dumps({"messages": HELLO}), "other-key")
        assert status == 401
        assert len(await env.calls("my-ep", 1)) == 1
    finally:
        await stop_env(env)
