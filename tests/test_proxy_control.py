"""Round control (pause/resume/drain, atomic policy switch), budgets, and many concurrent episodes."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from agentlightning_cli.scripted import fake_tokens as tok
from agentlightning_cli.scripted.fake_vllm import FakeScript
from agentlightning_cli.testing.proxy_env import POLICY, post, start_env, stop_env

HELLO = [{"role": "user", "content": "hello"}]
GOOD = json.dumps({"model": "m", "messages": HELLO})


async def test_pause_holds_new_requests_until_resume_and_policy_switch_applies(tmp_path):
    env = await start_env(tmp_path, FakeScript(served_models=["base", "policy-r1"]))
    try:
        ep, key = env.episode()
        await env.proxy.pause()
        waiting = asyncio.create_task(post(env.url(ep), GOOD, key))
        await asyncio.sleep(0.3)
        assert not waiting.done() and env.fake.requests == []
        await env.proxy.drain()  # nothing is in flight: a waiting request does not block drain
        env.proxy.set_policy("policy-r1")
        env.proxy.resume()
        status, _, _ = await asyncio.wait_for(waiting, 10)
        assert status == 200 and env.fake.requests[-1]["model"] == "policy-r1"
        [call] = await env.calls(ep, 1)
        assert call.model == "policy-r1" and call.status == "ok"
    finally:
        await stop_env(env)


async def test_drain_waits_for_in_flight_requests(tmp_path):
    env = await start_env(tmp_path, FakeScript(delay_s=3.0))  # long enough to be seen in flight on a busy machine
    try:
        ep, key = env.episode()
        tasks = [asyncio.create_task(post(env.url(ep), GOOD, key)) for _ in range(3)]
        deadline = asyncio.get_running_loop().time() + 2.5
        while env.proxy.gate.in_flight < 3 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert env.proxy.gate.in_flight == 3
        await env.proxy.pause()
        await asyncio.wait_for(env.proxy.drain(), 10)
        assert env.proxy.gate.in_flight == 0 and len(env.fake.requests) == 3
        calls = await asyncio.to_thread(env.store.get_calls, ep)  # recorded by the time drain returns
        assert [c.status for c in calls] == ["ok"] * 3
        assert [r[0] for r in await asyncio.gather(*tasks)] == [200] * 3
        env.proxy.resume()
    finally:
        await stop_env(env)


async def test_call_budget_refuses_records_and_notifies(tmp_path):
    env = await start_env(tmp_path, budgets={"max_calls": 2})
    exceeded: list[tuple[str, str]] = []
    env.proxy.on_budget_exceeded = lambda ep, reason: exceeded.append((ep, reason))
    try:
        ep, key = env.episode()
        client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
        for _ in range(2):
            await client.chat.completions.create(model="m", messages=HELLO)
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(model="m", messages=HELLO)
        assert "budget exceeded" in err.value.message
        other, other_key = env.episode()  # budgets are per episode
        assert (await post(env.url(other), GOOD, other_key))[0] == 200
        calls = await env.calls(ep, 3)
        assert [c.status for c in calls] == ["ok", "ok", "budget_exceeded"]
        assert calls[2].http_status == 400 and len(env.fake.requests) == 3
        assert exceeded == [(ep, "call budget exhausted (2 of 2 calls used)")]
    finally:
        await stop_env(env)


async def test_completion_token_budget_clamps_each_call_then_refuses(tmp_path):
    """Each call's max_tokens is clamped to the budget still open, whatever the client asked (or left out): no
    reply runs past the budget; the call after the budget is spent is refused in the client's protocol."""
    env = await start_env(tmp_path, budgets={"max_completion_tokens": 30})
    try:
        ep, key = env.episode()
        assert (await post(env.url(ep), GOOD, key))[0] == 200  # no max_tokens sent: the budget's 30 is the bound
        status, out, _ = await post(env.url(ep, "/v1/messages"), json.dumps({"model": "c", "max_tokens": 500,
                                    "messages": HELLO}), None, {"x-api-key": key})
        assert status == 200, out
        first, second = env.fake.requests
        assert first["max_tokens"] == 30
        calls = await env.calls(ep, 2)
        used = len(calls[0].completion_token_ids)
        assert 0 < used < 30 and second["max_tokens"] == 30 - used  # what was left, not the client's 500
        assert calls[1].sampling["max_tokens"] == 30 - used  # recorded as sent
        assert len(calls[1].completion_token_ids) == 30 - used and json.loads(out)["stop_reason"] == "max_tokens"
        status, out, _ = await post(env.url(ep), GOOD, key)
        assert status == 400 and "completion-token budget exhausted (30 of 30 tokens used)" in out.decode()
        calls = await env.calls(ep, 3)
        assert [c.status for c in calls] == ["ok", "ok", "budget_exceeded"] and len(env.fake.requests) == 2
    finally:
        await stop_env(env)


def _echo(body: dict) -> str:
    return "echo: " + body["messages"][-1]["content"]


async def test_64_concurrent_streaming_episodes_all_recorded_none_mixed(tmp_path):
    env = await start_env(tmp_path, FakeScript(reply=_echo, stream_events=20, event_delay_s=0.002))
    try:
        episodes = [env.episode() for _ in range(64)]

        async def one(ep: str, key: str) -> str:
            client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
            text = ""
            for turn in range(2):
                stream = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"{ep} turn {turn} " + "x" * 60}], stream=True)
                async for chunk in stream:
                    if chunk.choices:
                        text += chunk.choices[0].delta.content or ""
            return text

        texts = await asyncio.wait_for(asyncio.gather(*(one(ep, key) for ep, key in episodes)), 120)
        for (ep, _), text in zip(episodes, texts):
            want = [f"echo: {ep} turn {t} " + "x" * 60 for t in range(2)]
            assert text == "".join(want)
            calls = await env.calls(ep, 2)
            assert [c.seq for c in calls] == [0, 1] and all(c.status == "ok" for c in calls)
            for call, reply in zip(calls, want):
                assert call.completion_token_ids == tok.text_ids(reply) + [tok.IM_END]
                assert ep in json.loads(call.client_request)["messages"][0]["content"]
                assert reply.encode() in b"".join(
                    json.loads(e[6:])["choices"][0]["delta"].get("content", "").encode()
                    for e in call.response.split(b"\n\n") if e.startswith(b"data: {") and b'"choices":[{' in e)
        assert env.proxy.gate.in_flight == 0 and env.fake.requests[0]["model"] == POLICY
    finally:
        await stop_env(env)


async def test_stop_during_a_stream_records_it_as_partial(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=["z" * 400], event_delay_s=0.02))
    try:
        ep, key = env.episode()
        client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
        stream = await client.chat.completions.create(model="m", messages=HELLO, stream=True)
        got, stopping = 0, None
        try:
            async for _ in stream:  # ends (without [DONE]) when the proxy's grace period runs out
                got += 1
                if got == 3:
                    stopping = asyncio.get_running_loop().create_task(env.proxy.stop(grace=0.2))
        except openai.APIError:
            pass
        await stopping
        [call] = await env.calls(ep, 1)
        assert call.status == "partial" and 0 < len(call.completion_token_ids) < 401
    finally:
        await stop_env(env)
