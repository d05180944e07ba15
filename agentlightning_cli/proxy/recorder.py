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
        return await asyncio.wrap_future(self.submit(record))

    def call(self, fn, *args: Any) -> concurrent.futures.Future:
        """Run another store call on the writer thread (keeps the store single-writer)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put(((fn, args), future))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            payload, future = item
            try:
                if isinstance(payload, tuple):
                    result = payload[0](*payload[1])
                else:
                    result = self.store.add_call(payload)
            except BaseException as exc:  # noqa: BLE001 - any store failure must stop traffic
                if not isinstance(payload, tuple) and self.failure is None:
                    log.error("store write failed; proxy now answers 503: %s", exc)
                    self.failure = exc
                future.set_exception(exc)
            else:
                future.set_result(result)

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put(_STOP)
        self._thread.join(timeout)
