"""Which handler serves which path, which protocol a path speaks, and the model list we advertise."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from agentlightning_cli.proxy import gemini, passthrough, translated
from agentlightning_cli.proxy.exchange import Exchange
from agentlightning_cli.proxy.http_server import Response, StreamWriter

Handler = Callable[[Exchange], Awaitable["Response | StreamWriter"]]
ROUTES: dict[tuple[str, str], Handler] = {
    ("POST", "/v1/chat/completions"): passthrough.handle_chat,
    ("POST", "/v1/messages"): translated.handle_translated,
    ("POST", "/v1/messages/count_tokens"): translated.handle_count_tokens,
    ("POST", "/v1/responses"): translated.handle_translated,
}
# Gemini names the model and the method in the path (`/v1beta/models/{model}:generateContent`): matched by
# gemini.ROUTE after the table, one regex per request of no other protocol.
GEMINI_PATHS = ("/v1beta/", "/v1alpha/", "/v1/models/", "/v1/tunedModels/")


def route(method: str, path: str) -> Handler | None:
    """The handler for `method path` (path without the episode prefix and the query), or None."""
    handler = ROUTES.get((method, path.rstrip("/")))
    if handler is None and method == "POST" and path.startswith(GEMINI_PATHS) and gemini.route(path) is not None:
        return translated.handle_gemini
    return handler


def protocol_of(path: str, headers: Any) -> str:
    """The protocol a request speaks, from its path; for unknown paths, guessed from Anthropic's or Google's key
    headers."""
    if path.startswith("/v1/chat/"):
        return "openai-chat"
    if path.startswith("/v1/messages"):
        return "anthropic-messages"
    if path.startswith("/v1/responses"):
        return "openai-responses"
    if path.startswith(("/v1beta/", "/v1alpha/")) or (path.startswith(GEMINI_PATHS) and ":" in path):
        return gemini.PROTOCOL
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic-messages"
    if "x-goog-api-key" in headers:
        return gemini.PROTOCOL
    return "other"


def models_body(names: list[str], protocol: str) -> dict:
    """`GET /v1/models` in the client's protocol."""
    if protocol == "anthropic-messages":
        data = [{"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"} for n in names]
        return {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
    if protocol == gemini.PROTOCOL:
        return {"models": [{"name": f"models/{n}", "displayName": n, "supportedGenerationMethods": [
            "generateContent", "streamGenerateContent", "countTokens"]} for n in names]}
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "alight"} for n in names]}
