"""Which handler serves which path, which protocol a path speaks, and the model list we advertise."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from agentlightning_cli.proxy import passthrough, translated
from agentlightning_cli.proxy.exchange import Exchange
from agentlightning_cli.proxy.http_server import Response, StreamWriter

Handler = Callable[[Exchange], Awaitable["Response | StreamWriter"]]
ROUTES: dict[tuple[str, str], Handler] = {
    ("POST", "/v1/chat/completions"): passthrough.handle_chat,
    ("POST", "/v1/messages"): translated.handle_translated,
    ("POST", "/v1/messages/count_tokens"): translated.handle_count_tokens,
    ("POST", "/v1/responses"): translated.handle_translated,
}


def protocol_of(path: str, headers: Any) -> str:
    """The protocol a request speaks, from its path; for unknown paths, guessed from Anthropic's headers."""
    if path.startswith("/v1/chat/"):
        return "openai-chat"
    if path.startswith("/v1/messages"):
        return "anthropic-messages"
    if path.startswith("/v1/responses"):
        return "openai-responses"
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic-messages"
    return "other"


def models_body(names: list[str], protocol: str) -> dict:
    """`GET /v1/models` in the client's protocol."""
    if protocol == "anthropic-messages":
        data = [{"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"} for n in names]
        return {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "alight"} for n in names]}
