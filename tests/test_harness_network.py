"""Configured by alight, no harness connects anywhere but the proxy (every connect() traced with strace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness_support import HARNESSES, installed, scripted

from agentlightning_cli.testing.proxy_env import SmokeEnvironment

pytestmark = pytest.mark.harness
PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
ADDR = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')


def inet_targets(trace: str) -> set[tuple[str, str]]:
    """(address, port) of every IPv4/IPv6 connect() in an strace log."""
    found = set()
    for line in trace.splitlines():
        port, addr = PORT.search(line), ADDR.search(line)
        if port and addr:
            found.add((addr.group(1) or addr.group(2), port.group(1)))
    return found


@pytest.mark.parametrize("name", HARNESSES)
async def test_harness_connects_only_to_the_proxy(name: str, tmp_path: Path) -> None:
    recipe, inst = installed(name)
    async with SmokeEnvironment(tmp_path / "run", scripted(recipe)) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", "Create out.txt.", timeout_s=240)
        # In the episode folder: inside the sandbox (the default) that is one of the few writable places.
        trace = tmp_path / "run" / "harness" / spec.episode_id / "connect.strace"
        recipe.command = ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *recipe.command]
        outcome = await env.run(recipe, inst, spec)
        proxy_port = env.proxy.base_url.rsplit(":", 1)[1]
    assert outcome.status == "finished", outcome
    targets = inet_targets(trace.read_text())
    assert ("127.0.0.1", proxy_port) in targets
    # Port 9 on loopback is the closed "proxy" OpenHands' stray HTTP(S) is sent to, so it fails at once.
    assert targets <= {("127.0.0.1", proxy_port), ("127.0.0.1", "9")}, targets
    assert "port=htons(53)" not in trace.read_text()  # not even a DNS lookup
