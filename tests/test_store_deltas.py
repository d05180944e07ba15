"""Prefix-delta token ids and delta-compressed bodies: stored small, read back bit-exact."""

from __future__ import annotations

import json
import os
import random
import sqlite3
from pathlib import Path

import pytest
import zstandard

from agentlightning_cli.store import CallRecord, KeyframePolicy, Store


def record(episode_id: str, prompt=None, completion=None, body: bytes = b"{}", **fields) -> CallRecord:
    return CallRecord(episode_id=episode_id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                      status="ok", http_status=200, stream=False, client_request=body, started_at=1.0, ended_at=2.0,
                      prompt_token_ids=prompt, completion_token_ids=completion, **fields)


def stored(tmp_path: Path, column: str) -> list:
    with sqlite3.connect(tmp_path / "alight.db") as conn:
        return [r[0] for r in conn.execute(f"SELECT {column} FROM calls ORDER BY episode_id, seq")]


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path) as s:
        yield s


def ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(2**32) for _ in range(n)]


def test_growing_conversation_stores_only_new_tokens(store: Store, tmp_path: Path):
    rng = random.Random(1)
    ep = store.create_episode(None, None, None, 0, None, "k")
    prompt, expected = ids(rng, 300), []
    for _ in range(12):
        completion = ids(rng, 40)
        expected.append((prompt, completion))
        store.add_call(record(ep.id, prompt, completion))
        prompt = prompt + completion + ids(rng, 60)
    assert [(c.prompt_token_ids, c.completion_token_ids) for c in store.get_calls(ep.id)] == expected
    assert stored(tmp_path, "prompt_base_seq") == [None, *range(11)]
    assert stored(tmp_path, "LENGTH(prompt_tail)") == [300 * 4] + [60 * 4] * 11
    unique = len(expected[-1][0]) + len(expected[-1][1])
    assert sum(stored(tmp_path, "LENGTH(prompt_tail) + LENGTH(completion_ids)")) == 4 * unique


def test_non_prefix_partial_prefix_retry_and_empty_cases(store: Store, tmp_path: Path):
    rng = random.Random(2)
    ep = store.create_episode(None, None, None, 0, None, "k")
    a, ca = ids(rng, 50), ids(rng, 10)
    cases = [
        (a, ca),                          # 0: first call
        (ids(rng, 30), []),               # 1: unrelated prompt, empty completion
        (a + ca + [5, 6], ids(rng, 4)),   # 2: extends call 0, not the previous call (a sub-agent interleaved)
        (a[:20] + [9, 9, 9], [1]),        # 3: the harness cut its history: only a partial prefix is shared
        (a, ca[:3]),                      # 4: a retry of call 0's prompt
        (a + ca + [7], None),             # 5: a branch: shares call 0/2's prefix, diverges from call 2
        ([], []),                         # 6: empty prompt
        (None, None),                     # 7: no ids (an error before upstream)
    ]
    for prompt, completion in cases:
        store.add_call(record(ep.id, prompt, completion))
    got = [(c.prompt_token_ids, c.completion_token_ids) for c in store.get_calls(ep.id)]
    assert got == cases
    assert [store.get_call(c.id).prompt_token_ids for c in store.get_calls(ep.id)] == [p for p, _ in cases]
    bases = stored(tmp_path, "prompt_base_seq")
    prefix = stored(tmp_path, "prompt_prefix_len")
    tails = stored(tmp_path, "LENGTH(prompt_tail)")
    assert (bases[1], tails[1]) == (None, 30 * 4)
    assert (bases[2], prefix[2], tails[2]) == (0, 60, 8)
    assert prefix[3] == 20 and tails[3] == 12 and bases[3] in (0, 2)
    assert prefix[4] == 50 and tails[4] == 0
    assert prefix[5] == 60 and tails[5] == 4
    assert tails[6] == 0 and bases[7] is None and stored(tmp_path, "prompt_len")[7] is None


def test_reference_chain_through_many_calls_reads_one_call_exactly(store: Store):
    rng = random.Random(3)
    ep = store.create_episode(None, None, None, 0, None, "k")
    prompt, last = ids(rng, 10), None
    for i in range(40):
        completion = ids(rng, i % 3)  # includes empty completions inside the chain
        last = store.add_call(record(ep.id, prompt, completion))
        prompt = prompt + completion + ids(rng, 5)
    assert store.get_call(last.id).prompt_token_ids == last.prompt_token_ids


def test_bodies_read_back_exact_bytes_and_grow_linearly(store: Store, tmp_path: Path):
    rng = random.Random(4)
    ep = store.create_episode(None, None, None, 0, None, "k")
    words = [f"w{i}" for i in range(500)]
    messages, bodies = [{"role": "system", "content": " ".join(rng.choices(words, k=3000))}], []
    for i in range(40):
        messages.append({"role": "user" if i % 2 else "assistant", "content": " ".join(rng.choices(words, k=400))})
        body = json.dumps({"model": "m", "messages": messages, "tools": [{"name": "bash"}] * 20}).encode()
        bodies.append(body)
        store.add_call(record(ep.id, body=body, upstream_request=body.replace(b'"m"', b'"policy-r0"'),
                              response=os.urandom(100), upstream_response=b""))
    calls = store.get_calls(ep.id)
    assert [c.client_request for c in calls] == bodies
    assert [c.upstream_request for c in calls] == [b.replace(b'"m"', b'"policy-r0"') for b in bodies]
    assert calls[-1].upstream_response == b"" and store.get_call(calls[17].id) == calls[17]
    stored_bytes = sum(stored(tmp_path, "LENGTH(client_request)"))
    assert stored_bytes < 1.5 * len(zstandard.ZstdCompressor(level=3).compress(bodies[-1]))
    assert stored(tmp_path, "client_request_base_seq") == [None, *range(39)]


def test_keyframes_bound_the_chain_and_read_back_exact(tmp_path: Path):
    with Store.open(tmp_path, keyframes=KeyframePolicy(max_chain=3, max_chain_bytes=10_000)) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        bodies = [b"x" * 100 * i + os.urandom(50) for i in range(1, 30)] + [b"", b"\x00" * 20_000, b"tail"]
        for body in bodies:
            store.add_call(record(ep.id, body=body))
        calls = store.get_calls(ep.id)
        assert [c.client_request for c in calls] == bodies
        assert [store.get_call(c.id).client_request for c in calls] == bodies
    chains = stored(tmp_path, "client_request_chain")
    chain_bytes = stored(tmp_path, "client_request_chain_bytes")
    assert max(chains) == 3 and max(chain_bytes) <= 20_000 and chains.count(1) >= 10
    assert all(base is None for base, n in zip(stored(tmp_path, "client_request_base_seq"), chains) if n == 1)


def test_cache_catches_up_when_another_store_wrote_in_between(tmp_path: Path):
    rng = random.Random(5)
    with Store.open(tmp_path) as first, Store.open(tmp_path) as second:
        ep = first.create_episode(None, None, None, 0, None, "k")
        prompt, body, expected = ids(rng, 100), b'{"messages":["start"', []
        for i in range(8):
            writer = first if i % 3 else second  # two caches, each repeatedly behind the other
            completion = ids(rng, 7)
            expected.append((prompt, completion, body + b"]}"))
            writer.add_call(record(ep.id, prompt, completion, body=body + b"]}"))
            prompt, body = prompt + completion + ids(rng, 9), body + b',"%d"' % i * 50
        for reader in (first, second):
            got = [(c.prompt_token_ids, c.completion_token_ids, c.client_request) for c in reader.get_calls(ep.id)]
            assert got == expected
    assert stored(tmp_path, "prompt_base_seq") == [None, *range(7)]
    assert stored(tmp_path, "client_request_base_seq") == [None, *range(7)]
    assert stored(tmp_path, "LENGTH(prompt_tail)")[1:] == [9 * 4] * 7


def test_common_prefix_matches_a_token_by_token_scan():
    from agentlightning_cli.store.codec import common_prefix_len, pack_ids

    rng = random.Random(6)
    for _ in range(300):
        a = ids(rng, rng.choice([0, 1, 5, 4095, 4096, 4097, 9000]))
        cut = rng.randrange(len(a) + 1)
        b = a[:cut] + ids(rng, rng.randrange(3)) + a[cut:][: rng.randrange(len(a) + 1)]
        expected = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert common_prefix_len(pack_ids(a), pack_ids(b)) == 4 * expected


def test_evicted_episodes_are_re_read_and_still_delta_encoded(store: Store, tmp_path: Path, monkeypatch):
    from agentlightning_cli.store import episode_cache

    monkeypatch.setattr(episode_cache, "MAX_EPISODES", 1)  # every write to the other episode evicts this one
    rng = random.Random(7)
    episodes = [store.create_episode(None, None, None, n, None, "k").id for n in range(2)]
    convo = {ep: (ids(rng, 50), b'{"m":["' + bytes(rng.randbytes(3000).hex(), "ascii")) for ep in episodes}
    expected = {ep: [] for ep in episodes}
    for _ in range(5):
        for ep in episodes:
            prompt, body = convo[ep]
            completion = ids(rng, 5)
            store.add_call(record(ep, prompt, completion, body=body + b'"]}'))
            expected[ep].append((prompt, completion, body + b'"]}'))
            convo[ep] = (prompt + completion + ids(rng, 3), body + b'","' + rng.randbytes(40).hex().encode())
    for ep in episodes:
        got = [(c.prompt_token_ids, c.completion_token_ids, c.client_request) for c in store.get_calls(ep)]
        assert got == expected[ep]
    assert stored(tmp_path, "prompt_base_seq") == [None, 0, 1, 2, 3] * 2
    assert stored(tmp_path, "client_request_base_seq") == [None, 0, 1, 2, 3] * 2
    assert max(stored(tmp_path, "LENGTH(client_request)")[1:5]) < 400
