"""Times every upstream request the proxy makes, for the benches that split a call's time into the proxy's own
and the upstream's: (path, sent, last byte read) for each request, by wrapping the proxy's own HTTP client.

A response ends at its last chunk read, or at its release if its reader stopped early (or read exactly the
body): whichever comes first. Nothing else in the proxy changes.
"""

from __future__ import annotations

import time
from typing import Callable

from agentlightning_cli.proxy import upstream


def time_upstream_requests(on_done: Callable[[str, float, float], None]) -> None:
    """Patch the proxy's upstream client in this process: `on_done(path, sent, done)` once per request, the path
    without its query string."""
    post, anext_, release = upstream.UpstreamPool.post, upstream.UpstreamResponse.__anext__, \
        upstream.UpstreamResponse.release
    started: dict[int, tuple[str, float]] = {}

    async def timed_post(self, path, body, content_type="application/json"):
        t0 = time.time()
        response = await post(self, path, body, content_type)
        started[id(response)] = (path.split("?")[0], t0)
        return response

    def done(response) -> None:
        entry = started.pop(id(response), None)
        if entry is not None:
            on_done(entry[0], entry[1], time.time())

    async def timed_anext(self):
        try:
            return await anext_(self)
        except StopAsyncIteration:
            done(self)
            raise

    def timed_release(self):
        done(self)
        release(self)

    upstream.UpstreamPool.post = timed_post
    upstream.UpstreamResponse.__anext__ = timed_anext
    upstream.UpstreamResponse.release = timed_release
