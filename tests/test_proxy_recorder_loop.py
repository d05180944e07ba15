"""Records gathered on the event loop (Recorder.write_soon): one transaction for the records of requests
answered close together, written on the loop itself unless a huge batch or queued records say otherwise."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from agentlightning_cli.proxy import recorder as recorder_module
from agentlightning_cli.proxy.recorder import BATCH, Recorder
from agentlightning_cli.store import CallRecord, Store


def record(episode_id: str, n: int, body: bytes = b"") -> CallRecord:
    return CallRecord(episode_id=episode_id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                      status="ok", http_status=200, stream=False, client_request=b'{"n":%d}' % n + body,
                      started_at=1.0, ended_at=2.0, prompt_token_ids=[1, 2, n], completion_token_ids=[n])


class SpyStore(Store):
    """The real store, also noting each transaction's size and the thread that wrote it."""

    writes: list[tuple[int, str]]

    def add_calls(self, records, **options):
        self.writes.append((len(records), threading.current_thread().name))
        return super().add_calls(records, **options)


@pytest.fixture
def store(tmp_path: Path):
    with SpyStore.open(tmp_path) as opened:
        opened.writes = []
        yield opened


async def gather_written(recorder: Recorder, records: list[CallRecord]) -> list:
    loop = asyncio.get_running_loop()
    waiters = [loop.create_future() for _ in records]
    for rec, waiter in zip(records, waiters):
        recorder.write_soon(rec, waiter)
    return await asyncio.wait_for(asyncio.gather(*waiters), 10)


async def test_records_of_concurrent_requests_share_one_transaction_on_the_loop(store: SpyStore):
    ep = store.create_episode(None, None, None, 0, None, "k").id
    recorder = Recorder(store, in_flight=lambda: 8, gather_s=0.05)
    try:
        placed = await gather_written(recorder, [record(ep, n) for n in range(5)])
    finally:
        recorder.close()
    assert [p.seq for p in placed] == [0, 1, 2, 3, 4]
    assert store.writes == [(5, threading.current_thread().name)]  # one transaction, on this (the loop's) thread
    assert [c.client_request for c in store.get_calls(ep)] == [b'{"n":%d}' % n for n in range(5)]


async def test_a_lone_request_does_not_wait_for_the_gather_window(store: SpyStore):
    ep = store.create_episode(None, None, None, 0, None, "k").id
    recorder = Recorder(store, in_flight=lambda: 1, gather_s=30.0)
    try:
        placed = await asyncio.wait_for(gather_written(recorder, [record(ep, 0)]), 5)
    finally:
        recorder.close()
    assert placed[0].seq == 0 and store.writes == [(1, threading.current_thread().name)]


async def test_flush_soon_writes_what_is_gathering_at_once(store: SpyStore):
    ep = store.create_episode(None, None, None, 0, None, "k").id
    recorder = Recorder(store, in_flight=lambda: 8, gather_s=30.0)
    try:
        recorder.write_soon(record(ep, 0))  # a stream's record: nobody waits for it
        recorder.write_soon(record(ep, 1))
        assert store.get_calls(ep) == []  # still gathering
        recorder.flush_soon()  # as drain() and stop() do
        assert [c.seq for c in store.get_calls(ep)] == [0, 1]
    finally:
        recorder.close()


async def test_a_huge_batch_and_one_behind_queued_records_go_to_the_writer_thread(store: SpyStore, monkeypatch):
    ep = store.create_episode(None, None, None, 0, None, "k").id
    monkeypatch.setattr(recorder_module, "INLINE_BYTES", 1000)
    recorder = Recorder(store, in_flight=lambda: 1)
    try:
        huge = await gather_written(recorder, [record(ep, 0, b"x" * 2000)])
        gate = threading.Event()
        recorder.call(gate.wait, 10)  # the writer is busy with an earlier job ...
        queued = recorder.submit(record(ep, 1))  # ... and a record waits behind it
        later = asyncio.ensure_future(gather_written(recorder, [record(ep, 2)]))
        await asyncio.sleep(0.1)
        assert not later.done()  # it must not overtake the queued record
        gate.set()
        assert queued.result(10).seq == 1 and (await later)[0].seq == 2
    finally:
        recorder.close()
    assert huge[0].seq == 0 and sum(n for n, _ in store.writes) == 3
    assert {thread for _, thread in store.writes} == {"alight-recorder"}


async def test_a_failed_batch_fails_every_waiter_and_the_recorder(tmp_path: Path):
    with Store.open(tmp_path) as store:
        recorder = Recorder(store, in_flight=lambda: 8, gather_s=0.01)
        try:
            with pytest.raises(LookupError):
                await gather_written(recorder, [record("no-such-episode", n) for n in range(3)])
        finally:
            recorder.close()
        assert not recorder.healthy and isinstance(recorder.failure, LookupError)


async def test_a_full_batch_is_written_without_waiting_for_the_window(store: SpyStore):
    ep = store.create_episode(None, None, None, 0, None, "k").id
    recorder = Recorder(store, in_flight=lambda: 100, gather_s=30.0)
    loop = asyncio.get_running_loop()
    waiters = [loop.create_future() for _ in range(BATCH + 3)]
    try:
        for n, waiter in enumerate(waiters):
            recorder.write_soon(record(ep, n), waiter)
        assert len(store.get_calls(ep)) == BATCH  # the full batch went at once; 3 still gather
        recorder.flush_soon()
        placed = await asyncio.wait_for(asyncio.gather(*waiters), 5)
    finally:
        recorder.close()
    assert [p.seq for p in placed] == list(range(BATCH + 3))
    assert [n for n, _ in store.writes] == [BATCH, 3]
