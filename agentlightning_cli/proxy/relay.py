"""vLLM's answer on its way back, for every protocol: read it whole or relay it as a stream through a
StreamTranslator, and collect the token data the record keeps (choice 0: prompt and completion ids, logprobs).

The chat passthrough and the translated protocols differ only in the translator they hand `relay_stream`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from agentlightning_cli.proxy.errors import ProxyReject
from agentlightning_cli.proxy.exchange import UPSTREAM_DOWN, Exchange, log
from agentlightning_cli.proxy.http_server import StreamWriter
from agentlightning_cli.proxy.jsonio import loads
from agentlightning_cli.proxy.sse import SSEDecoder
from agentlightning_cli.proxy.translators import StreamTranslator
from agentlightning_cli.proxy.upstream import UpstreamResponse


@dataclass
class Collected:
    """Token data gathered from vLLM's answer for the record (choice 0 only)."""

    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict | None = None
    error: str | None = None

    def add_choice(self, choice: dict) -> None:
        ids = choice.get("token_ids")
        if ids:
            self.completion_token_ids.extend(ids)
        logprobs = choice.get("logprobs")
        if logprobs and logprobs.get("content"):
            self.completion_logprobs.extend([entry["logprob"] for entry in logprobs["content"]])
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def add_chunk(self, chunk: dict) -> None:
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0:
                self.add_choice(choice)
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("error"):
            err = chunk["error"]
            self.error = err.get("message") if isinstance(err, dict) else str(err)

    def fields(self) -> dict:
        """The record's token fields. Not dataclasses.asdict: it deep-copies every token id (measured: ~6 ms
        per 1.5k-token call). `error` is left out: callers decide what the record's error says."""
        return {"prompt_token_ids": self.prompt_token_ids, "completion_token_ids": self.completion_token_ids or None,
                "completion_logprobs": self.completion_logprobs or None, "finish_reason": self.finish_reason,
                "usage": self.usage}


def collect_json(data: dict) -> Collected:
    """Token data of a whole (non-streamed) chat completion."""
    col = Collected(prompt_token_ids=data.get("prompt_token_ids"), usage=data.get("usage"))
    for choice in data.get("choices") or ():
        if choice.get("index", 0) == 0:
            col.add_choice(choice)
    return col


async def read_all(resp: UpstreamResponse) -> bytes:
    try:
        return await resp.read()
    except UPSTREAM_DOWN as exc:
        raise ProxyReject(502, f"alight: upstream closed the connection: {exc}", "unreachable") from exc


def read_completion(raw: bytes) -> dict:
    """A whole chat completion from the upstream; one that is not a JSON object is the upstream's fault."""
    try:
        data = loads(raw)
    except ValueError as exc:
        raise ProxyReject(502, "alight: upstream answered with invalid JSON", "upstream_error") from exc
    if not isinstance(data, dict):
        raise ProxyReject(502, "alight: upstream answered JSON that is not an object", "upstream_error")
    return data


async def relay_stream(ex: Exchange, resp: UpstreamResponse, translator: StreamTranslator) -> StreamWriter:
    """Relay each upstream read as soon as it completes events; record whatever happened at the end."""
    out = await ex.start_stream()
    decoder = SSEDecoder()
    col = Collected()
    sent: list[bytes] = []
    outcome, error = "ok", None
    done = False
    answered = False  # the translator's final events are written: the client has its whole answer
    try:
        while error is None:
            try:
                data = await resp.__anext__()  # each read: whatever bytes have arrived
            except StopAsyncIteration:
                break
            except UPSTREAM_DOWN as exc:
                if not done:  # after [DONE] the client has its whole answer
                    outcome, error = "upstream_error", f"upstream stream broke: {exc or type(exc).__name__}"
                break
            parts = []
            for payload in decoder.payloads(data):
                if payload == b"[DONE]":
                    done = True
                    parts.append(translator.finish())
                    continue
                try:
                    chunk = loads(payload)
                except ValueError:
                    continue
                if type(chunk) is not dict:
                    continue
                col.add_chunk(chunk)
                if col.error:
                    outcome, error = "upstream_error", col.error
                    break
                parts.append(translator.feed(chunk))
            # One write per upstream read: a write per event costs a socket send and a chunk header each,
            # several µs an event, and the events arrived together anyway.
            chunk_out = b"".join(parts)
            if chunk_out:
                if ex.first_byte_at is None:
                    ex.first_byte_at = time.time()
                sent.append(chunk_out)
                await out.write(chunk_out)
            answered = done and error is None
        if error is None and not done:
            outcome, error = "upstream_error", "upstream ended the stream without [DONE]"
        if error is not None:
            tail = translator.fail(f"alight: {error}")
            sent.append(tail)
            await out.write(tail)
        await out.write_eof()
    except (ConnectionResetError, asyncio.CancelledError) as exc:
        if answered and isinstance(exc, ConnectionResetError):
            # Codex closes (a reset) as soon as it has `response.completed`, while the upstream's end of stream
            # and our closing chunk are still to come: nothing the client needed was lost.
            log.debug("client closed after its whole answer")
        else:
            outcome, error = "partial", f"client disconnected mid-stream ({type(exc).__name__})"
        if isinstance(exc, asyncio.CancelledError):
            ex.finish_stream(outcome, sent, error=error, **col.fields())
            raise
    except Exception as exc:  # noqa: BLE001 - headers are sent: record it and end this stream, nothing more
        log.exception("stream failed after the response started")
        outcome, error = "internal_error", f"alight: internal error mid-stream: {exc!r}"
    ex.finish_stream(outcome, sent, error=error, **col.fields())
    return out
