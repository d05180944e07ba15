"""Bodies the proxy must refuse (nesting past the limit, NaN/Infinity), its own failures recorded as its own
(`internal_error`), and the upstream URL forms and start-up probe. Through the real proxy on real sockets."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import aiohttp
import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.proxy import passthrough
from agentlightning_cli.proxy.incoming import NESTING_LIMIT
from agentlightning_cli.proxy.probe import probe_upstream, server_root
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from agentlightning_cli.testing.proxy_env import post, start_env, stop_env

HELLO = [{"role": "user", "content": "hello"}]
CHAT, MESSAGES, RESPONSES = "/v1/chat/completions", "/v1/messages", "/v1/responses"


@pytest.fixture
async def env(tmp_path):
    env = await start_env(tmp_path)
    yield env
    await stop_env(env)


def _nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def _body(path: str, extra: bytes) -> bytes:
    """A valid request of the path's protocol with `"extra": <extra>` spliced in as raw JSON text."""
    if path == RESPONSES:
        head = json.dumps({"model": "m", "input": "hello"})
    else:
        head = json.dumps({"model": "m", "max_tokens": 5, "messages": HELLO})
    return head[:-1].encode() + b', "extra": ' + extra + b"}"


async def _send(env, path: str, body: bytes) -> tuple[int, dict, str]:
    ep, key = env.episode()
    headers = {"x-api-key": key} if path == MESSAGES else None
    status, out, _ = await post(env.url(ep, path), body, None if headers else key, headers)
    return status, json.loads(out), ep


def _message(path: str, data: dict) -> str:
    if path == MESSAGES:
        assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    else:
        assert data["error"]["type"] == "invalid_request_error"
    return data["error"]["message"]


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
async def test_deeply_nested_body_is_a_400_recorded_as_bad_request(env, path):
    # _nested(n) inside the body's own object is n + 1 levels: far past orjson's own limit, and one past ours.
    for levels in (100_000, NESTING_LIMIT):
        body = _body(path, _nested(levels))
        status, data, ep = await _send(env, path, body)
        assert status == 400
        assert f"nested deeper than {NESTING_LIMIT} levels" in _message(path, data)
        [call] = await env.calls(ep, 1)
        assert call.status == "bad_request" and call.http_status == 400 and call.client_request == body
    assert env.fake.requests == []
    # The limit itself is fine (the body's own object is level 1), and the proxy still serves.
    status, _, _ = await _send(env, path, _body(path, _nested(NESTING_LIMIT - 1)))
    assert status == 200 and len(env.fake.requests) == 1


@pytest.mark.parametrize("path", [CHAT, RESPONSES])
@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
async def test_nan_and_infinity_are_a_400_recorded_as_bad_request(env, path, literal):
    body = _body(path, b"{\"temperature\": " + literal + b"}")
    status, data, ep = await _send(env, path, body)
    assert status == 400
    message = _message(path, data)
    assert literal.decode().lstrip("-") in message and "not a JSON number" in message
    [call] = await env.calls(ep, 1)
    assert call.status == "bad_request" and call.client_request == body
    assert env.fake.requests == []
    # Integers past 64 bits are valid JSON: still accepted.
    status, _, _ = await _send(env, path, _body(path, b"123456789012345678901234567890"))
    assert status == 200


async def test_an_exception_inside_alight_is_recorded_as_internal_error(env, monkeypatch):
    def broken_plan(*args, **kwargs):
        raise RuntimeError("injected bug")

    monkeypatch.setattr(passthrough, "plan_chat", broken_plan)
    status, data, ep = await _send(env, CHAT, json.dumps({"model": "m", "messages": HELLO}).encode())
    assert status == 500 and "internal proxy error" in data["error"]["message"]
    [call] = await env.calls(ep, 1)
    assert call.status == "internal_error" and call.http_status == 500 and "injected bug" in call.error


async def test_an_exception_mid_stream_is_recorded_as_internal_error(env, monkeypatch):
    def broken_feed(self, chunk):
        raise RuntimeError("injected stream bug")

    monkeypatch.setattr(passthrough.ChatPassthrough, "feed", broken_feed)
    ep, key = env.episode()
    async with aiohttp.ClientSession() as session:
        async with session.post(env.url(ep), json={"model": "m", "messages": HELLO, "stream": True},
                                headers={"Authorization": f"Bearer {key}"}) as resp:
            assert resp.status == 200  # headers went out before the failure
            try:
                await resp.read()
            except aiohttp.ClientPayloadError:
                pass  # the stream was cut: that is all a client can be told once headers are sent
    [call] = await env.calls(ep, 1)
    assert call.status == "internal_error" and "injected stream bug" in call.error and call.stream


def test_server_root_accepts_root_and_v1_forms():
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"):
        assert server_root(url) == "http://h:8000"
    assert server_root("https://h/api/v1") == "https://h/api"


@pytest.mark.parametrize("suffix", ["", "/v1", "/v1/"])
async def test_upstream_given_as_v1_base_url_works(tmp_path, suffix):
    with FakeVLLM(FakeScript(turns=["hi there", "and again"], any_model=True)) as fake:
        env = await start_env(tmp_path, upstream=fake.url + suffix)
        try:
            status, data, _ = await _send(env, CHAT, json.dumps({"model": "m", "messages": HELLO}).encode())
            assert status == 200 and data["choices"][0]["message"]["content"] == "hi there"
            # /tokenize lives at the server root, not under /v1.
            ep, key = env.episode()
            status, out, _ = await post(env.url(ep, "/v1/messages/count_tokens"),
                                        json.dumps({"model": "m", "messages": HELLO}), None, {"x-api-key": key})
            assert status == 200 and json.loads(out)["input_tokens"] > 0
        finally:
            await stop_env(env)
        info = probe_upstream(fake.url + suffix)
        assert info.root_url == fake.url and info.base_url == fake.url + "/v1"
        assert info.models == ["base"] and info.max_model_len["base"] > 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_probe_says_when_the_upstream_is_unreachable():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(AlightError) as caught:
        probe_upstream(url, timeout_s=2)
    assert "is unreachable" in caught.value.message and url.removesuffix("/v1") in caught.value.message
    assert "start the model server" in caught.value.hint
    with pytest.raises(AlightError, match="must be an http"):
        probe_upstream("localhost:8000")


class _NotOpenAI(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        status, body = (200, b"<html>a web page</html>") if self.path == "/v1/models" else (404, b"no")
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("prefix", ["", "/other"])
def test_probe_says_when_the_upstream_is_not_openai_compatible(prefix):
    server = HTTPServer(("127.0.0.1", 0), _NotOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}{prefix}"
        with pytest.raises(AlightError) as caught:
            probe_upstream(url)
        assert "is not an OpenAI-compatible server" in caught.value.message
        assert ("HTTP 404" if prefix else "did not answer a model list") in caught.value.message
    finally:
        server.shutdown()
        server.server_close()


def _alight_proxy(upstream: str, store) -> tuple[subprocess.Popen, str]:
    """A real `alight proxy` process and its start-up text (up to the banner's last line)."""
    alight = shutil.which("alight", path=str(Path(sys.executable).parent))
    proc = subprocess.Popen([alight, "proxy", "--upstream", upstream, "--port", "0", "--store", str(store)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    while not any("Ctrl-C stops." in line for line in lines):
        line = proc.stderr.readline()
        if not line:
            proc.kill()
            raise AssertionError(f"alight proxy exited early: {''.join(lines)}")
        lines.append(line)
    return proc, "".join(lines)


def test_alight_proxy_start_up_names_the_upstream_models_or_says_it_is_unreachable(tmp_path):
    with FakeVLLM(FakeScript(served_models=["base", "policy-r3"])) as fake:
        proc, text = _alight_proxy(fake.url + "/v1", tmp_path / "a")
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    assert f"-> {fake.url}\n" in text and "upstream serves: base, policy-r3" in text and "warning" not in text
    url = f"http://127.0.0.1:{_free_port()}"
    proc, text = _alight_proxy(url, tmp_path / "b")
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)
    assert f"warning: the upstream {url} is unreachable" in text and "upstream serves: unknown" in text


def test_nesting_limit_holds_for_objects_and_for_bodies_the_fast_check_cannot_encode():
    from agentlightning_cli.proxy.errors import ProxyReject
    from agentlightning_cli.proxy.incoming import parse_json

    def objects(levels: int) -> bytes:
        return b'{"a":' * levels + b"1" + b"}" * levels

    for extra in (b"", b', "big": 123456789012345678901234567890'):  # a huge int takes the slow path
        ok = b'{"messages": [], "x": ' + objects(NESTING_LIMIT - 1) + extra + b"}"
        assert parse_json(ok, "openai-chat")["messages"] == []
        with pytest.raises(ProxyReject, match=f"deeper than {NESTING_LIMIT} levels"):
            parse_json(b'{"messages": [], "x": ' + objects(NESTING_LIMIT) + extra + b"}", "openai-chat")
