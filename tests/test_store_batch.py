"""Group commit: Store.add_calls writes a batch in one transaction, and the proxy's recorder batches."""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest

from agentlightning_cli.proxy.recorder import Recorder
from agentlightning_cli.store import CallRecord, Store


def record(episode_id: str, prompt: list[int], completion: list[int], body: bytes) -> CallRecord:
    return CallRecord(episode_id=episode_id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                      status="ok", http_status=200, stream=False, client_request=body, started_at=1.0, ended_at=2.0,
                      prompt_token_ids=prompt, completion_token_ids=completion, upstream_request=body + b" ",
                      response=b'{"ok":1}')


def conversation(rng: random.Random, episode_id: str, turns: int) -> list[CallRecord]:
    prompt, body, out = [rng.randrange(2**32) for _ in range(50)], b'{"m":["' + rng.randbytes(800).hex().encode(), []
    for _ in range(turns):
        completion = [rng.randrange(2**32) for _ in range(6)]
        out.append(record(episode_id, prompt, completion, body + b'"]}'))
        prompt = prompt + completion + [rng.randrange(2**32) for _ in range(4)]
        body = body + b'","' + rng.randbytes(30).hex().encode()
    return out


def column(tmp_path: Path, name: str) -> list:
    with sqlite3.connect(tmp_path / "alight.db") as conn:
        return [r[0] for r in conn.execute(f"SELECT {name} FROM calls ORDER BY episode_id, seq")]


def test_a_batch_over_two_episodes_is_delta_encoded_within_itself_and_reads_back_exact(tmp_path: Path):
    rng = random.Random(11)
    with Store.open(tmp_path) as store:
        eps = sorted(store.create_episode(None, None, None, n, None, "k").id for n in range(2))
        first, second = conversation(rng, eps[0], 6), conversation(rng, eps[1], 6)
        store.add_call(first[0])  # the batch continues a committed call as well as starting a new episode
        interleaved = [r for pair in zip(first[1:], second[1:]) for r in pair] + [second[0]]
        calls = store.add_calls(interleaved)
        assert [(c.episode_id, c.seq) for c in calls][:4] == [(eps[0], 1), (eps[1], 0), (eps[0], 2), (eps[1], 1)]
        assert calls[-1].seq == 5 and calls[-1].client_request == second[0].client_request
        for ep, records in ((eps[0], first), (eps[1], second[1:] + second[:1])):
            got = store.get_calls(ep)
            assert [(c.prompt_token_ids, c.completion_token_ids, c.client_request, c.upstream_request)
                    for c in got] == [(r.prompt_token_ids, r.completion_token_ids, r.client_request,
                                       r.upstream_request) for r in records]
            assert [store.get_call(c.id) for c in got] == got
    # Each call references the one before it, also inside the batch: small tails, small delta frames.
    assert column(tmp_path, "prompt_base_seq") == [None, 0, 1, 2, 3, 4] + [None, 0, 1, 2, 3, 4]
    assert column(tmp_path, "client_request_base_seq")[1:6] == [0, 1, 2, 3, 4]
    assert max(column(tmp_path, "LENGTH(client_request)")[1:6]) < 200


def test_add_calls_without_full_objects_returns_where_each_call_went(tmp_path: Path):
    rng = random.Random(14)
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k").id
        records = conversation(rng, ep, 4)
        placed = store.add_calls(records[:1]) + store.add_calls(records[1:], full=False)
        got = store.get_calls(ep)
        assert [(p.id, p.seq) for p in placed] == [(c.id, c.seq) for c in got] and [c.seq for c in got] == [0, 1, 2, 3]
        assert [c.client_request for c in got] == [r.client_request for r in records]


def test_a_batch_is_all_or_nothing(tmp_path: Path):
    rng = random.Random(12)
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k").id
        good = conversation(rng, ep, 3)
        with pytest.raises(LookupError):
            store.add_calls([good[0], good[1], record("no-such-episode", [1], [2], b"{}")])
        assert store.get_calls(ep) == []
        assert [c.seq for c in store.add_calls(good)] == [0, 1, 2]  # the cache did not keep the rolled-back state
        assert [c.client_request for c in store.get_calls(ep)] == [r.client_request for r in good]


def test_recorder_writes_queued_records_in_few_transactions_and_in_order(tmp_path: Path):
    rng = random.Random(13)
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k").id
        records = conversation(rng, ep, 40)
        batches: list[int] = []
        real = store.add_calls
        release = threading.Event()

        def counting(batch, **options):
            release.wait(10)  # hold the first write so the rest queue up behind it
            batches.append(len(batch))
            return real(batch, **options)

        store.add_calls = counting  # type: ignore[method-assign]  # wraps the real write, only counts batches
        recorder = Recorder(store)
        futures = [recorder.submit(r) for r in records]
        release.set()
        calls = [f.result(10) for f in futures]
        recorder.close()
        assert [c.seq for c in calls] == list(range(40))
        assert sum(batches) == 40 and len(batches) <= 3  # the first record alone, then at most 32 at a time
        assert [c.client_request for c in store.get_calls(ep)] == [r.client_request for r in records]


def test_recorder_failure_fails_every_waiter_of_the_batch(tmp_path: Path):
    with Store.open(tmp_path) as store:
        recorder = Recorder(store)
        futures = [recorder.submit(record("no-such-episode", [1], [2], b"{}")) for _ in range(3)]
        for future in futures:
            with pytest.raises(LookupError):
                future.result(10)
        assert not recorder.healthy
        recorder.close()


def test_cancelled_waiters_do_not_stop_the_recorder(tmp_path: Path):
    import asyncio

    rng = random.Random(14)
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, None, 0, None, "k").id
        records = conversation(rng, ep, 4)
        recorder = Recorder(store)
        gate = threading.Event()
        blocked = recorder.call(gate.wait, 10)  # the writer is busy: what follows queues up

        async def scenario():
            loop = asyncio.get_running_loop()
            cancelled_call = recorder.call(lambda: None)
            cancelled_call.cancel()  # e.g. a drain() cut by Proxy.stop
            first, second = loop.create_future(), loop.create_future()
            recorder.write_soon(records[0], first)  # queued behind the busy writer, as the loop must not overtake
            await asyncio.sleep(0.05)
            first.cancel()  # the request was cut while its answer waited for the record
            gate.set()
            recorder.write_soon(records[1], second)
            return await asyncio.wait_for(second, 10)  # hangs if the writer died

        assert asyncio.run(scenario()).seq == 1 and blocked.result(10)
        assert recorder.submit(records[2]).result(10).seq == 2 and recorder.healthy
        recorder.close()
        assert [c.seq for c in store.get_calls(ep)] == [0, 1, 2]
