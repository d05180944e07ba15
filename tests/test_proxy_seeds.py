"""Seeded runs: every chat call of a seeded episode goes upstream with a vLLM `seed` derived from (run seed,
episode id, call index), recorded in the call's sampling; unseeded episodes are sent as the client asked."""

from __future__ import annotations

import hashlib
import json

import pytest

from agentlightning_cli.proxy.control import episode_seed
from agentlightning_cli.scripted.fake_vllm import FakeScript
from agentlightning_cli.testing.proxy_env import start_env, stop_env

HI = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def env(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=["a", "b", "c"]))
    yield env
    await stop_env(env)


async def _post(env, ep, key, body, path="/v1/chat/completions"):
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.post(env.url(ep, path), json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
            await resp.read()
            return resp.status


def _expected(run_seed: int, episode_id: str, index: int) -> int:
    # The documented derivation, written out independently of the proxy's code.
    digest = hashlib.blake2b(f"{run_seed}\0{episode_id}\0{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


async def _seeds_sent(env, ep, key, count, body=HI):
    sent = []
    for _ in range(count):
        assert await _post(env, ep, key, body) == 200
        sent.append(env.fake.requests[-1].get("seed"))
    return sent


async def test_seeded_episodes_get_distinct_per_call_seeds_recorded_as_sent(env):
    a, key_a = env.episode(seed=7)
    b, key_b = env.episode(seed=7)
    seeds_a = await _seeds_sent(env, a, key_a, 3)
    seeds_b = await _seeds_sent(env, b, key_b, 3)
    assert seeds_a == [_expected(7, a, i) for i in range(3)]
    assert seeds_b == [_expected(7, b, i) for i in range(3)]
    assert len(set(seeds_a) | set(seeds_b)) == 6  # two attempts never share a seed: the group does not collapse
    calls = await env.calls(a, 3)
    assert sorted(c.sampling["seed"] for c in calls) == sorted(seeds_a)
    for call in calls:
        assert json.loads(call.upstream_request)["seed"] == call.sampling["seed"]
        assert "seed" not in json.loads(call.client_request)  # the client's own request is kept as sent


async def test_same_episode_and_seed_reproduce_the_same_seeds_another_seed_does_not(env):
    ep, key = env.episode(seed=11)
    first = await _seeds_sent(env, ep, key, 2)
    env.proxy.register_episode(ep, key, seed=11)  # the episode run again: its call indices start over
    assert await _seeds_sent(env, ep, key, 2) == first
    env.proxy.register_episode(ep, key, seed=12)
    other = await _seeds_sent(env, ep, key, 2)
    assert other == [episode_seed(12, ep, i) for i in range(2)] and not set(other) & set(first)


async def test_run_seed_replaces_the_clients_seed_on_every_protocol(env):
    ep, key = env.episode(seed=3)
    assert await _post(env, ep, key, {**HI, "seed": 42, "stream": True}) == 200
    assert env.fake.requests[-1]["seed"] == _expected(3, ep, 0)
    assert await _post(env, ep, key, {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
                       "/v1/messages") == 200
    assert env.fake.requests[-1]["seed"] == _expected(3, ep, 1)
    assert await _post(env, ep, key, {"model": "gpt-x", "input": "hi"}, "/v1/responses") == 200
    assert env.fake.requests[-1]["seed"] == _expected(3, ep, 2)
    calls = await env.calls(ep, 3)
    assert sorted(c.sampling["seed"] for c in calls) == sorted(_expected(3, ep, i) for i in range(3))


async def test_unseeded_episode_sends_no_seed_and_keeps_the_clients(env):
    ep, key = env.episode()
    assert await _seeds_sent(env, ep, key, 2) == [None, None]
    assert "seed" not in (await env.calls(ep, 2))[0].sampling
    assert await _post(env, ep, key, {**HI, "seed": 42}) == 200
    assert env.fake.requests[-1]["seed"] == 42
