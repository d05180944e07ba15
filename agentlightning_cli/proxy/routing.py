"""Several model servers behind one proxy: which server an episode's call goes to.

- An episode stays on the server that took its first call: its conversation grows turn by turn, and that
  server's prefix cache already holds the earlier turns (a move would recompute them).
- A new episode goes to the least-loaded server that is in service: fewest requests in flight, then fewest
  episodes assigned, then the order given.
- A server whose connection fails (refused, reset, no answer within the connect timeout) is taken out of service:
  the failing call is answered and recorded as `unreachable` like any unreachable upstream (never retried
  elsewhere behind the harness's back: the recorded call is exactly what the harness saw), its episodes lose their
  place and go to another server at their next call, and it may take new work again after `retry_after_s`
  (a restarted server comes back on its own, in service again once a call gets through). With every server out, calls still go to the
  least recently failed one, so an outage ends as soon as one answers.

One server is the common case and costs one dictionary lookup per call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agentlightning_cli.proxy.upstream import UPSTREAM_DOWN, UpstreamPool, UpstreamResponse


@dataclass
class Server:
    url: str
    pool: UpstreamPool
    episodes: set[str] = field(default_factory=set)
    calls: int = 0
    failures: int = 0
    down_since: float | None = None
    """When it was taken out of service (None: in service)."""
    why: str | None = None


class UpstreamRouter:
    def __init__(self, urls: list[str], limit: int = 256, connect_timeout: float = 30.0, retry_after_s: float = 30.0):
        if not urls:
            raise ValueError("at least one upstream URL is needed")
        self.servers = [Server(url, UpstreamPool(url, limit=limit, connect_timeout=connect_timeout)) for url in urls]
        self.retry_after_s = retry_after_s
        self._by_episode: dict[str, Server] = {}

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def server_for(self, episode_id: str | None) -> Server:
        """The episode's server, or the least-loaded one in service for a new (or moved) episode."""
        if len(self.servers) == 1:
            return self.servers[0]
        server = self._by_episode.get(episode_id) if episode_id is not None else None
        if server is not None and server.down_since is None:
            return server
        now = time.monotonic()
        # Out of service for retry_after_s: may take new work again (back in service once a call gets through).
        live = [s for s in self.servers if s.down_since is None or now - s.down_since >= self.retry_after_s]
        if live:
            chosen = min(live, key=lambda s: (s.pool.in_flight, len(s.episodes)))
        else:
            chosen = min(self.servers, key=lambda s: s.down_since or 0.0)
        if episode_id is not None:
            if server is not None:
                server.episodes.discard(episode_id)
            chosen.episodes.add(episode_id)
            self._by_episode[episode_id] = chosen
        return chosen

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
        server.down_since, server.why = time.monotonic(), why
        for episode_id in server.episodes:
            self._by_episode.pop(episode_id, None)
        server.episodes.clear()

    def forget(self, episode_id: str) -> None:
        """An episode that ended: it no longer counts toward its server's load."""
        server = self._by_episode.pop(episode_id, None)
        if server is not None:
            server.episodes.discard(episode_id)

    def report(self) -> list[dict]:
        """Per server: URL, in service or not (and why), calls sent, failures, episodes now assigned."""
        return [{"url": s.url, "in_service": s.down_since is None, "why": s.why, "calls": s.calls,
                 "failures": s.failures, "episodes": len(s.episodes)} for s in self.servers]

    async def close(self) -> None:
        for s in self.servers:
            await s.pool.close()
