"""Reading a client request: size limit, Content-Encoding, UTF-8 and JSON checks, per-protocol shape checks."""

from __future__ import annotations

import json
import zlib
from typing import Any

import orjson

from agentlightning_cli.proxy.errors import ProxyReject
from agentlightning_cli.proxy.http_server import Request

# Fields a request of each protocol cannot do without.
REQUIRED = {"openai-chat": ("messages", list), "anthropic-messages": ("messages", list),
            "openai-responses": ("input", (str, list))}


def _too_big(limit: int) -> ProxyReject:
    return ProxyReject(413, f"request body is larger than the proxy's limit of {limit} bytes "
                            "(proxy.max_body_bytes)", "bad_request")


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
    """The body as a JSON object, checked for the fields its protocol needs; ProxyReject(400) otherwise."""
    try:
        body = orjson.loads(raw)  # also rejects invalid UTF-8
    except orjson.JSONDecodeError:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProxyReject(400, f"request body is not valid UTF-8 (byte {exc.start})") from exc
        try:
            body = json.loads(text)  # NaN, Infinity and huge ints: valid for Python's json, not orjson
        except ValueError as exc:
            raise ProxyReject(400, f"request body is not valid JSON: {exc}") from exc
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
