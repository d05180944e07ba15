"""The proxy's HTTP/1.1 server: an asyncio protocol over llhttp (httptools), no web framework.

Why not aiohttp.web: every request through the proxy pays the server's cost (it is the proxy's whole job),
and a bare relay on aiohttp's server + client cost 0.30-0.38 ms of CPU per request here against 0.17 ms on
this server + upstream.py (bench/proxy.py, `floor-aiohttp` and `floor` rows, side by side), with 0.5 ms the
budget for everything the proxy does. This server does only what
the proxy needs: one request at a time per connection (pipelined requests queue), bodies read whole up to a
limit, plain or chunked responses, keep-alive, `Expect: 100-continue`, write back-pressure, and a graceful
close. Routing, auth and protocol errors are the proxy's (server.py).
"""

from __future__ import annotations

import asyncio
import socket
import logging
import time
from collections import deque
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Iterator
from urllib.parse import unquote

import httptools

log = logging.getLogger("alight.proxy")

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
# A client that stops reading: stop producing for it once this much waits in the socket buffer.
_WRITE_HIGH_WATER = 256 * 1024
# Request line + headers: far above what any harness sends; past it the request is refused with 431.
MAX_HEAD_BYTES = 256 * 1024
# A connection that has sent nothing for this long while nothing is being answered for it is closed: an idle
# keep-alive connection (clients reconnect transparently) or a request stalled half-sent. Connections a client
# leaks cannot pile up in a long run. Checked by one sweep, not a timer per request.
KEEPALIVE_S = 75.0


class _HeadTooLarge(Exception):
    pass


def _text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:  # not UTF-8: keep every byte, one character each
        return raw.decode("latin-1")


class Headers:
    """A request's headers: case-insensitive `get`, and `items()` with the names as the client sent them."""

    __slots__ = ("_raw", "_map")

    def __init__(self, raw: list[tuple[str, str]]):
        self._raw = raw
        self._map = {name.lower(): value for name, value in raw}

    def get(self, name: str, default: Any = None) -> Any:
        return self._map.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._map

    def items(self) -> Iterator[tuple[str, str]]:
        return iter(self._raw)


class Request:
    """One complete request: method, path (percent-decoded), raw query, headers, and the body as received."""

    __slots__ = ("method", "path", "query_string", "headers", "body", "too_large", "keep_alive", "chunked_ok",
                 "_conn")

    def __init__(self, conn: "_Connection", method: str, url: bytes, headers: Headers, keep_alive: bool,
                 chunked_ok: bool):
        target, _, query = _text(url).partition("?")
        if target.startswith(("http://", "https://")):  # absolute-form: only the path routes
            target = "/" + target.split("://", 1)[1].partition("/")[2]
        self.path = unquote(target) if "%" in target else target
        self.query_string = query
        self.method, self.headers, self.keep_alive, self.chunked_ok = method, headers, keep_alive, chunked_ok
        self.body = b""
        self.too_large = False  # the body passed the server's limit and was discarded
        self._conn = conn

    @property
    def path_qs(self) -> str:
        return f"{self.path}?{self.query_string}" if self.query_string else self.path

    def start_stream(self, status: int, headers: dict[str, str]) -> "StreamWriter":
        """Send the status line and headers now; the body follows in chunks through the returned writer."""
        return StreamWriter(self._conn, self, status, headers)


class Response:
    """A whole response, written in one go after the handler returns it."""

    __slots__ = ("status", "body", "content_type")

    def __init__(self, status: int = 200, body: bytes = b"", content_type: str | None = "application/json"):
        self.status, self.body, self.content_type = status, body, content_type


def _head(status: int, headers: dict[str, str] | None, length: int | None, keep_alive: bool) -> bytes:
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))]
    if headers:
        lines.extend(f"{k}: {v}\r\n".encode() for k, v in headers.items())
    lines.append(b"Content-Length: %d\r\n" % length if length is not None else b"Transfer-Encoding: chunked\r\n")
    if not keep_alive:
        lines.append(b"Connection: close\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


class StreamWriter:
    """A streamed (chunked) response. `write` raises ConnectionResetError once the client has gone, and waits
    while the client's socket buffer is full, so a reader that stalls slows the stream instead of growing it."""

    __slots__ = ("_conn", "_chunked", "finished")

    def __init__(self, conn: "_Connection", request: Request, status: int, headers: dict[str, str]):
        self._conn = conn
        # An HTTP/1.0 client cannot read chunks: its body ends when the connection closes.
        self._chunked = request.chunked_ok
        if not self._chunked:
            request.keep_alive = False
            head = _head(status, headers, None, False).replace(b"Transfer-Encoding: chunked\r\n", b"")
        else:
            head = _head(status, headers, None, request.keep_alive)
        self.finished = False
        conn.send(head)

    async def write(self, data: bytes) -> None:
        if not data:
            return
        conn = self._conn
        conn.send(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        if conn.write_paused:
            await conn.drain()

    async def write_eof(self) -> None:
        if not self.finished:
            self.finished = True
            if self._chunked:
                self._conn.send(_LAST_CHUNK)


Handler = Callable[[Request], Awaitable["Response | StreamWriter"]]


class HTTPServer:
    def __init__(self, handler: Handler, max_body_bytes: int, keepalive_s: float = KEEPALIVE_S):
        self.handler, self.max_body_bytes, self.keepalive_s = handler, max_body_bytes, keepalive_s
        self.connections: set[_Connection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._unix_server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, backlog=1024)
        self._sweeper = loop.create_task(self._sweep())
        return self._server.sockets[0].getsockname()[:2]

    async def serve_socket(self, sock: socket.socket) -> asyncio.AbstractServer:
        """Also accept on a listening socket made elsewhere (a sandbox's loopback, see listener_inbox.py)."""
        loop = asyncio.get_running_loop()
        return await loop.create_server(lambda: _Connection(self), sock=sock, backlog=256)

    async def start_unix(self, path: str) -> None:
        """Also accept connections on a Unix socket (how sandboxed episodes reach the proxy)."""
        loop = asyncio.get_running_loop()
        self._unix_server = await loop.create_unix_server(lambda: _Connection(self), path, backlog=1024)

    def stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._unix_server is not None:
            self._unix_server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(self.keepalive_s / 4, 15.0))
            idle_since = time.monotonic() - self.keepalive_s
            for conn in list(self.connections):
                if conn.idle and conn.last_active < idle_since:
                    conn.transport.close()

    def close_connections(self) -> None:
        for conn in list(self.connections):
            conn.transport.close()
        self.connections.clear()


class _Connection(asyncio.Protocol):
    """One client connection: parse requests as bytes arrive, answer them one after another."""

    def __init__(self, server: HTTPServer):
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.closed = False
        self.write_paused = False
        self._drain_waiter: asyncio.Future | None = None
        self._queue: deque[Request] = deque()
        self._task: asyncio.Task | None = None
        self._url = b""
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._head_bytes = 0
        self._request: Request | None = None
        self.last_active = time.monotonic()

    @property
    def idle(self) -> bool:
        """Nothing being answered (between requests, or a request still arriving)."""
        return self._task is None and not self._queue

    # -- asyncio.Protocol ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self._wake_drain()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, b"alight: protocol upgrades are not supported\n")
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._fail(431, b"alight: request line and headers exceed %d bytes\n" % MAX_HEAD_BYTES)
            else:
                self._fail(400, b"alight: malformed HTTP request: %s\n" % str(exc).encode())

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_drain()

    # -- llhttp callbacks -----------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._size, self._head_bytes = b"", [], [], 0, 1

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), _text(value)))
        self._count_head(len(name) + len(value))

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge()

    def on_headers_complete(self) -> None:
        parser = self.parser
        headers = Headers(self._headers)
        request = Request(self, parser.get_method().decode(), self._url, headers, parser.should_keep_alive(),
                          parser.get_http_version() != "1.0")
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.server.max_body_bytes:
            request.too_large = True  # read and discarded, so the client gets its 413 after it has sent all
        elif (headers.get("expect") or "").lower() == "100-continue":
            self.transport.write(_CONTINUE)
        self._request = request

    def on_body(self, body: bytes) -> None:
        request = self._request
        if request is None or request.too_large:
            return
        self._size += len(body)
        if self._size > self.server.max_body_bytes:
            request.too_large, self._body = True, []
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._head_bytes = 0
        request, self._request = self._request, None
        if request is None:
            return
        body = self._body
        request.body = body[0] if len(body) == 1 else b"".join(body)
        self._body = []
        self._queue.append(request)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve())
        elif len(self._queue) > 8:  # a client pipelining far ahead: stop reading until we catch up
            self.transport.pause_reading()

    # -- answering --------------------------------------------------------------------------------------
    async def _serve(self) -> None:
        try:
            while self._queue and not self.closed:
                request = self._queue.popleft()
                try:
                    answer = await self.server.handler(request)
                except Exception:  # noqa: BLE001 - the handler answers its own errors; this is the backstop
                    log.exception("unhandled error on %s %s", request.method, request.path)
                    answer = Response(500, b"alight: internal proxy error\n", "text/plain")
                try:
                    if isinstance(answer, Response):
                        body = b"" if request.method == "HEAD" else answer.body
                        headers = {"Content-Type": answer.content_type} if answer.content_type else None
                        self.send(_head(answer.status, headers, len(answer.body), request.keep_alive) + body)
                    elif isinstance(answer, StreamWriter) and not answer.finished:
                        await answer.write_eof()
                except ConnectionResetError:  # the client went away before its answer: nothing to tell it
                    return
                if not request.keep_alive:
                    if not self.closed:
                        self.transport.close()
                    return
                if len(self._queue) <= 8 and not self.closed:
                    self.transport.resume_reading()
        finally:
            self._task = None

    def send(self, data: bytes) -> None:
        if self.closed or self.transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self.transport.write(data)

    async def drain(self) -> None:
        if self.write_paused and not self.closed:
            self._drain_waiter = asyncio.get_running_loop().create_future()
            await self._drain_waiter
        if self.closed:
            raise ConnectionResetError("the client closed the connection")

    def _wake_drain(self) -> None:
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, status: int, message: bytes) -> None:
        if not self.closed and not self.transport.is_closing():
            self.transport.write(_head(status, {"Content-Type": "text/plain"}, len(message), False) + message)
            self.transport.close()
