"""Errors the proxy answers itself, shaped for the protocol the client speaks (one shape per protocol, here)."""

from __future__ import annotations

from typing import Callable

from agentlightning_cli.errors import upstream_error_message
from agentlightning_cli.proxy.jsonio import dumps

_CHAT_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "invalid_request_error", 429: "rate_limit_error",
               502: "upstream_error", 503: "service_unavailable"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}
_RESPONSES_TYPES = {401: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_error"}
_RESPONSES_CODES = {401: "invalid_api_key", 404: "not_found", 413: "request_too_large", 429: "rate_limit_exceeded"}
# google.rpc.Code names Google's APIs put in `error.status` for each HTTP status.
_GEMINI_STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                    409: "ABORTED", 413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
                    499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                    504: "DEADLINE_EXCEEDED"}


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


def chat_error_body(status: int, message: str, kind: str | None = None, param: str | None = None) -> dict:
    """OpenAI chat completions' error JSON (also for paths of no known protocol)."""
    return {"error": {"message": message, "type": kind or _CHAT_TYPES.get(status, "api_error"), "param": param,
                      "code": status}}


def anthropic_error_body(status: int, message: str, kind: str | None = None, param: str | None = None) -> dict:
    """Anthropic's error JSON; `param` (the offending field) is folded into the message."""
    if kind is None:
        kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    if param:
        message = f"{param}: {message}"
    return {"type": "error", "error": {"type": kind, "message": message}}


def responses_error_body(status: int, message: str, kind: str | None = None, param: str | None = None) -> dict:
    """OpenAI Responses' error JSON: {"error": {"message", "type", "param", "code"}}."""
    if kind is None:
        kind = _RESPONSES_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": _RESPONSES_CODES.get(status)}}


def gemini_error_body(status: int, message: str, kind: str | None = None, param: str | None = None) -> dict:
    """Google's error JSON: {"error": {"code", "message", "status"}}; `param` is folded into the message and
    `kind` (another protocol's error type) has no place in it."""
    if param:
        message = f"{param}: {message}"
    code = _GEMINI_STATUSES.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
    return {"error": {"code": status, "message": message, "status": code}}


ERROR_BODIES: dict[str, Callable[..., dict]] = {"anthropic-messages": anthropic_error_body,
                                               "openai-responses": responses_error_body,
                                               "gemini-generate-content": gemini_error_body}


def error_body(protocol: str, status: int, message: str, kind: str | None = None) -> dict:
    return ERROR_BODIES.get(protocol, chat_error_body)(status, message, kind)


def error_bytes(protocol: str, status: int, message: str, kind: str | None = None) -> bytes:
    return dumps(error_body(protocol, status, message, kind))


def upstream_message(raw: bytes) -> str:
    """The human message inside an upstream (vLLM) error body, or the raw text."""
    return upstream_error_message(raw, limit=2000) or "upstream error"
