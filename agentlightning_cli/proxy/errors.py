"""Errors the proxy answers itself, shaped for the protocol the client speaks."""

from __future__ import annotations

import importlib
import json

OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "invalid_request_error", 429: "rate_limit_error",
                502: "upstream_error", 503: "service_unavailable"}
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                   500: "api_error", 502: "api_error", 503: "overloaded_error", 529: "overloaded_error"}


class TranslationError(ValueError):
    """A request the translator cannot express as a chat completion; answered as a 400."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class ProxyReject(Exception):
    """Raised inside a request's handling to answer `status` with a protocol-shaped error and record `outcome`."""

    def __init__(self, status: int, message: str, outcome: str = "bad_request", kind: str | None = None):
        super().__init__(message)
        self.status, self.message, self.outcome, self.kind = status, message, outcome, kind


def _translator(protocol: str):
    name = {"anthropic-messages": "anthropic", "openai-responses": "responses"}.get(protocol)
    if name is None:
        return None
    try:
        return importlib.import_module(f"agentlightning_cli.proxy.{name}")
    except ImportError:
        return None


def error_body(protocol: str, status: int, message: str, kind: str | None = None) -> dict:
    module = _translator(protocol)
    if module is not None and hasattr(module, "error_body"):
        return module.error_body(status, message, kind)
    if protocol == "anthropic-messages":
        return {"type": "error", "error": {"type": kind or ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    return {"error": {"message": message, "type": kind or OPENAI_TYPES.get(status, "api_error"), "param": None,
                      "code": status}}


def error_bytes(protocol: str, status: int, message: str, kind: str | None = None) -> bytes:
    return json.dumps(error_body(protocol, status, message, kind), ensure_ascii=False).encode()


def upstream_message(raw: bytes) -> str:
    """The human message inside an upstream (vLLM) error body, or the raw text."""
    try:
        data = json.loads(raw)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    except (ValueError, AttributeError):
        pass
    return raw.decode("utf-8", "replace")[:2000] or "upstream error"
