"""Writes CallRecords to the store from one writer thread, off the event loop.

Fail-closed: the first write that raises marks the recorder broken; from then on the proxy answers 503
to every new request (nothing unrecorded is served) until it is restarted. JSON answers are held until their
record is written; a stream's record can only be written when it ends, so a failure there stops new
traffic but cannot take back bytes already sent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from typing import Any

log = logging.getLogger("alight.proxy")
_STOP = object()
# Records written per store transaction at most: bounds how long one write holds the GIL and the db lock.
BATCH = 32


class Recorder:
    def __init__(self, store: Any):
        self.store = store
        self.failure: BaseException | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="alight-recorder", daemon=True)
        self._thread.start()

    @property
    def healthy(self) -> bool:
        return self.failure is None

    def submit(self, record: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((record, future))
        return future

    async def write(self, record: Any) -> Any:
        """Write and wait for the store to confirm; raises what the store raised."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._queue.put((record, (loop, waiter)))  # settled by _settle, one loop wake-up per batch
        return await waiter

    def call(self, fn, *args: Any) -> concurrent.futures.Future:
        """Run another store call on the writer thread (keeps the store single-writer)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put(((fn, args), future))
        return future

    def _run(self) -> None:
        # Group commit: take everything queued (up to BATCH records) and write it in ONE store transaction,
        # then resolve every waiter. At concurrency this amortises BEGIN/COMMIT and the per-episode lookups;
        # with one request in flight a batch is that one record, as before. Store calls (`call`) keep their
        # place in the FIFO order: records queued before one are written before it runs.
        pending: list[tuple[Any, Any]] = []
        while True:
            item = self._queue.get()
            while True:
                if item is _STOP:
                    self._write(pending)
                    return
                payload, future = item
                if isinstance(payload, tuple):
                    self._write(pending)
                    pending = []
                    self._call(payload, future)
                else:
                    pending.append(item)
                    if len(pending) >= BATCH:
                        self._write(pending)
                        pending = []
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write(pending)
            pending = []

    def _write(self, batch: list[tuple[Any, Any]]) -> None:
        if not batch:
            return
        try:
            calls = self.store.add_calls([record for record, _ in batch])
        except BaseException as exc:  # noqa: BLE001 - any store failure must stop traffic
            if self.failure is None:
                log.error("store write failed; proxy now answers 503: %s", exc)
                self.failure = exc
            outcomes = [(waiter, None, exc) for _, waiter in batch]  # all or none were written
        else:
            outcomes = [(waiter, call, None) for (_, waiter), call in zip(batch, calls)]
        by_loop: dict[Any, list] = {}
        for waiter, result, exc in outcomes:
            if isinstance(waiter, tuple):  # an asyncio future: settle on its loop, one wake-up per loop
                by_loop.setdefault(waiter[0], []).append((waiter[1], result, exc))
            else:
                _resolve(waiter, result, exc)
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    @staticmethod
    def _call(payload: tuple, future: concurrent.futures.Future) -> None:
        try:
            result = payload[0](*payload[1])
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            _resolve(future, None, exc)
        else:
            _resolve(future, result, None)

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put(_STOP)
        self._thread.join(timeout)


def _settle(settled: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    for waiter, result, exc in settled:
        if waiter.done():  # cancelled (the client went away); the record is written all the same
            continue
        if exc is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(result)


def _resolve(future: concurrent.futures.Future, result: Any, exc: BaseException | None) -> None:
    # A caller may have cancelled its future (a task cut by Proxy.stop, via asyncio.wrap_future): setting it
    # would raise in this thread and end it, and with it all recording.
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass
