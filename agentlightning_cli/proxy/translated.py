"""Anthropic Messages and OpenAI Responses: translate to chat completions, forward, translate back.

vLLM's own /v1/messages and /v1/responses return no token ids, so these protocols go through vLLM's chat
endpoint (with token ids on) and the translator modules (anthropic.py, responses.py) shape the answer.
Streams are translated event by event, so the first text reaches the client while vLLM still generates.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from types import ModuleType

from agentlightning_cli.proxy.chat import ChatStreamReader, dumps, loads, plan_chat
from agentlightning_cli.proxy.errors import ProxyReject, TranslationError, error_bytes, upstream_message
from agentlightning_cli.proxy.exchange import UPSTREAM_DOWN, Exchange, log
from agentlightning_cli.proxy.http_server import Response, StreamWriter
from agentlightning_cli.proxy.incoming import parse_json
from agentlightning_cli.proxy.upstream import UpstreamResponse
from agentlightning_cli.proxy.passthrough import _read, collect_json, collected_fields


def _translator(name: str) -> ModuleType:
    try:
        return importlib.import_module(f"agentlightning_cli.proxy.{name}")
    except ImportError as exc:
        raise ProxyReject(501, f"alight: the {name} translator is not available in this build",
                          "client_error") from exc


async def handle_messages(ex: Exchange) -> Response | StreamWriter:
    return await _translated(ex, _translator("anthropic"))


async def handle_responses(ex: Exchange) -> Response | StreamWriter:
    return await _translated(ex, _translator("responses"))


async def handle_count_tokens(ex: Exchange) -> Response | StreamWriter:
    """Anthropic's token counter, answered exactly by vLLM's tokenizer with the chat template applied."""
    module = _translator("anthropic")
    body = parse_json(ex.raw, ex.protocol)
    ex.fields["client_model"] = body.get("model")
    try:
        tokenize = module.count_tokens_request(body)
    except TranslationError as exc:
        raise ProxyReject(400, exc.message) from exc
    tokenize["model"] = ex.proxy.upstream_model(body.get("model"))
    ex.fields["model"] = tokenize["model"]
    resp = await ex.post("/tokenize", dumps(tokenize))
    try:
        raw = await _read(resp)
        if resp.status >= 400:
            message = upstream_message(raw)
            return await ex.reply(resp.status, error_bytes(ex.protocol, resp.status, message), "upstream_error",
                                  upstream_response=raw, error=message)
        data = loads(raw)
        answer = dumps({"input_tokens": data["count"]})
        return await ex.reply(200, answer, "ok", upstream_response=raw, prompt_token_ids=data.get("tokens"))
    finally:
        resp.release()


async def _translated(ex: Exchange, module: ModuleType) -> Response | StreamWriter:
    body = parse_json(ex.raw, ex.protocol)
    ex.stream = bool(body.get("stream"))
    client_model = body.get("model")
    ex.fields["client_model"] = client_model
    try:
        chat_body, dropped = module.request_to_chat(body)
    except TranslationError as exc:
        where = f" (field {exc.field})" if exc.field else ""
        raise ProxyReject(400, f"{exc.message}{where}") from exc
    ex.fields["dropped"] = dropped or None
    chat_body["stream"] = ex.stream
    async with ex.forwarding():
        proxy = ex.proxy
        plan = plan_chat(chat_body, proxy.upstream_model(client_model), proxy.settings.sampling)
        ex.fields.update(model=plan.upstream["model"], sampling=plan.sampling)
        resp = await ex.post("/v1/chat/completions", dumps(plan.upstream))
        try:
            if resp.status >= 400:
                raw = await _read(resp)
                message = upstream_message(raw)
                return await ex.reply(resp.status, error_bytes(ex.protocol, resp.status, message), "upstream_error",
                                      upstream_response=raw, error=message)
            if not ex.stream:
                raw = await _read(resp)
                data = loads(raw)
                answer = module.response_from_chat(data, client_model=client_model, request=body)
                return await ex.reply(200, dumps(answer), "ok", upstream_response=raw,
                                      **collected_fields(collect_json(data)))
            translator = module.StreamTranslator(client_model=client_model, request=body)
            return await _stream(ex, resp, translator)
        finally:
            resp.release()


async def _stream(ex: Exchange, resp: UpstreamResponse, translator: object) -> Response | StreamWriter:
    out = await ex.start_stream()
    reader = ChatStreamReader()
    sent: list[bytes] = []
    outcome, error = "ok", None

    async def send(data: bytes) -> None:
        if data:
            if ex.first_byte_at is None:
                ex.first_byte_at = time.time()
            sent.append(data)
            await out.write(data)

    try:
        reads = resp  # each read: whatever bytes have arrived
        while error is None:
            try:
                data = await reads.__anext__()
            except StopAsyncIteration:
                break
            except UPSTREAM_DOWN as exc:
                outcome, error = "upstream_error", f"upstream stream broke: {exc or type(exc).__name__}"
                break
            translated = []
            for payload in reader.events(data):
                chunk = reader.parse(payload)
                if reader.collected.error:
                    outcome, error = "upstream_error", reader.collected.error
                    break
                if chunk is not None:
                    translated.append(translator.feed(chunk))  # type: ignore[attr-defined]
            # One write per upstream read, as the chat passthrough does: a write per event costs a socket
            # send and a chunk header each, several µs an event, and the events arrived together anyway.
            await send(b"".join(translated))
        if error is None and not reader.done:
            outcome, error = "upstream_error", "upstream ended the stream without [DONE]"
        if error is None:
            await send(translator.finish())  # type: ignore[attr-defined]
        else:
            await send(translator.fail(f"alight: {error}"))  # type: ignore[attr-defined]
        await out.write_eof()
    except (ConnectionResetError, asyncio.CancelledError) as exc:
        outcome, error = "partial", f"client disconnected mid-stream ({type(exc).__name__})"
        if isinstance(exc, asyncio.CancelledError):
            ex.finish_stream(outcome, sent, error=error, **collected_fields(reader.collected))
            raise
    except Exception as exc:  # noqa: BLE001 - headers are sent: record it and end this stream, nothing more
        log.exception("stream failed after the response started")
        outcome, error = "upstream_error", f"alight: internal error mid-stream: {exc!r}"
    ex.finish_stream(outcome, sent, error=error, **collected_fields(reader.collected))
    return out
