"""One client request on its way through the proxy: its record, its upstream call, its answer.

An Exchange is given the collaborators it uses (gate, budgets, recorder, upstream pool, model policy), built
once per proxy start; it never sees the Proxy itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from agentlightning_cli.proxy.control import Budgets, Gate, ModelPolicy
from agentlightning_cli.proxy.errors import ProxyReject, error_bytes
from agentlightning_cli.proxy.http_server import Request, Response, StreamWriter
from agentlightning_cli.proxy.recorder import Recorder
from agentlightning_cli.proxy.routing import UpstreamRouter
from agentlightning_cli.proxy.upstream import UPSTREAM_DOWN, UpstreamResponse
from agentlightning_cli.store import CallRecord

log = logging.getLogger("alight.proxy")
JSON_TYPE = "application/json"
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_HIDDEN_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")
# Connection refused or reset, a broken or malformed answer (UpstreamBroken), a connect timeout.


@dataclass(frozen=True, slots=True)
class Collaborators:
    gate: Gate
    budgets: Budgets
    recorder: Recorder
    upstream: UpstreamRouter
    policy: ModelPolicy
    continuation: Any = None
    """proxy/continued.ExactContinuation under `proxy.continuation: exact`; None: every call is rendered."""


def unavailable(protocol: str, exc: BaseException | None) -> Response:
    """The 503 for traffic the proxy cannot record (fail closed)."""
    why = f"{type(exc).__name__}: {exc}" if exc else "unknown"
    msg = f"alight: recording to the store failed, so the proxy refuses traffic it cannot record ({why})"
    return Response(503, error_bytes(protocol, 503, msg))


class Exchange:
    def __init__(self, parts: Collaborators, request: Request, episode_id: str, path: str, protocol: str,
                 started_at: float):
        self.parts, self.request = parts, request
        self.policy = parts.policy
        self.episode_id, self.path, self.protocol = episode_id, path, protocol
        self.started_at = started_at
        self.first_byte_at: float | None = None
        self.raw = b""
        self.stream = False
        self.seed: int | None = None
        """The vLLM seed for this call (seeded runs only), drawn when it passes the budget check."""
        self.tokens_left: int | None = None
        """The episode's completion-token budget left when this call passed the check (None: no token budget)."""
        self.fields: dict[str, Any] = {}
        """Record fields known so far (upstream_request, model, sampling, client_model, dropped, ...)."""

    def record(self, outcome: str, http_status: int, **fields: Any) -> CallRecord:
        headers = {k: v for k, v in self.request.headers.items() if k.lower() not in _HIDDEN_HEADERS}
        data = {**self.fields, **fields}
        ids, usage = data.get("completion_token_ids"), data.get("usage")
        if ids:
            self.parts.budgets.add_tokens(self.episode_id, len(ids))
        elif isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.parts.budgets.add_tokens(self.episode_id, usage["completion_tokens"])  # an upstream without ids
        return CallRecord(
            episode_id=self.episode_id, protocol=self.protocol, method=self.request.method, path=self.path,
            status=outcome, http_status=http_status, stream=self.stream, client_request=self.raw,
            client_headers=headers, started_at=self.started_at, ended_at=time.time(),
            first_byte_at=self.first_byte_at, **data,
        )

    async def reply(self, http_status: int, body: bytes, outcome: str, content_type: str = JSON_TYPE,
                    **fields: Any) -> Response:
        """Answer only once the record is durable (fail closed: a failed write becomes a 503)."""
        record = self.record(outcome, http_status, response=body, **fields)
        waiter = asyncio.get_running_loop().create_future()
        self.parts.recorder.write_soon(record, waiter)
        try:
            await waiter
        except Exception as exc:  # noqa: BLE001 - any store failure means we must not serve this answer
            return unavailable(self.protocol, exc)
        return Response(http_status, body, content_type)

    async def reject(self, exc: ProxyReject) -> Response:
        body = error_bytes(self.protocol, exc.status, exc.message, exc.kind)
        return await self.reply(exc.status, body, exc.outcome, error=exc.message)

    def forwarding(self) -> "_Forwarding":
        """`async with`: wait while paused, count as in flight, and refuse an episode that is over budget.
        A plain class rather than @asynccontextmanager: no generator to drive on every request."""
        return _Forwarding(self)

    async def post(self, path: str, body: bytes) -> UpstreamResponse:
        """POST to vLLM; an unreachable upstream becomes a 502 recorded as `unreachable`."""
        self.fields["upstream_request"] = body
        try:
            return await self.parts.upstream.post(path, body, episode_id=self.episode_id)
        except UPSTREAM_DOWN as exc:
            raise ProxyReject(502, f"alight: upstream model server unreachable: {exc or type(exc).__name__}",
                              "unreachable") from exc

    async def start_stream(self) -> StreamWriter:
        """The stream's status and headers sent. A client that hung up while the upstream was still on its first
        byte (a long prefill: a harness that gives up and retries) is a `partial` call, recorded by the request's
        handler like any refusal; the caller's upstream stream is closed on the way out."""
        try:
            return self.request.start_stream(200, SSE_HEADERS)
        except ConnectionResetError as exc:
            raise ProxyReject(499, "alight: client disconnected before the stream started", "partial") from exc

    def finish_stream(self, outcome: str, sent: list[bytes], **fields: Any) -> None:
        """A stream's record is written after its last byte; a failure there flips the proxy to 503s."""
        record = self.record(outcome, 200, response=b"".join(sent), **fields)
        # The writer thread, not the loop: nobody waits for it, and a long stream's record (all its events,
        # compressed) would hold up the first bytes of streams starting meanwhile (bench/proxy.py TTFB).
        self.parts.recorder.submit(record)


class _Forwarding:
    __slots__ = ("ex",)

    def __init__(self, ex: Exchange):
        self.ex = ex

    async def __aenter__(self) -> None:
        ex = self.ex
        gate, budgets = ex.parts.gate, ex.parts.budgets
        await gate.enter()
        try:
            reason = budgets.check(ex.episode_id)
            if reason is not None:
                budgets.refused(ex.episode_id, reason)
                raise ProxyReject(400, f"alight: episode budget exceeded: {reason}", "budget_exceeded")
            ex.fields.setdefault("model", ex.policy.name)
            ex.seed = ex.policy.seeds.next(ex.episode_id)
            ex.tokens_left = budgets.tokens_left(ex.episode_id)
        except BaseException:
            gate.leave()
            raise

    async def __aexit__(self, *exc_info: Any) -> None:
        self.ex.parts.gate.leave()
