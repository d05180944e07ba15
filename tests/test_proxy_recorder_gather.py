"""The recorder waits briefly for more records while requests are in flight, so they share a transaction,
but never holds a record back for long, and keeps queue order."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

from agentlightning_cli.proxy.recorder import Recorder
from agentlightning_cli.store import CallRecord, Store

# Wider than the default window so that the timing holds on a loaded machine; gaps between records are
# far longer than one write (~0.3 ms) and far shorter than the window.
WINDOW = 0.2


def record(episode_id: str, n: int) -> CallRecord:
    return CallRecord(episode_id=episode_id, protocol="openai-chat", method="POST", path="/v1/chat/completions",
                      status="ok", http_status=200, stream=False, client_request=b'{"n":%d}' % n, started_at=1.0,
                      ended_at=2.0, prompt_token_ids=[1, 2, n], completion_token_ids=[n], response=b"{}")


class CountingStore(Store):
    """The real store, also remembering how many records each transaction held."""

    batches: list[int]

    def add_calls(self, records, **options):
        self.batches.append(len(records))
        return super().add_calls(records, **options)


def test_a_lone_record_is_written_soon_even_when_many_requests_claim_to_be_in_flight(tmp_path: Path):
    with CountingStore.open(tmp_path) as store:
        store.batches = []
        ep = store.create_episode(None, None, None, 0, None, "k").id
        recorder = Recorder(store, in_flight=lambda: 100, gather_s=WINDOW)  # nobody else will ever send a record
        try:
            for n in range(3):
                start = time.monotonic()
                call = recorder.submit(record(ep, n)).result(timeout=5)
                assert call.seq == n
                assert time.monotonic() - start < WINDOW + 0.5  # the gather window, not a hang
        finally:
            recorder.close()
        assert store.batches == [1, 1, 1]


def test_records_sent_while_others_are_in_flight_share_transactions_in_order(tmp_path: Path):
    with CountingStore.open(tmp_path) as store:
        store.batches = []
        ep = store.create_episode(None, None, None, 0, None, "k").id
        recorder = Recorder(store, in_flight=lambda: 64, gather_s=WINDOW)
        try:
            futures: list[concurrent.futures.Future] = []
            for n in range(24):
                futures.append(recorder.submit(record(ep, n)))
                time.sleep(0.01)  # a trickle, as answers arrive from the model server
            calls = [f.result(timeout=10) for f in futures]
        finally:
            recorder.close()
        assert [c.seq for c in calls] == list(range(24))
        assert [c.client_request for c in store.get_calls(ep)] == [b'{"n":%d}' % n for n in range(24)]
        # Without the wait the writer finds one record each time it looks (it is idle between arrivals).
        assert sum(store.batches) == 24 and len(store.batches) <= 12, store.batches
