"""Several model servers behind one proxy: which server an episode's call goes to.

- An episode stays on the server that took its first call: its conversation grows turn by turn, and that
  server's prefix cache already holds the earlier turns (a move would recompute them).
- A new episode goes to the least-loaded server that is in service: fewest requests in flight, then fewest
  episodes assigned, then the order given. An episode that ended is forgotten (`forget`): it no longer weighs on
  its server; the episodes each server took stay counted in `report`.
- A server whose connection fails (refused, reset, no answer within the connect timeout) is taken out of service:
  the failing call is answered and recorded as `unreachable` like any unreachable upstream (never retried
  elsewhere behind the harness's back: the recorded call is exactly what the harness saw), and its episodes lose
  their place and go to another server at their next call.
- Coming back. A server alight started whose process has exited (`exited` says so) stays out for good: nothing
  will answer there again. Any other server, after `retry_after_s`, is asked `GET /v1/models` by the router
  itself (a health probe, in the background); only an answer of 200 puts it back in service, so an idle server
  that is still dead is never made the first pick and no episode's call pays for finding out (before, a new
  episode's call got a 502 every `retry_after_s`). A failed probe starts another wait. With every server out,
  calls still go to the least recently failed one that may come back, so an outage ends as soon as one answers.

One server is the common case and costs one dictionary lookup per call.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from agentlightning_cli.proxy.upstream import UPSTREAM_DOWN, UpstreamPool, UpstreamResponse

PROBE_TIMEOUT_S = 10.0


@dataclass
class Server:
    url: str
    pool: UpstreamPool
    episodes: set[str] = field(default_factory=set)
    calls: int = 0
    failures: int = 0
    episodes_taken: int = 0
    """Episodes that were ever placed here (an episode moved after a failure counts on both)."""
    down_since: float | None = None
    """When it was taken out of service (None: in service)."""
    why: str | None = None
    exited: bool = False
    """Its process (a replica alight started) has exited: out for good."""
    probe: asyncio.Task | None = None


class UpstreamRouter:
    def __init__(self, urls: list[str], limit: int = 256, connect_timeout: float = 30.0, retry_after_s: float = 30.0,
                 api_key: str | None = None, exited: Callable[[str], int | None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        """`exited(url)`: the exit code of the process serving `url` (a replica alight started), None while it runs
        or when alight did not start it. `clock`: monotonic seconds (tests pass their own)."""
        if not urls:
            raise ValueError("at least one upstream URL is needed")
        self.servers = [Server(url, UpstreamPool(url, limit=limit, connect_timeout=connect_timeout, api_key=api_key))
                        for url in urls]
        self.retry_after_s = retry_after_s
        self.api_key = api_key
        self._exited = exited
        self.clock = clock
        self._by_episode: dict[str, Server] = {}

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def server_for(self, episode_id: str | None) -> Server:
        """The episode's server, or the least-loaded one in service for a new (or moved) episode."""
        if len(self.servers) == 1:
            return self.servers[0]
        server = self._by_episode.get(episode_id) if episode_id is not None else None
        if server is not None and server.down_since is None and self._exit_code(server) is None:
            return server  # (a replica alight started is asked whether its process lives: one waitpid per call)
        self._look_at_the_out()
        live = [s for s in self.servers if s.down_since is None]
        if live:
            chosen = min(live, key=lambda s: (s.pool.in_flight, len(s.episodes)))
        else:  # all out: the one that failed longest ago, among those that may come back
            chosen = min(self.servers, key=lambda s: (s.exited, s.down_since or 0.0))
        if episode_id is not None:
            if server is not None:
                server.episodes.discard(episode_id)
            chosen.episodes.add(episode_id)
            chosen.episodes_taken += 1
            self._by_episode[episode_id] = chosen
        return chosen

    def _look_at_the_out(self) -> None:
        """Before a new episode is placed: a replica whose process exited is out for good (asked of every server,
        so an idle dead one is never picked); one out for retry_after_s that may come back is probed."""
        now = self.clock()
        for s in self.servers:
            if s.exited or self._exit_code(s) is not None:
                continue
            if s.down_since is not None and s.probe is None and now - s.down_since >= self.retry_after_s:
                s.probe = asyncio.get_running_loop().create_task(self._probe(s))

    def _exit_code(self, server: Server) -> int | None:
        code = self._exited(server.url) if self._exited is not None else None
        if code is not None and not server.exited:
            server.exited = True
            why = f"its process exited with code {code}"
            if server.down_since is None:
                self.take_out(server, why)  # its episodes move at their next call, as after a failed one
            else:
                server.why = why
        return code

    async def _probe(self, server: Server) -> None:
        """Back in service only if `GET /v1/models` answers 200; otherwise out for another retry_after_s."""
        try:
            ok = await health_probe(server.url, self.api_key, timeout_s=min(PROBE_TIMEOUT_S, self.retry_after_s or 1.0))
        finally:
            server.probe = None
        if server.down_since is None:
            return  # a call got through meanwhile
        if ok:
            server.down_since = None
        else:
            server.down_since = self.clock()

    async def probes(self) -> None:
        """Wait for the health probes under way (tests; stop())."""
        pending = [s.probe for s in self.servers if s.probe is not None]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def post(self, path: str, body: bytes, content_type: str = "application/json",
                   episode_id: str | None = None) -> UpstreamResponse:
        server = self.server_for(episode_id)
        server.calls += 1
        try:
            response = await server.pool.post(path, body, content_type)
        except UPSTREAM_DOWN as exc:
            if len(self.servers) > 1:
                self.take_out(server, f"{type(exc).__name__}: {exc}")
            raise
        server.down_since = None  # answered: in service (again)
        return response

    def take_out(self, server: Server, why: str) -> None:
        """Out of service; its episodes move at their next call."""
        server.failures += 1
        server.down_since, server.why = self.clock(), why
        self._exit_code(server)  # a replica whose process is gone says so, and stays out
        for episode_id in server.episodes:
            self._by_episode.pop(episode_id, None)
        server.episodes.clear()

    def forget(self, episode_id: str) -> None:
        """An episode that ended: it no longer counts toward its server's load."""
        server = self._by_episode.pop(episode_id, None)
        if server is not None:
            server.episodes.discard(episode_id)

    def report(self) -> list[dict]:
        """Per server: URL, in service or not (and why), calls sent, failures, episodes it took (all, and those
        assigned now)."""
        return [{"url": s.url, "in_service": s.down_since is None, "why": s.why, "calls": s.calls,
                 "failures": s.failures, "episodes_taken": s.episodes_taken, "episodes": len(s.episodes),
                 "exited": s.exited} for s in self.servers]

    async def close(self) -> None:
        for s in self.servers:
            if s.probe is not None:
                s.probe.cancel()
        await self.probes()
        for s in self.servers:
            await s.pool.close()


async def health_probe(url: str, api_key: str | None, timeout_s: float) -> bool:
    """Whether the server at `url` answers `GET /v1/models` with 200 within `timeout_s` (any error: False)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
    head = (f"GET {parts.path.rstrip('/')}/v1/models HTTP/1.1\r\nHost: {parts.netloc}\r\n{auth}"
            "Connection: close\r\n\r\n").encode()

    async def ask() -> bool:
        reader, writer = await asyncio.open_connection(parts.hostname, port, ssl=parts.scheme == "https" or None)
        try:
            writer.write(head)
            status_line = await reader.readline()
            return status_line.split(b" ")[1:2] == [b"200"]
        finally:
            writer.close()

    try:
        return await asyncio.wait_for(ask(), timeout_s)
    except (OSError, asyncio.TimeoutError, ValueError):
        return False
