"""Anthropic Messages and OpenAI Responses: translate to chat completions, forward, translate back.

vLLM's own /v1/messages and /v1/responses return no token ids, so these protocols go through vLLM's chat
endpoint (with token ids on) and the translators (translators.py) shape the answer. Streams are translated
event by event (relay.py), so the first text reaches the client while vLLM still generates.
"""

from __future__ import annotations

from agentlightning_cli.proxy import anthropic
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
    translator = TRANSLATORS[ex.protocol]
    body = parse_json(ex.raw, ex.protocol)
    ex.stream = bool(body.get("stream"))
    client_model = body.get("model")
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
        plan = plan_chat(chat_body, policy.upstream_model(client_model), policy.sampling, ex.seed)
        ex.fields.update(model=plan.upstream["model"], sampling=plan.sampling)
        if continues(ex, plan):  # continued on the canonical chat form, answered in the client's
            return await exact_chat(
                ex, plan, dropped=dropped,
                answer=lambda data: dumps(translator.response_from_chat(data, client_model=client_model, request=body)),
                stream=lambda: translator.open_stream(client_model=client_model, request=body))
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
    ex.fields["client_model"] = body.get("model")
    try:
        tokenize = anthropic.count_tokens_request(body)
    except TranslationError as exc:
        raise ProxyReject(400, exc.message) from exc
    tokenize["model"] = ex.policy.upstream_model(body.get("model"))
    ex.fields["model"] = tokenize["model"]
    resp = await ex.post("/tokenize", dumps(tokenize))
    try:
        if resp.status >= 400:
            return await _upstream_error(ex, resp)
        raw = await read_all(resp)
        data = read_completion(raw)
        answer = dumps({"input_tokens": data["count"]})
        return await ex.reply(200, answer, "ok", upstream_response=raw, prompt_token_ids=data.get("tokens"))
    finally:
        resp.release()


async def _upstream_error(ex: Exchange, resp: UpstreamResponse) -> Response:
    """The upstream's error, in the client's protocol, recorded with the upstream's own body."""
    raw = await read_all(resp)
    message = upstream_message(raw)
    return await ex.reply(resp.status, error_bytes(ex.protocol, resp.status, message), "upstream_error",
                          upstream_response=raw, error=message)
