"""One way to open a URL from alight's own HTTP clients (vLLM's health, adapters and warm-up calls, the upstream
probe): a loopback server is reached directly, never through HTTP_PROXY / HTTPS_PROXY (a corporate proxy cannot
reach this machine's 127.0.0.1, and a test or a developer's shell may set one); any other host goes the way
urllib goes, proxies from the environment included (a hosted upstream behind a proxy)."""

from __future__ import annotations

import ipaddress
import urllib.parse
import urllib.request
from typing import Any

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def is_loopback(url: str) -> bool:
    return is_loopback_host(urllib.parse.urlsplit(url).hostname or "")


def is_loopback_host(host: str) -> bool:
    """Whether `host` (an address or name to listen on or to reach) is this machine's loopback only. Every other
    host, the wildcards 0.0.0.0 / :: and names that are not `localhost` included, counts as reachable from
    elsewhere: what listens there needs a secret (see proxy/access.py, serve/vllm.py)."""
    host = host.strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def urlopen(request: str | urllib.request.Request, timeout: float) -> Any:
    """urllib.request.urlopen, straight to the server when it is on loopback."""
    url = request if isinstance(request, str) else request.full_url
    if is_loopback(url):
        return _DIRECT.open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)
