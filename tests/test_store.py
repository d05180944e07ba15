"""Store basics: migrations, runs/rounds/episodes, episode keys, and a round-trip of every call field."""

from __future__ import annotations

import dataclasses
import math
import sqlite3
import struct
import threading
import time
from pathlib import Path

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.store import Call, CallRecord, Store
from agentlightning_cli.store.connection import BUSY_TIMEOUT_MS
from agentlightning_cli.store.migrations import MIGRATIONS, apply_migrations


def record(episode_id: str, **fields) -> CallRecord:
    base = dict(episode_id=episode_id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                status="ok", http_status=200, stream=False, client_request=b"{}", started_at=1.0, ended_at=2.0)
    return CallRecord(**{**base, **fields})


def test_open_creates_wal_database_with_every_migration(tmp_path: Path):
    with Store.open(tmp_path / "runs" / "r1") as store:
        assert store.path == tmp_path / "runs" / "r1" / "alight.db"
    conn = sqlite3.connect(tmp_path / "runs" / "r1" / "alight.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = [r[0] for r in conn.execute("SELECT name FROM _alight_migrations ORDER BY name")]
    assert names == [name for name, _, _ in MIGRATIONS]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"runs", "rounds", "episodes", "calls", "_alight_migrations"} <= tables


def test_reopen_applies_nothing_and_keeps_data(tmp_path: Path):
    with Store.open(tmp_path) as store:
        run = store.create_run("r", {"k": [1, 2]})
    conn = sqlite3.connect(tmp_path / "alight.db", isolation_level=None)
    applied_at = conn.execute("SELECT applied_at FROM _alight_migrations").fetchall()
    assert apply_migrations(conn) == []
    with Store.open(tmp_path) as store:
        assert store.get_run("r") == run
    assert conn.execute("SELECT applied_at FROM _alight_migrations").fetchall() == applied_at


def test_database_from_a_newer_alight_is_refused(tmp_path: Path):
    Store.open(tmp_path).close()
    with sqlite3.connect(tmp_path / "alight.db") as conn:
        conn.execute("INSERT INTO _alight_migrations VALUES ('m999_future', 0)")
    with pytest.raises(AlightError, match="m999_future"):
        Store.open(tmp_path)


def test_runs_rounds_and_episodes_round_trip(tmp_path: Path):
    with Store.open(tmp_path) as store:
        run = store.create_run("exp", {"lr": 1e-5, "nested": {"a": None}})
        assert store.get_run(run.id) == store.get_run("exp") == run
        assert store.get_run("missing") is None
        with pytest.raises(AlightError, match="already exists"):
            store.create_run("exp", {})
        store.finish_run(run.id, "done")
        assert store.list_runs()[0].status == "done"
        r0 = store.create_round(run.id, 0, "policy-r0", None)
        r1 = store.create_round(run.id, 1, "policy-r1", "/a/round-1")
        store.finish_round(r0.id, "done")
        done = store.get_round(r0.id)
        assert done.status == "done" and done.ended_at >= done.started_at
        assert [r.index for r in store.list_rounds(run.id)] == [0, 1] and store.get_round(r1.id) == r1
        e1 = store.create_episode(run.id, r0.id, "t1", 0, "mini-swe-agent", "k1", workspace="/w/1")
        e2 = store.create_episode(run.id, r1.id, "t1", 1, "codex", "k2", episode_id="ep-given")
        loose = store.create_episode(None, None, None, 0, None, "k3")
        assert e2.id == "ep-given" and e1.id.startswith("ep-") and e1.status == "pending"
        assert store.get_episode(e1.id) == e1
        assert [e.id for e in store.list_episodes(run_id=run.id)] == sorted([e1.id, e2.id])
        assert [e.id for e in store.list_episodes(round_id=r1.id)] == [e2.id]
        assert len(store.list_episodes()) == 3 and store.get_episode(loose.id).run_id is None
        store.update_episode(e1.id, status="done", reward=0.5, reward_detail={"passed": 3, "failed": [1]},
                             started_at=10.0, ended_at=20.5, exit_code=-9, error="killed", outcome="timeout",
                             workspace="/w/elsewhere")
        got = store.get_episode(e1.id)
        assert (got.status, got.reward, got.reward_detail, got.started_at, got.ended_at) == (
            "done", 0.5, {"passed": 3, "failed": [1]}, 10.0, 20.5)
        assert (got.exit_code, got.error, got.outcome, got.workspace) == (-9, "killed", "timeout", "/w/elsewhere")
        with pytest.raises(TypeError, match="key_sha256"):
            store.update_episode(e1.id, key_sha256=b"")
        with pytest.raises(LookupError):
            store.update_episode("ep-nope", status="done")


def test_episode_ids_sort_by_creation(tmp_path: Path):
    with Store.open(tmp_path) as store:
        ids = []
        for _ in range(50):  # many within one millisecond: the order holds there too
            ids.append(store.create_episode(None, None, None, 0, None, "k").id)
    assert ids == sorted(ids) and len(set(ids)) == 50


def test_episode_key_is_checked_and_only_its_hash_is_stored(tmp_path: Path):
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "sk-very-secret-episode-key")
        assert store.check_episode_key(ep.id, "sk-very-secret-episode-key")
        assert not store.check_episode_key(ep.id, "sk-very-secret-episode-keY")
        assert not store.check_episode_key(ep.id, "")
        assert not store.check_episode_key("ep-unknown", "sk-very-secret-episode-key")
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("alight.db*"))
    assert b"sk-very-secret-episode-key" not in raw


def test_every_call_field_round_trips(tmp_path: Path):
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        rec = CallRecord(
            episode_id=ep.id, protocol="anthropic-messages", method="POST", path="/v1/messages?beta=true",
            status="partial", http_status=206, stream=True, client_request=b'{"messages":[]}\xff\x00',
            client_headers={"user-agent": "claude-cli/2", "x-Custom": "\u00e9"},
            upstream_request=b'{"model":"policy-r0"}', response=b"event: message_start\ndata: {}\n\n",
            upstream_response=b'{"id":"x"}', prompt_token_ids=[0, 1, 2**32 - 1, 151643],
            completion_token_ids=[7, 8, 9],
            completion_logprobs=[-0.0, -1e-300, float("-inf")], finish_reason="length",
            usage={"prompt_tokens": 4, "completion_tokens": 3}, client_model="claude-sonnet", model="policy-r0",
            sampling={"temperature": 1.0, "top_p": 0.95, "max_tokens": 64}, dropped={"thinking": {"budget": 5}},
            started_at=1700000000.123456, first_byte_at=1700000000.5, ended_at=1700000001.75, error="upstream reset",
        )
        written = store.add_call(rec)
        assert written == Call(**dataclasses.asdict(rec), id=written.id, seq=0)
        (read,) = store.get_calls(ep.id)
        assert read == written == store.get_call(written.id)
        bits = [struct.pack("<d", x) for x in read.completion_logprobs]
        assert bits == [struct.pack("<d", x) for x in rec.completion_logprobs]
        minimal = store.add_call(record(ep.id))
        assert store.get_call(minimal.id) == minimal and minimal.seq == 1
        assert minimal.prompt_token_ids is None and minimal.response is None and minimal.client_headers == {}
        assert store.get_call("call-missing") is None and store.get_calls("ep-none") == []


def test_token_ids_outside_uint32_are_rejected(tmp_path: Path):
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        for bad in ([-1], [2**32]):
            with pytest.raises(ValueError):
                store.add_call(record(ep.id, prompt_token_ids=bad))
        assert store.get_calls(ep.id) == []


def test_calls_for_an_unknown_episode_fail_closed(tmp_path: Path):
    with Store.open(tmp_path) as store, pytest.raises(LookupError, match="ep-ghost"):
        store.add_call(record("ep-ghost"))


def test_write_waits_for_another_connections_lock(tmp_path: Path):
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        other = sqlite3.connect(tmp_path / "alight.db", isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        committed = threading.Event()

        def commit() -> None:
            other.execute("COMMIT")
            committed.set()

        threading.Timer(0.5, commit).start()
        call = store.add_call(record(ep.id))
        assert committed.is_set() and call.seq == 0  # written only once the other connection let go


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path):
    (tmp_path / "alight.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(AlightError, match="cannot open the store"):
        Store.open(tmp_path)


def test_a_forked_child_uses_its_own_connection(tmp_path: Path):
    import os

    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        store.add_call(record(ep.id))
        pid = os.fork()
        if pid == 0:  # child: write through the inherited Store object, then exit without cleanup
            try:
                store.add_call(record(ep.id, client_request=b"from child"))
                os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert [c.client_request for c in store.get_calls(ep.id)] == [b"{}", b"from child"]
        assert store.add_call(record(ep.id)).seq == 2


def test_episode_ids_are_unique_and_must_name_a_real_run(tmp_path: Path):
    from agentlightning_cli.store import EpisodeExistsError

    with Store.open(tmp_path) as store:
        store.create_episode(None, None, None, 0, None, "k", episode_id="ep-1")
        with pytest.raises(EpisodeExistsError, match="ep-1"):
            store.create_episode(None, None, None, 0, None, "other", episode_id="ep-1")
        assert store.check_episode_key("ep-1", "k")  # the first registration's key still holds
        with pytest.raises(LookupError):
            store.create_episode("run-missing", None, None, 0, None, "k")
        assert [e.id for e in store.list_episodes()] == ["ep-1"]


def test_text_with_lone_surrogates_round_trips_and_never_fails_a_write(tmp_path: Path):
    odd = "caf\udce9-\ud800"  # a non-UTF-8 byte via surrogateescape, and a JSON "\ud800" escape
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, odd, 0, None, odd, workspace="/w/" + odd)
        assert store.check_episode_key(ep.id, odd) and not store.check_episode_key(ep.id, "caf")
        store.update_episode(ep.id, error=odd, reward_detail={odd: odd})
        got = store.get_episode(ep.id)
        assert (got.task_id, got.workspace, got.error, got.reward_detail) == (odd, "/w/" + odd, odd, {odd: odd})
        call = store.add_call(record(ep.id, path="/v1/" + odd, client_model=odd, error=odd,
                                     client_headers={"x-h": odd}, usage={odd: 1}))
        assert store.get_call(call.id) == call == store.get_calls(ep.id)[0]
        assert store.get_episode(odd) is None and not store.check_episode_key(odd, "k")
        assert store.get_calls(odd) == [] and store.get_call(odd) is None and store.get_run(odd) is None
        with pytest.raises(LookupError):
            store.add_call(record(odd))


def test_opening_an_up_to_date_store_does_not_wait_for_a_busy_writer(tmp_path: Path):
    Store.open(tmp_path).close()
    writer = sqlite3.connect(tmp_path / "alight.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process mid-write
    try:
        started = time.monotonic()
        with Store.open(tmp_path) as store:
            assert store.list_runs() == []
        # Waiting for the writer would take the whole busy timeout (the writer never lets go here) and then fail.
        assert time.monotonic() - started < BUSY_TIMEOUT_MS / 1000 / 2
    finally:
        writer.execute("ROLLBACK")


def test_json_fields_keep_what_a_fast_encoder_would_change(tmp_path: Path):
    # NaN/Infinity (a client may send them; a fast JSON encoder writes null), non-str keys, huge ints and
    # non-ASCII text all load back exactly as given.
    sampling = {"temperature": float("inf"), "top_p": 0.9, "stop": ["é", "\n"], "seed": 2**70}
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        store.add_call(record(ep.id, sampling=sampling, usage={"weird": float("-inf")}, dropped={7: "x"},
                              client_headers={"user-agent": "naïve/1.0"}))
        got = store.get_calls(ep.id)[0]
    assert got.sampling == sampling and got.usage == {"weird": float("-inf")}
    assert got.dropped == {"7": "x"} and got.client_headers == {"user-agent": "naïve/1.0"}
    with Store.open(tmp_path) as store:  # NaN cannot be compared with ==: its text must still say NaN
        ep = store.create_episode(None, None, None, 1, None, "k")
        store.add_call(record(ep.id, sampling={"temperature": float("nan")}))
        assert math.isnan(store.get_calls(ep.id)[0].sampling["temperature"])


def test_ids_made_within_one_millisecond_sort_in_creation_order() -> None:
    import threading

    from agentlightning_cli.store.ids import new_id

    made: list[list[str]] = [[] for _ in range(4)]

    def mint(out: list[str]) -> None:
        out.extend(new_id("ep") for _ in range(5000))

    threads = [threading.Thread(target=mint, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in made:  # thousands per millisecond: ORDER BY id must still be each thread's creation order
        assert out == sorted(out)
    every = [i for out in made for i in out]
    assert len(set(every)) == len(every)


def test_llm_call_count_leaves_out_non_llm_requests_and_reads_no_body(tmp_path: Path):
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k")
        other = store.create_episode(None, None, None, 1, None, "k")
        assert store.llm_call_count(ep.id) == (0, None)
        store.add_call(record(ep.id, protocol="other", method="HEAD", started_at=0.5))  # a harness's preflight
        store.add_call(record(ep.id, started_at=3.0))
        store.add_call(record(ep.id, started_at=4.0))
        store.add_call(record(other.id, started_at=0.1))
        assert store.llm_call_count(ep.id) == (2, 3.0)
        assert len(store.get_calls(ep.id)) == 3
