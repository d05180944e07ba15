"""POST /v1/chat/completions: forward to vLLM with token ids on, record them, strip them on the way back."""

from __future__ import annotations

import asyncio
import time

from agentlightning_cli.proxy.chat import ChatStreamFilter, Collected, dumps, loads, plan_chat, strip_response
from agentlightning_cli.proxy.errors import ProxyReject, error_bytes, upstream_message
from agentlightning_cli.proxy.exchange import UPSTREAM_DOWN, Exchange, log
from agentlightning_cli.proxy.http_server import Response, StreamWriter
from agentlightning_cli.proxy.incoming import parse_json
from agentlightning_cli.proxy.upstream import UpstreamResponse


def collected_fields(col: Collected) -> dict:
    # Not dataclasses.asdict: it deep-copies every token id (measured: ~6 ms per 1.5k-token call).
    # `error` is left out: callers decide what the record's error says.
    return {"prompt_token_ids": col.prompt_token_ids, "completion_token_ids": col.completion_token_ids or None,
            "completion_logprobs": col.completion_logprobs or None, "finish_reason": col.finish_reason,
            "usage": col.usage}


def collect_json(data: dict) -> Collected:
    col = Collected(prompt_token_ids=data.get("prompt_token_ids"), usage=data.get("usage"))
    for choice in data.get("choices") or ():
        if choice.get("index", 0) == 0:
            col.add_choice(choice)
    return col


async def handle_chat(ex: Exchange) -> Response | StreamWriter:
    body = parse_json(ex.raw, ex.protocol)
    ex.stream = bool(body.get("stream"))
    ex.fields["client_model"] = body.get("model")
    async with ex.forwarding():
        proxy = ex.proxy
        plan = plan_chat(body, proxy.upstream_model(body.get("model")), proxy.settings.sampling)
        ex.fields.update(model=plan.upstream["model"], sampling=plan.sampling)
        resp = await ex.post("/v1/chat/completions", dumps(plan.upstream))
        try:
            if resp.status >= 400:
                raw = await _read(resp)
                return await ex.reply(resp.status, raw, "upstream_error", upstream_response=raw,
                                      error=upstream_message(raw))
            if not plan.stream:
                raw = await _read(resp)
                try:
                    data = loads(raw)
                except ValueError as exc:
                    raise ProxyReject(502, "alight: upstream answered with invalid JSON", "upstream_error") from exc
                col = collect_json(data)
                strip_response(data, plan)
                return await ex.reply(200, dumps(data), "ok", upstream_response=raw, **collected_fields(col))
            return await _stream(ex, resp, ChatStreamFilter(plan))
        finally:
            resp.release()


async def _read(resp: UpstreamResponse) -> bytes:
    try:
        return await resp.read()
    except UPSTREAM_DOWN as exc:
        raise ProxyReject(502, f"alight: upstream closed the connection: {exc}", "unreachable") from exc


async def _stream(ex: Exchange, resp: UpstreamResponse, filt: ChatStreamFilter) -> Response | StreamWriter:
    """Relay each upstream read as soon as it completes events; record whatever happened at the end."""
    out = await ex.start_stream()
    sent: list[bytes] = []
    outcome, error = "ok", None
    try:
        reads = resp  # each read: whatever bytes have arrived
        while True:
            try:
                data = await reads.__anext__()
            except StopAsyncIteration:
                break
            except UPSTREAM_DOWN as exc:
                outcome, error = "upstream_error", f"upstream stream broke: {exc or type(exc).__name__}"
                break
            chunk = filt.feed(data)
            if chunk:
                if ex.first_byte_at is None:
                    ex.first_byte_at = time.time()
                sent.append(chunk)
                await out.write(chunk)
        if outcome == "ok" and not filt.done:
            outcome, error = "upstream_error", "upstream ended the stream without [DONE]"
        if filt.collected.error and outcome == "ok":
            outcome, error = "upstream_error", filt.collected.error
        if outcome != "ok" and not filt.collected.error:
            tail = b"data: " + error_bytes(ex.protocol, 502, f"alight: {error}") + b"\n\n"
            sent.append(tail)
            await out.write(tail)
        await out.write_eof()
    except (ConnectionResetError, asyncio.CancelledError) as exc:
        outcome, error = "partial", f"client disconnected mid-stream ({type(exc).__name__})"
        if isinstance(exc, asyncio.CancelledError):
            ex.finish_stream(outcome, sent, error=error, **collected_fields(filt.collected))
            raise
    except Exception as exc:  # noqa: BLE001 - headers are sent: record it and end this stream, nothing more
        log.exception("stream failed after the response started")
        outcome, error = "upstream_error", f"alight: internal error mid-stream: {exc!r}"
    ex.finish_stream(outcome, sent, error=error, **collected_fields(filt.collected))
    return out
