"""alight's own HTTP clients reach a loopback server directly even when HTTP_PROXY points at a proxy that does not
answer (a developer's shell, a corporate machine), and still use the environment's proxy for other hosts."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.request

import pytest

from agentlightning_cli import local_http
from agentlightning_cli.proxy.probe import probe_upstream


class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_a_loopback_server_is_reached_past_a_dead_proxy(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(OSError):  # the environment's proxy is really in the way of a plain urllib opener
        urllib.request.build_opener().open(f"{server}/v1/models", timeout=5)  # (urlopen's is built once, cached)
    assert probe_upstream(server).models == ["m"]
    with local_http.urlopen(f"{server}/v1/models", timeout=5) as resp:
        assert json.load(resp)["data"][0]["id"] == "m"


@pytest.mark.parametrize("url, loopback", [("http://127.0.0.1:8000/v1", True), ("http://localhost:1", True),
                                           ("http://[::1]:8000", True), ("http://127.5.6.7", True),
                                           ("https://api.example.com/v1", False), ("http://10.0.0.2:8000", False)])
def test_which_hosts_skip_the_proxy(url: str, loopback: bool) -> None:
    assert local_http.is_loopback(url) is loopback
