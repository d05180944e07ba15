"""Reading a client request: size limit, Content-Encoding, UTF-8 and JSON checks, per-protocol shape checks."""

from __future__ import annotations

import json
import zlib
from typing import Any

import orjson

from agentlightning_cli.proxy.errors import ProxyReject
from agentlightning_cli.proxy.http_server import Request

# Deepest nesting of arrays and objects a request body may have: orjson's encoder limit, which every forwarded
# body and every record goes through, so the check costs one C-speed encode (measured: about a quarter of the
# parse, where a Python walk of the parsed body costs more than the parse). Real requests stay far below (tool
# schemas nest ~10 levels); the bound keeps every later step (the json module fallbacks, the store) away from
# Python's recursion limit (parsing alone would allow 1024).
NESTING_LIMIT = 254

# Fields a request of each protocol cannot do without.
REQUIRED: dict[str, tuple[str, type | tuple[type, ...]]] = {"openai-chat": ("messages", list), "anthropic-messages": ("messages", list),
            "openai-responses": ("input", (str, list))}


def _too_big(limit: int) -> ProxyReject:
    return ProxyReject(413, f"request body is larger than the proxy's limit of {limit} bytes "
                            "(proxy.max_body_bytes)", "bad_request")


def _too_deep() -> ProxyReject:
    return ProxyReject(400, f"request body is nested deeper than {NESTING_LIMIT} levels of arrays and objects")


def _reject_constant(name: str) -> float:
    raise ProxyReject(400, f"request body is not valid JSON: {name} is not a JSON number (send null or a finite "
                           "number)")


def _parse_fallback(raw: bytes, orjson_error: orjson.JSONDecodeError) -> Any:
    """What orjson refuses: past its nesting limit, not UTF-8, NaN/Infinity, ints past 64 bits (valid JSON the
    json module reads), or not JSON at all (the json module's message says where)."""
    message = str(orjson_error)
    if "depth limit" in message or "recursion" in message.lower():
        raise _too_deep()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProxyReject(400, f"request body is not valid UTF-8 (byte {exc.start})") from exc
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise _too_deep() from exc
    except ValueError as exc:
        raise ProxyReject(400, f"request body is not valid JSON: {exc}") from exc


def _too_deeply_nested(body: Any) -> bool:
    try:
        orjson.dumps(body)  # refuses more than NESTING_LIMIT levels ("Recursion limit reached")
        return False
    except orjson.JSONEncodeError as exc:
        if "recursion" in str(exc).lower():
            return True
    return _nested_deeper(body, NESTING_LIMIT)  # refused for something else (ints past 64 bits): walk it


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether arrays/objects nest more than `limit` levels (iterative: a deep body must not recurse here)."""
    if type(value) is dict:
        children = list(value.values())
    elif type(value) is list:
        children = value
    else:
        return False
    stack = [(children, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        items, depth = pop()
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                if depth >= limit:
                    return True
                push((item.values() if kind is dict else item, depth + 1))
    return False


def read_body(request: Request, limit: int) -> bytes:
    """The body as sent, decompressed when Content-Encoding says so; 413 past `limit` either way (the server
    stops buffering a body at the limit and flags the request)."""
    if request.too_large:
        raise _too_big(limit)
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return request.body
    return decode(request.body, encoding, limit)


def decode(raw: bytes, encoding: str, limit: int) -> bytes:
    try:
        if encoding in ("gzip", "x-gzip", "deflate"):
            wbits = 16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS
            inflater = zlib.decompressobj(wbits)
            out = inflater.decompress(raw, limit + 1)
            if not inflater.eof and len(out) <= limit:
                raise ValueError("the compressed stream is truncated")
        elif encoding == "zstd":
            import zstandard

            try:
                with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
                    out = reader.read(limit + 1)
            except zstandard.ZstdError as exc:
                raise ValueError(str(exc)) from exc
        else:
            raise ProxyReject(415, f"unsupported Content-Encoding {encoding!r} (use gzip, zstd or none)")
    except (zlib.error, ValueError, OSError) as exc:
        if isinstance(exc, ProxyReject):
            raise
        raise ProxyReject(400, f"request body is not valid {encoding}: {exc}") from exc
    if len(out) > limit:
        raise _too_big(limit)
    return out


def parse_json(raw: bytes, protocol: str) -> dict[str, Any]:
    """The body as a JSON object, checked for the fields its protocol needs; ProxyReject(400) otherwise.
    Stricter than Python's json module: NaN/Infinity are not JSON, and nesting stops at NESTING_LIMIT."""
    try:
        body = orjson.loads(raw)  # also rejects invalid UTF-8, and nesting past 1024 levels
    except orjson.JSONDecodeError as exc:
        body = _parse_fallback(raw, exc)
    if _too_deeply_nested(body):
        raise _too_deep()
    if not isinstance(body, dict):
        raise ProxyReject(400, f"request body must be a JSON object, not a JSON {type(body).__name__}")
    need = REQUIRED.get(protocol)
    if need is not None:
        name, kind = need
        if name not in body:
            raise ProxyReject(400, f"'{name}' is required")
        if not isinstance(body[name], kind):
            raise ProxyReject(400, f"'{name}' has the wrong type ({type(body[name]).__name__})")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ProxyReject(400, f"'stream' must be a boolean, got {json.dumps(stream)}")
    return body
