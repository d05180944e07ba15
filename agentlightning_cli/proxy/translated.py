"""Anthropic Messages, OpenAI Responses and Gemini: translate to chat completions, forward, translate back.

vLLM's own /v1/messages and /v1/responses return no token ids, so these protocols go through vLLM's chat
endpoint (with token ids on) and the translators (translators.py) shape the answer. Streams are translated
event by event (relay.py), so the first text reaches the client while vLLM still generates.
"""

from __future__ import annotations

from agentlightning_cli.proxy import anthropic, gemini
from agentlightning_cli.proxy.chat import plan_chat
from agentlightning_cli.proxy.continued import continues, exact_chat
from agentlightning_cli.proxy.errors import ProxyReject, TranslationError, error_bytes, upstream_message
from agentlightning_cli.proxy.exchange import Exchange
from agentlightning_cli.proxy.http_server import Response, StreamWriter
from agentlightning_cli.proxy.incoming import parse_json
from agentlightning_cli.proxy.jsonio import dumps
from agentlightning_cli.proxy.relay import collect_json, read_all, read_completion, relay_stream
from agentlightning_cli.proxy.translators import TRANSLATORS
from agentlightning_cli.proxy.upstream import UpstreamResponse


async def handle_translated(ex: Exchange) -> Response | StreamWriter:
    body = parse_json(ex.raw, ex.protocol)
    ex.stream = bool(body.get("stream"))
    return await _translate(ex, body, body.get("model"))


async def handle_gemini(ex: Exchange) -> Response | StreamWriter:
    """Gemini's `models/{model}:{method}`: the model and whether to stream come from the URL, not the body."""
    routed = gemini.route(ex.path.split("?", 1)[0])
    assert routed is not None  # routes.route matched the same path
    model, method = routed
    body = parse_json(ex.raw, ex.protocol)
    if method == "countTokens":
        return await _count_gemini(ex, body, model)
    if method == "streamGenerateContent":
        if "alt=sse" not in ex.request.query_string.split("&"):
            # Without alt=sse Google streams one JSON array; every Google SDK and Gemini CLI ask for SSE.
            raise ProxyReject(400, "alight: streamGenerateContent is served as server-sent events only: add "
                                   "`?alt=sse` to the URL (the google-genai SDKs and Gemini CLI do)")
        ex.stream = True
    return await _translate(ex, {**body, "model": model}, model)


async def _translate(ex: Exchange, body: dict, client_model: str | None) -> Response | StreamWriter:
    translator = TRANSLATORS[ex.protocol]
    ex.fields["client_model"] = client_model
    try:
        chat_body, dropped = translator.request_to_chat(body)
    except TranslationError as exc:
        where = f" (field {exc.field})" if exc.field else ""
        raise ProxyReject(400, f"{exc.message}{where}") from exc
    ex.fields["dropped"] = dropped or None
    chat_body["stream"] = ex.stream
    async with ex.forwarding():
        policy = ex.policy
        plan = plan_chat(chat_body, policy.upstream_model(client_model), policy.sampling, ex.seed,
                         tokens_left=ex.tokens_left)
        ex.fields.update(model=plan.upstream["model"], sampling=plan.sampling)
        if continues(ex, plan):  # continued on the canonical chat form, answered in the client's
            return await exact_chat(
                ex, plan, dropped=dropped,
                answer=lambda data: dumps(translator.response_from_chat(data, client_model=client_model, request=body)),
                stream=lambda: translator.open_stream(client_model=client_model, request=body),
                rewrite=gemini.positional_ids(body) if ex.protocol == gemini.PROTOCOL else None)
        resp = await ex.post("/v1/chat/completions", dumps(plan.upstream))
        try:
            if resp.status >= 400:
                return await _upstream_error(ex, resp)
            if not ex.stream:
                raw = await read_all(resp)
                data = read_completion(raw)
                answer = translator.response_from_chat(data, client_model=client_model, request=body)
                return await ex.reply(200, dumps(answer), "ok", upstream_response=raw, **collect_json(data).fields())
            return await relay_stream(ex, resp, translator.open_stream(client_model=client_model, request=body))
        finally:
            resp.release()


async def handle_count_tokens(ex: Exchange) -> Response | StreamWriter:
    """Anthropic's token counter, answered exactly by vLLM's tokenizer with the chat template applied."""
    body = parse_json(ex.raw, ex.protocol)
    try:
        tokenize = anthropic.count_tokens_request(body)
    except TranslationError as exc:
        raise ProxyReject(400, exc.message) from exc
    return await _count(ex, tokenize, body.get("model"), lambda count: {"input_tokens": count})


async def _count_gemini(ex: Exchange, body: dict, model: str) -> Response:
    """Gemini's `countTokens`, answered like Anthropic's: vLLM's tokenizer on the rendered prompt."""
    try:
        tokenize = gemini.count_tokens_request(body, model)
    except TranslationError as exc:
        where = f" (field {exc.field})" if exc.field else ""
        raise ProxyReject(400, f"{exc.message}{where}") from exc
    return await _count(ex, tokenize, model, lambda count: {"totalTokens": count})


async def _count(ex: Exchange, tokenize: dict, client_model: str | None, answer) -> Response:
    ex.fields["client_model"] = client_model
    tokenize["model"] = ex.policy.upstream_model(client_model)
    ex.fields["model"] = tokenize["model"]
    resp = await ex.post("/tokenize", dumps(tokenize))
    try:
        if resp.status >= 400:
            return await _upstream_error(ex, resp)
        raw = await read_all(resp)
        data = read_completion(raw)
        return await ex.reply(200, dumps(answer(data["count"])), "ok", upstream_response=raw,
                              prompt_token_ids=data.get("tokens"))
    finally:
        resp.release()


async def _upstream_error(ex: Exchange, resp: UpstreamResponse) -> Response:
    """The upstream's error, in the client's protocol, recorded with the upstream's own body."""
    raw = await read_all(resp)
    message = upstream_message(raw)
    return await ex.reply(resp.status, error_bytes(ex.protocol, resp.status, message), "upstream_error",
                          upstream_response=raw, error=message)
