"""Which handler serves which path, which protocol a path speaks, and the model list we advertise."""

from __future__ import annotations

from typing import Any

from agentlightning_cli.proxy import passthrough, translated

ROUTES = {
    ("POST", "/v1/chat/completions"): passthrough.handle_chat,
    ("POST", "/v1/messages"): translated.handle_messages,
    ("POST", "/v1/messages/count_tokens"): translated.handle_count_tokens,
    ("POST", "/v1/responses"): translated.handle_responses,
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


def advertised_models(proxy: Any) -> list[str]:
    names = [name for name in proxy.settings.model_aliases if "*" not in name]
    if proxy.policy is not None and proxy.policy not in names:
        names.append(proxy.policy)
    return names or ["default"]


def models_body(proxy: Any, protocol: str) -> dict:
    names = advertised_models(proxy)
    if protocol == "anthropic-messages":
        data = [{"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"} for n in names]
        return {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "alight"} for n in names]}
