"""Splice delta frames (store/deltas.py): exact round trips, chosen for appended conversations, dictionary
frames for rewritten history, and databases holding only dictionary frames (older writers) still read back."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from agentlightning_cli.store import CallRecord, Store, codec, deltas
from agentlightning_cli.store.episode_cache import EpisodeCache, EpisodeState
from agentlightning_cli.store.ids import _ALPHABET, _base32

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def record(episode_id: str, body: bytes) -> CallRecord:
    return CallRecord(episode_id=episode_id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                      status="ok", http_status=200, stream=False, client_request=body, upstream_request=body + b" ",
                      started_at=1.0, ended_at=2.0)


def blobs(db: Path) -> list[tuple[bytes, int | None]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT client_request, client_request_base_seq FROM calls ORDER BY seq").fetchall()


def conversation(rng: random.Random, turns: int) -> list[bytes]:
    """Chat requests that each resend the previous messages plus two new ones, before a constant tail."""
    words = [f"w{i}" for i in range(300)]
    messages, out = [{"role": "system", "content": " ".join(rng.choices(words, k=2000))}], []
    for _ in range(turns):
        messages += [{"role": "assistant", "content": " ".join(rng.choices(words, k=rng.choice([3, 300])))},
                     {"role": "tool", "content": " ".join(rng.choices(words, k=200))}]
        out.append(json.dumps({"model": "m", "messages": messages, "tools": [{"name": "bash"}] * 5}).encode())
    return out


def test_splice_round_trips_every_kind_of_edit_exactly():
    rng = random.Random(1)
    alphabet = b"ab{}"  # few symbols: long accidental matches, where prefix and suffix could overlap
    for _ in range(3000):
        base = bytes(rng.choices(alphabet, k=rng.choice([0, 1, 5, 50, 700])))
        cut, cut2 = sorted(rng.randrange(len(base) + 1) for _ in range(2))
        new = bytes(rng.choices(alphabet, k=rng.choice([0, 1, 3, 200])))
        data = rng.choice([base, base[:cut] + new + base[cut:], base[:cut] + new + base[cut2:], new, base * 2])
        frame = deltas.encode(data, base)
        assert deltas.decode(frame, base) == data
        prefix = deltas.common_prefix(data, base)
        suffix = deltas.common_suffix(data, base, min(len(data), len(base)) - prefix)
        assert data[:prefix] == base[:prefix] and prefix == next(
            (i for i, (x, y) in enumerate(zip(data, base)) if x != y), min(len(data), len(base)))
        assert prefix + suffix <= min(len(data), len(base))
        assert data[len(data) - suffix :] == base[len(base) - suffix :]
        if prefix + suffix < min(len(data), len(base)):  # the suffix is maximal where not capped by the prefix
            assert data[len(data) - suffix - 1] != base[len(base) - suffix - 1]


def test_appended_conversation_is_stored_as_small_splices(tmp_path: Path):
    bodies = conversation(random.Random(2), 30)
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        for body in bodies:
            store.add_call(record(ep.id, body))
        calls = store.get_calls(ep.id)
        assert [c.client_request for c in calls] == bodies
        assert [store.get_call(c.id).upstream_request for c in calls] == [b + b" " for b in bodies]
    rows = blobs(tmp_path / "alight.db")
    assert rows[0][0][:4] == ZSTD_MAGIC and rows[0][1] is None  # the keyframe
    assert all(blob[0] in (1, 2) and base == seq for seq, (blob, base) in enumerate(rows[1:]))
    # Only the new messages are stored: far less than the bytes each body adds, zstd'd alone.
    added = sum(len(codec.compress(b[len(a) - 40 :])) for a, b in zip(bodies, bodies[1:]))
    assert sum(len(blob) for blob, _ in rows[1:]) < 1.1 * added


def test_rewritten_history_falls_back_to_a_dictionary_frame(tmp_path: Path):
    bodies = conversation(random.Random(3), 6)
    # The harness dropped an old message (thousands of bytes gone from the middle) and kept the rest.
    messages = json.loads(bodies[-1])["messages"]
    bodies.append(json.dumps({"model": "m", "messages": messages[:2] + messages[4:], "tools": [{"name": "bash"}] * 5})
                  .encode())
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        for body in bodies:
            store.add_call(record(ep.id, body))
        assert [c.client_request for c in store.get_calls(ep.id)] == bodies
    last, base = blobs(tmp_path / "alight.db")[-1]
    assert last[:4] == ZSTD_MAGIC and base == len(bodies) - 2
    assert len(last) < 0.2 * len(codec.compress(bodies[-1]))  # still a delta: the moved text is referenced


def test_a_database_holding_dictionary_frames_reads_back_and_keeps_growing(tmp_path: Path):
    """Every delta written before splice frames existed is a zstd dictionary frame: rewrite each stored delta
    as one (as the earlier writer stored it), then read back and append with a fresh Store."""
    bodies = conversation(random.Random(4), 12)
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        for body in bodies[:8]:
            store.add_call(record(ep.id, body))
    with sqlite3.connect(tmp_path / "alight.db") as conn:
        for seq in range(1, 8):
            conn.execute("UPDATE calls SET client_request = ? WHERE seq = ?",
                         (codec.compress_delta(bodies[seq], bodies[seq - 1]), seq))
        conn.execute("DELETE FROM _alight_migrations WHERE name = 'm002_splice_bodies'")  # as it left the file
    assert all(blob[:4] == ZSTD_MAGIC for blob, _ in blobs(tmp_path / "alight.db"))
    with Store.open(tmp_path) as store:
        assert [c.client_request for c in store.get_calls(ep.id)] == bodies[:8]
        assert store.get_call(store.get_calls(ep.id)[5].id).client_request == bodies[5]
        for body in bodies[8:]:  # the new writer's base is decoded from the dictionary frames
            store.add_call(record(ep.id, body))
        assert [c.client_request for c in store.get_calls(ep.id)] == bodies
    assert blobs(tmp_path / "alight.db")[8][0][0] in (1, 2)
    with sqlite3.connect(tmp_path / "alight.db") as conn:  # marked, so an older alight refuses the file
        assert conn.execute("SELECT 1 FROM _alight_migrations WHERE name = 'm002_splice_bodies'").fetchone()


def test_corrupt_splice_frame_is_refused_not_misread():
    frame = deltas.encode(b"abc" * 100 + b"NEW" + b"xyz" * 100, b"abc" * 100 + b"xyz" * 100)
    with pytest.raises(ValueError):
        deltas.decode(frame, b"abc")


def test_ids_match_a_digit_by_digit_base32():
    def reference(value: int, width: int) -> str:
        digits = []
        for _ in range(width):
            value, digit = divmod(value, 32)
            digits.append(_ALPHABET[digit])
        return "".join(reversed(digits))

    rng = random.Random(5)
    for width in (1, 3, 10, 16):
        for value in [0, 32**width - 1, *(rng.randrange(32**width) for _ in range(500))]:
            assert _base32(value, width) == reference(value, width)


def test_episode_cache_byte_total_stays_exact(monkeypatch):
    from agentlightning_cli.store import episode_cache

    monkeypatch.setattr(episode_cache, "MAX_BYTES", 10_000)
    cache, rng = EpisodeCache(), random.Random(6)
    for i in range(300):
        ids = rng.randbytes(rng.choice([0, 100, 4000]))
        cache.put(f"ep{rng.randrange(20)}", EpisodeState(i, f"c{i}", [(i, ids)], {}))
        assert cache._total == sum(state.nbytes for state in cache._states.values())
        assert cache._total <= 10_000 or len(cache._states) == 1
