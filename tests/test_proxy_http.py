"""The proxy's own HTTP/1.1 server and upstream client, over real loopback sockets, byte for byte."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agentlightning_cli.proxy.http_server import HTTPServer, Request, Response
from agentlightning_cli.proxy.upstream import UpstreamBroken, UpstreamPool


async def _server(handler, limit: int = 1 << 20) -> tuple[HTTPServer, int]:
    server = HTTPServer(handler, limit)
    _, port = await server.start("127.0.0.1", 0)
    return server, port


@contextlib.asynccontextmanager
async def _connected(handler, limit: int = 1 << 20):
    """(reader, writer) of one client connection to a fresh server; both closed afterwards."""
    server, port = await _server(handler, limit)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        server.stop_listening()
        server.close_connections()


async def _echo(request: Request) -> Response:
    text = f"{request.method} {request.path_qs} {len(request.body)} {request.too_large} {request.body[:20]!r}"
    return Response(200, text.encode(), "text/plain")


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head, await reader.readexactly(length)


async def test_pipelined_requests_are_answered_in_order_on_one_connection():
    async with _connected(_echo) as (reader, writer):
        writer.write(b"POST /a?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
                     b"GET /b%20c HTTP/1.1\r\nHost: h\r\n\r\n")
        first = await _read_response(reader)
        second = await _read_response(reader)
    assert first[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert first[1] == b"POST /a?x=1 3 False b'abc'"
    assert second[1] == b"GET /b c 0 False b''"


async def test_chunked_request_body_is_assembled_and_headers_keep_their_names():
    seen = {}

    async def handler(request: Request) -> Response:
        seen["headers"] = list(request.headers.items())
        seen["auth"] = request.headers.get("AUTHORIZATION")
        return Response(200, request.body)

    async with _connected(handler) as (reader, writer):
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\r\nAuthorization: Bearer s\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        _, body = await _read_response(reader)
        assert body == b"hello world"
        assert ("X-Api-Key", "k") in seen["headers"] and seen["auth"] == "Bearer s"


async def test_body_over_the_limit_is_discarded_and_flagged():
    async with _connected(_echo, limit=10) as (reader, writer):
        # Declared too large, then sent chunked past the limit: both reach the handler flagged, with no body.
        writer.write(b"POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world"
                     b"POST /big2 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n"
                     b"8\r\n12345678\r\n0\r\n\r\n")
        assert (await _read_response(reader))[1] == b"POST /big 0 True b''"
        assert (await _read_response(reader))[1] == b"POST /big2 0 True b''"


async def test_expect_continue_gets_100_before_the_body_is_sent():
    async with _connected(_echo) as (reader, writer):
        writer.write(b"POST /c HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"ok")
        assert (await _read_response(reader))[1] == b"POST /c 2 False b'ok'"


async def test_malformed_request_gets_400_and_the_connection_closes():
    server, port = await _server(_echo)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)  # read() returns at EOF: the server closed
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"malformed HTTP request" in answer
    server.stop_listening()


async def _streamer(request: Request):
    out = request.start_stream(200, {"Content-Type": "text/event-stream"})
    for i in range(3):
        await out.write(b"data: %d\n\n" % i)
    await out.write_eof()
    return out


async def test_stream_is_chunked_for_http11_and_close_delimited_for_http10():
    server, port = await _server(_streamer)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /s HTTP/1.1\r\nHost: h\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head
    assert await reader.readuntil(b"0\r\n\r\n") == b"9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /s HTTP/1.0\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)  # an HTTP/1.0 body ends when the connection does
    assert b"chunked" not in answer and answer.endswith(b"\r\n\r\ndata: 0\n\ndata: 1\n\ndata: 2\n\n")
    server.stop_listening()
    server.close_connections()


async def test_writing_to_a_client_that_left_raises_connection_reset():
    outcome = asyncio.get_running_loop().create_future()
    release = asyncio.Event()

    async def handler(request: Request):
        out = request.start_stream(200, {"Content-Type": "text/event-stream"})
        await release.wait()
        try:
            for _ in range(100):
                await out.write(b"data: x\n\n")
                await asyncio.sleep(0.01)
        except ConnectionResetError as exc:
            outcome.set_result(exc)
        return out

    server, port = await _server(handler)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /s HTTP/1.1\r\nHost: h\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")
    writer.close()
    await writer.wait_closed()
    release.set()
    assert isinstance(await asyncio.wait_for(outcome, 5), ConnectionResetError)
    server.stop_listening()


# -- upstream client ------------------------------------------------------------------------------------
class _RawUpstream:
    """A scripted upstream: `answer(n_on_connection, request_bytes)` returns the bytes to send back (a list:
    sent 50 ms apart; a tuple: sent, then the connection is closed), or None to close the connection without
    answering. Counts connections."""

    def __init__(self, answer):
        self.answer, self.connections, self.requests = answer, 0, []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                reply = self.answer(n, head + body)
                n += 1
                if reply is None:
                    break
                for part in reply if isinstance(reply, (list, tuple)) else [reply]:
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.05)
                if isinstance(reply, tuple) or (isinstance(reply, bytes) and b"Connection: close" in reply):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def close(self) -> None:
        self.server.close()


def _ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def test_pool_reuses_one_keep_alive_connection_and_sends_the_request_exactly():
    upstream = _RawUpstream(lambda n, req: _ok(b'{"n": %d}' % n))
    pool = UpstreamPool(await upstream.start() + "/prefix")
    for n in range(3):
        resp = await pool.post("/v1/chat/completions", b'{"a": 1}')
        assert (resp.status, await resp.read()) == (200, b'{"n": %d}' % n)
        assert resp.headers["content-type"] == "application/json"
        resp.release()
    assert upstream.connections == 1
    assert upstream.requests[0].startswith(b"POST /prefix/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert upstream.requests[0].endswith(b'Content-Type: application/json\r\nContent-Length: 8\r\n\r\n{"a": 1}')
    await pool.close()
    upstream.close()


async def test_a_pooled_connection_closed_before_answering_is_retried_once_on_a_fresh_one():
    # Each connection answers its first request and closes on its second without a byte: as a server does
    # when its idle keep-alive timer fires just as the request arrives.
    upstream = _RawUpstream(lambda n, req: _ok(b"fresh") if n == 0 else None)
    pool = UpstreamPool(await upstream.start())
    for _ in range(2):
        resp = await pool.post("/x", b"{}")
        assert await resp.read() == b"fresh"
        resp.release()
    assert upstream.connections == 2 and len(upstream.requests) == 3
    await pool.close()
    upstream.close()


async def test_a_fresh_connection_closed_without_an_answer_is_an_error_not_a_retry_loop():
    upstream = _RawUpstream(lambda n, req: None)
    pool = UpstreamPool(await upstream.start())
    with pytest.raises(UpstreamBroken, match="closed the connection"):
        await pool.post("/x", b"{}")
    assert upstream.connections == 1
    await pool.close()
    upstream.close()


async def test_streamed_chunks_arrive_as_sent_and_a_close_delimited_body_is_whole():
    chunks = [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
              b"7\r\ndata: 1\r\n", b"7\r\ndata: 2\r\n", b"0\r\n\r\n"]
    upstream = _RawUpstream(lambda n, req: chunks if b"/stream" in req else
                            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
    pool = UpstreamPool(await upstream.start())
    resp = await pool.post("/stream", b"{}")
    assert [data async for data in resp] == [b"data: 1", b"data: 2"]  # one read per arrival, 50 ms apart
    resp.release()
    resp = await pool.post("/plain", b"{}")
    assert await resp.read() == b"until the end"
    resp.release()
    await pool.close()
    upstream.close()


async def test_malformed_upstream_answer_and_mid_body_close_raise_upstream_broken():
    upstream = _RawUpstream(lambda n, req: b"garbage\r\n\r\n" if b"/bad" in req else
                            (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part",))
    pool = UpstreamPool(await upstream.start())
    with pytest.raises(UpstreamBroken, match="malformed HTTP"):
        await pool.post("/bad", b"{}")
    resp = await pool.post("/short", b"{}")
    upstream.close()
    with pytest.raises(UpstreamBroken, match="closed the connection"):
        await asyncio.wait_for(resp.read(), 5)
    resp.release()
    await pool.close()


async def test_unreachable_upstream_raises_an_os_error():
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    pool = UpstreamPool(f"http://127.0.0.1:{port}")
    with pytest.raises(ConnectionRefusedError):
        await pool.post("/x", b"{}")
    await pool.close()


async def test_idle_and_stalled_connections_are_closed_but_busy_ones_are_not():
    release = asyncio.Event()

    async def handler(request: Request) -> Response:
        if request.path == "/slow":
            await release.wait()
        return Response(200, b"ok")

    server = HTTPServer(handler, 1 << 20, keepalive_s=0.2)
    _, port = await server.start("127.0.0.1", 0)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    idle_writer.write(b"GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
    assert (await _read_response(idle_reader))[1] == b"ok"
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
    busy_writer.write(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
    stalled_reader, stalled_writer = await asyncio.open_connection("127.0.0.1", port)
    stalled_writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")  # never finished
    assert await asyncio.wait_for(idle_reader.read(), 5) == b""  # closed by the server once idle
    assert await asyncio.wait_for(stalled_reader.read(), 5) == b""  # ... and one stalled mid-request
    await asyncio.sleep(0.3)  # past the keep-alive time, but its request is still being answered
    release.set()
    assert (await asyncio.wait_for(_read_response(busy_reader), 5))[1] == b"ok"
    busy_writer.close()
    server.stop_listening()
    server.close_connections()


async def test_oversized_request_head_gets_431():
    from agentlightning_cli.proxy.http_server import MAX_HEAD_BYTES

    server, port = await _server(_echo)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    filler = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(MAX_HEAD_BYTES // 1000 + 2))
    writer.write(b"GET / HTTP/1.1\r\nHost: h\r\n" + filler + b"\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    server.stop_listening()


async def test_a_client_that_stops_reading_holds_the_stream_back():
    progress = []

    async def handler(request: Request):
        out = request.start_stream(200, {"Content-Type": "text/event-stream"})
        for i in range(256):  # 16 MiB in all: far past what socket buffers hold
            await out.write(b"x" * 65536)
            progress.append(i)
        await out.write_eof()
        return out

    server, port = await _server(handler)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
    writer.transport.pause_reading()
    writer.write(b"GET /s HTTP/1.1\r\nHost: h\r\n\r\n")
    await asyncio.sleep(0.5)
    stalled_at = len(progress)
    assert 0 < stalled_at < 64  # waiting for the reader, not buffering all 16 MiB in memory
    writer.transport.resume_reading()
    await reader.readuntil(b"\r\n\r\n")
    received, tail = 0, b""
    while not tail.endswith(b"\r\n0\r\n\r\n"):  # the last chunk: everything was written and read
        chunk = await asyncio.wait_for(reader.read(1 << 20), 5)
        assert chunk, "the stream ended early"
        received, tail = received + len(chunk), (tail + chunk)[-16:]
    assert len(progress) == 256 and received > 256 * 65536
    writer.close()
    server.stop_listening()
    server.close_connections()


async def test_https_upstream_is_verified_against_the_trusted_certificates(tmp_path, monkeypatch):
    import ssl
    import subprocess

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(_ok(b'{"tls": true}'))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    untrusting = UpstreamPool(url)  # the self-signed certificate is not trusted: refused, not ignored
    with pytest.raises(ssl.SSLCertVerificationError):
        await untrusting.post("/x", b"{}")
    await untrusting.close()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    pool = UpstreamPool(url)
    resp = await pool.post("/x", b"{}")
    assert (resp.status, await resp.read()) == (200, b'{"tls": true}')
    resp.release()
    await pool.close()
    server.close()
