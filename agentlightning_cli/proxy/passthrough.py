"""POST /v1/chat/completions: forward to vLLM with token ids on, record them, strip them on the way back."""

from __future__ import annotations

from agentlightning_cli.proxy.chat import ChatPlan, plan_chat, strip_response
from agentlightning_cli.proxy.continued import continues, exact_chat
from agentlightning_cli.proxy.errors import error_bytes, upstream_message
from agentlightning_cli.proxy.exchange import Exchange
from agentlightning_cli.proxy.http_server import Response, StreamWriter
from agentlightning_cli.proxy.incoming import parse_json
from agentlightning_cli.proxy.jsonio import dumps
from agentlightning_cli.proxy.relay import collect_json, read_all, read_completion, relay_stream

_DONE = b"data: [DONE]\n\n"


class ChatPassthrough:
    """The chat protocol's StreamTranslator: each chunk as the client asked for it (see chat.py)."""

    __slots__ = ("plan",)

    def __init__(self, plan: ChatPlan) -> None:
        self.plan = plan

    def feed(self, chunk: dict) -> bytes:
        if not chunk.get("choices") and chunk.get("usage") and not self.plan.want_usage:
            return b""  # the usage chunk we asked for ourselves
        strip_response(chunk, self.plan)
        return b"data: " + dumps(chunk) + b"\n\n"

    def finish(self) -> bytes:
        return _DONE

    def fail(self, message: str) -> bytes:
        return b"data: " + error_bytes("openai-chat", 502, message) + b"\n\n"


def _stripped(data: dict, plan: ChatPlan) -> bytes:
    strip_response(data, plan)
    return dumps(data)


async def handle_chat(ex: Exchange) -> Response | StreamWriter:
    body = parse_json(ex.raw, ex.protocol)
    ex.stream = bool(body.get("stream"))
    ex.fields["client_model"] = body.get("model")
    async with ex.forwarding():
        policy = ex.policy
        plan = plan_chat(body, policy.upstream_model(body.get("model")), policy.sampling, ex.seed,
                         tokens_left=ex.tokens_left)
        ex.fields.update(model=plan.upstream["model"], sampling=plan.sampling)
        if continues(ex, plan):
            return await exact_chat(ex, plan, dropped=None, answer=lambda data: _stripped(data, plan),
                                    stream=lambda: ChatPassthrough(plan))
        resp = await ex.post("/v1/chat/completions", dumps(plan.upstream))
        try:
            if resp.status >= 400:
                raw = await read_all(resp)
                return await ex.reply(resp.status, raw, "upstream_error", upstream_response=raw,
                                      error=upstream_message(raw))
            if not plan.stream:
                raw = await read_all(resp)
                data = read_completion(raw)
                col = collect_json(data)
                strip_response(data, plan)
                return await ex.reply(200, dumps(data), "ok", upstream_response=raw, **col.fields())
            return await relay_stream(ex, resp, ChatPassthrough(plan))
        finally:
            resp.release()
