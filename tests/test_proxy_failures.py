"""What the proxy does when things go wrong: bad input, upstream down or failing, the store failing,
the client hanging up mid-stream. Each case is answered in the client's protocol shape and recorded."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import sqlite3
import struct

import aiohttp
import openai
import pytest
import zstandard

from agentlightning_cli.scripted import fake_tokens as tok
from agentlightning_cli.scripted.fake_vllm import FakeScript
from agentlightning_cli.testing.proxy_env import post, start_env, stop_env

HELLO = [{"role": "user", "content": "hello"}]
GOOD = json.dumps({"model": "m", "messages": HELLO})


@pytest.fixture
async def env(tmp_path):
    env = await start_env(tmp_path, max_body_bytes=4096)
    yield env
    await stop_env(env)


BAD_INPUTS = [
    ("not json", b"{nope", 400, "not valid JSON"),
    ("array", b'[{"messages": []}]', 400, "JSON object"),
    ("no messages", b'{"model": "m"}', 400, "'messages' is required"),
    ("stream not bool", json.dumps({"messages": HELLO, "stream": "yes"}).encode(), 400, "'stream' must be a boolean"),
    ("invalid utf-8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "UTF-8"),
    ("too big", json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}).encode(), 413, "limit"),
]


@pytest.mark.parametrize("name,body,status,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
async def test_bad_input_is_a_protocol_shaped_4xx_recorded_and_proxy_keeps_serving(env, name, body, status, message):
    ep, key = env.episode()
    got, out, _ = await post(env.url(ep), body, key)
    assert got == status
    err = json.loads(out)["error"]
    assert message in err["message"] and err["type"] == "invalid_request_error"
    [call] = await env.calls(ep, 1)
    assert call.status == "bad_request" and call.http_status == status
    if status != 413:
        assert call.client_request == body
    assert env.fake.requests == []
    got, _, _ = await post(env.url(ep), GOOD, key)
    assert got == 200


async def test_bad_input_in_anthropic_shape(env):
    ep, key = env.episode()
    got, out, _ = await post(env.url(ep, "/v1/messages"), b"[1]", None, {"x-api-key": key})
    assert got == 400
    data = json.loads(out)
    assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    got, out, _ = await post(env.url(ep, "/v1/responses"), b'{"model": "m"}', key)
    assert got == 400 and "'input' is required" in json.loads(out)["error"]["message"]


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
async def test_compressed_bodies_are_decoded_and_recorded_decoded(env, encoding):
    ep, key = env.episode()
    raw = GOOD.encode()
    packed = gzip.compress(raw) if encoding == "gzip" else zstandard.ZstdCompressor().compress(raw)
    got, out, _ = await post(env.url(ep), packed, key, {"Content-Encoding": encoding})
    assert got == 200 and json.loads(out)["choices"][0]["message"]["content"]
    [call] = await env.calls(ep, 1)
    assert call.client_request == raw
    got, out, _ = await post(env.url(ep), b"\x1f\x8bgarbage", key, {"Content-Encoding": encoding})
    assert got == 400


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_upstream_unreachable_is_502_recorded(tmp_path):
    env = await start_env(tmp_path, upstream=f"http://127.0.0.1:{_free_port()}")
    try:
        ep, key = env.episode()
        for stream in (False, True):
            got, out, _ = await post(env.url(ep), json.dumps({"messages": HELLO, "stream": stream}), key)
            assert got == 502 and "unreachable" in json.loads(out)["error"]["message"]
        calls = await env.calls(ep, 2)
        assert [c.status for c in calls] == ["unreachable", "unreachable"]
        assert [c.http_status for c in calls] == [502, 502]
        assert calls[1].stream and calls[0].upstream_request is not None
    finally:
        await stop_env(env)


async def test_upstream_error_passes_through_and_is_recorded(tmp_path):
    env = await start_env(tmp_path, FakeScript(status=500))
    try:
        ep, key = env.episode()
        client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="m", messages=HELLO)
        got, out, _ = await post(env.url(ep, "/v1/messages"), json.dumps({"model": "c", "max_tokens": 5,
                                 "messages": HELLO}), None, {"x-api-key": key})
        assert got == 500 and json.loads(out)["type"] == "error"
        calls = await env.calls(ep, 2)
        assert [c.status for c in calls] == ["upstream_error", "upstream_error"]
        assert "injected failure" in calls[0].error and calls[0].upstream_response
    finally:
        await stop_env(env)


async def test_client_disconnect_mid_stream_records_partial(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=["abcdefghijklmnopqrstuvwxyz" * 4], event_delay_s=0.02))
    try:
        ep, key = env.episode()
        async with aiohttp.ClientSession() as s:
            resp = await s.post(env.url(ep), json={"messages": HELLO, "stream": True},
                                headers={"Authorization": f"Bearer {key}"})
            await resp.content.readuntil(b"\n\n")
            await resp.content.readuntil(b"\n\n")
            resp.close()
        [call] = await env.calls(ep, 1)
        assert call.status == "partial" and call.stream
        assert 0 < len(call.completion_token_ids) < 105
        assert call.completion_token_ids == tok.text_ids("abcdefghijklmnopqrstuvwxyz" * 4)[: len(call.completion_token_ids)]
        assert call.response.startswith(b"data: ")
    finally:
        await stop_env(env)


@pytest.mark.parametrize("path, final", [("/v1/chat/completions", b"data: [DONE]"),
                                         ("/v1/responses", b"event: response.completed")])
async def test_client_closing_after_its_whole_answer_records_ok(tmp_path, path, final):
    # Codex closes its connection (a reset) as soon as it has `response.completed`, while the proxy still waits for
    # the upstream's end of stream: the client had its whole answer, so the call is `ok`, not `partial`.
    text = "abcdefghij" * 3
    env = await start_env(tmp_path, FakeScript(turns=[text], event_delay_s=0.05))
    try:
        ep, key = env.episode()
        body = ({"messages": HELLO, "stream": True} if "chat" in path
                else {"model": "m", "input": "hello", "stream": True})
        raw = json.dumps(body).encode()
        host, port = env.proxy.base_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"POST /e/{ep}{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw)
        await writer.drain()
        seen = b""
        while final not in seen:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, seen[-500:]
            seen += chunk
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        writer.transport.abort()
        [call] = await env.calls(ep, 1)
        assert call.status == "ok" and call.error is None, (call.status, call.error)
        assert call.completion_token_ids == tok.text_ids(text) + [tok.IM_END]  # the whole answer, end of turn
        assert final in call.response
    finally:
        await stop_env(env)


async def test_upstream_dropping_mid_stream_is_recorded_and_client_told(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=["a long answer here"], drop_after_events=4))
    try:
        ep, key = env.episode()
        client = openai.AsyncOpenAI(base_url=env.proxy.episode_base_url(ep), api_key=key, max_retries=0)
        stream = await client.chat.completions.create(model="m", messages=HELLO, stream=True)
        with pytest.raises(openai.APIError):
            async for _ in stream:
                pass
        [call] = await env.calls(ep, 1)
        assert call.status == "upstream_error" and call.completion_token_ids == tok.text_ids("a l")
    finally:
        await stop_env(env)


async def test_store_failure_fails_closed_with_503(env):
    ep, key = env.episode()
    assert (await post(env.url(ep), GOOD, key))[0] == 200
    # A real store failure: the calls table disappears under the proxy.
    with sqlite3.connect(env.store.path) as db:
        db.execute("ALTER TABLE calls RENAME TO calls_gone")
    got, out, _ = await post(env.url(ep), GOOD, key)
    assert got == 503 and "refuses traffic" in json.loads(out)["error"]["message"]
    served_before = len(env.fake.requests)
    got, _, _ = await post(env.url(ep), json.dumps({"messages": HELLO, "stream": True}), key)
    assert got == 503 and len(env.fake.requests) == served_before  # nothing more reaches the model
    await asyncio.sleep(0)


async def test_a_client_gone_before_the_stream_starts_is_recorded_partial(tmp_path):
    """The client hung up while the upstream was still on its first byte (a long prefill: Claude Code gives up on
    a 30k-token first call and retries): the call is `partial`, saying so, not an internal error with a traceback."""
    env = await start_env(tmp_path, FakeScript(turns=["never read"], delay_s=1.0))
    try:
        ep, key = env.episode()
        raw = json.dumps({"messages": HELLO, "stream": True}).encode()
        host, port = env.proxy.base_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"POST /e/{ep}/v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw)
        await writer.drain()
        writer.close()  # gone before the upstream's first byte (it answers after 1 s)
        [call] = await env.calls(ep, 1)
        assert call.status == "partial" and call.stream, (call.status, call.error)
        assert "client disconnected before the stream started" in call.error
    finally:
        await stop_env(env)
