"""The proxy's HTTP/1.1 client to the model server: pooled keep-alive connections over llhttp (httptools).

Why not aiohttp's ClientSession: it was half of what a bare relay cost per request here (bench/proxy.py),
for features the proxy never uses (cookies, redirects, auth, proxies, decompression, multipart). This client
POSTs a body to one upstream and hands back the status, headers and the body as it arrives.

A pooled connection the server has just closed (an idle keep-alive timeout) can fail a request before any
byte of its answer came back; that request is sent once more on a fresh connection, as HTTP clients do,
since the server cannot have started on it.
"""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit

import httptools

# Upstream bytes buffered for a client that reads slowly before we stop reading from the upstream.
_READ_HIGH_WATER = 1 << 20


class UpstreamBroken(ConnectionError):
    """The upstream closed the connection or sent something that is not HTTP."""


UPSTREAM_DOWN = (OSError, asyncio.TimeoutError)
"""What a request to an upstream that is not there (refused, reset, closed, timed out) raises."""


class UpstreamPool:
    def __init__(self, base_url: str, limit: int = 256, connect_timeout: float = 30.0, api_key: str | None = None):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if parts.scheme == "https" else None
        self.prefix = parts.path.rstrip("/").encode()
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self._host_line = b"Host: %s\r\n" % host_header.encode("idna" if not host_header.isascii() else "ascii")
        if api_key:  # vLLM's --api-key (a server beyond loopback): on every request, never the client's own key
            self._host_line += b"Authorization: Bearer %s\r\n" % api_key.encode("ascii")
        self.connect_timeout = connect_timeout
        self._idle: list[_UpstreamConnection] = []
        self._busy: set[_UpstreamConnection] = set()
        self._slots = asyncio.Semaphore(limit)
        self._closed = False
        self.in_flight = 0
        """Requests sent and not yet given back (their answer still being read): the router's load measure."""

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> "UpstreamResponse":
        """Send the request; return once the status line and headers are in (the body follows)."""
        head = b"POST %s%s HTTP/1.1\r\n%sContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
            self.prefix, path.encode(), self._host_line, content_type.encode(), len(body))
        await self._slots.acquire()
        self.in_flight += 1
        try:
            while True:
                conn, reused = await self._connection()
                conn.send(head, body)
                try:
                    await conn.wait_headers()
                except UpstreamBroken:
                    self._busy.discard(conn)
                    conn.close()
                    if reused and not conn.got_bytes:
                        continue  # the server closed it while idle: it never saw this request
                    raise
                return UpstreamResponse(self, conn)
        except BaseException:
            self.in_flight -= 1
            self._slots.release()
            raise

    async def _connection(self) -> tuple["_UpstreamConnection", bool]:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                self._busy.add(conn)
                return conn, True
        if self._closed:
            raise UpstreamBroken("the proxy is shutting down")
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: _UpstreamConnection(), self.host, self.port, ssl=self.ssl),
            self.connect_timeout)
        self._busy.add(conn)
        return conn, False

    def _give_back(self, conn: "_UpstreamConnection") -> None:
        self._busy.discard(conn)
        if conn.reusable() and not self._closed:
            self._idle.append(conn)
        else:
            conn.close()
        self.in_flight -= 1
        self._slots.release()

    async def close(self) -> None:
        self._closed = True
        for conn in self._idle + list(self._busy):
            conn.close()
        self._idle.clear()
        self._busy.clear()


class UpstreamResponse:
    """`status`, `headers` (lower-case names), then the body: `await read()` for all of it, or
    `async for data in response` for each batch of bytes as it arrives. `release()` when done."""

    __slots__ = ("status", "headers", "_pool", "_conn")

    def __init__(self, pool: UpstreamPool, conn: "_UpstreamConnection"):
        self._pool, self._conn = pool, conn
        self.status: int = conn.status
        self.headers: dict[str, str] = conn.headers

    async def read(self) -> bytes:
        parts = [data async for data in self]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def __aiter__(self) -> "UpstreamResponse":
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        if conn is None:
            raise StopAsyncIteration
        while True:
            data = conn.take()
            if data:
                return data
            if conn.complete:
                raise StopAsyncIteration
            if conn.error is not None:
                raise conn.error
            await conn.wait()

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._give_back(conn)


class _UpstreamConnection(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.closed = False
        self._waiter: asyncio.Future | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.headers_done = self.complete = self.got_bytes = self.keep_alive = False
        self.error: BaseException | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False

    def send(self, head: bytes, body: bytes) -> None:
        self._reset()
        if self.closed:
            self.error = UpstreamBroken("the upstream closed the connection")
            return
        if len(body) < 65536:
            self.transport.write(head + body)
        else:  # no copy of a big body
            self.transport.writelines((head, body))

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and not self._chunks

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.close()

    # -- reading ----------------------------------------------------------------------------------------
    def take(self) -> bytes:
        chunks = self._chunks
        if not chunks:
            return b""
        self._chunks, self._buffered = [], 0
        if self._paused and not self.closed:
            self._paused = False
            self.transport.resume_reading()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def wait_headers(self) -> None:
        while not self.headers_done:
            if self.error is not None:
                raise self.error
            await self.wait()

    async def wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- asyncio.Protocol -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = UpstreamBroken(f"the upstream sent malformed HTTP: {exc}")
            self.close()
            self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.error is None:
            if self.headers_done and "content-length" not in self.headers \
                    and "chunked" not in self.headers.get("transfer-encoding", ""):
                self.complete = True  # a body delimited by the connection's end: this is its end
            else:
                why = f": {exc}" if exc else ""
                self.error = UpstreamBroken(f"the upstream closed the connection{why}")
        self._wake()

    # -- llhttp callbacks -------------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _READ_HIGH_WATER and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()
