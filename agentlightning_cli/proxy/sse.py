"""Server-sent events: a compact encoder for the streams we synthesise and an incremental decoder for upstream.

Both sit on the per-event hot path (the proxy budget is ~20 µs per event), so they work on bytes directly and
serialise JSON once per event with orjson (the json module only for what orjson refuses).
"""

from __future__ import annotations

import json

import orjson

# Compact separators, raw UTF-8, for what orjson refuses (ints past 64 bits, ...); reused across calls because
# json.dumps builds a new encoder whenever it gets keyword arguments.
_fallback = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def dump_bytes(payload: object) -> bytes:
    """Compact UTF-8 JSON; orjson is several times cheaper per event than the json module."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return _fallback(payload).encode()


def dumps(payload: object) -> str:
    return dump_bytes(payload).decode()


def encode(event: str, payload: dict) -> bytes:
    """One named SSE event: `event: <type>\ndata: <json>\n\n`."""
    return b"event: " + event.encode() + b"\ndata: " + dump_bytes(payload) + b"\n\n"


def encode_raw(event: str, data: str) -> bytes:
    """Like `encode` for a payload that is already JSON text (lets callers splice pre-serialised parts)."""
    return f"event: {event}\ndata: {data}\n\n".encode()


class SSEDecoder:
    """Splits a byte stream into SSE events as chunks arrive (chunk boundaries may fall anywhere).

    `feed` returns complete events as `(event_name_or_None, data)`; comment-only and empty blocks are skipped.
    Multiple `data:` lines of one event are joined with "\\n", as the SSE spec says.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # CRLF framing is legal; a lone CR split across chunks is completed by the next feed's replace.
            buf = buf.replace(b"\r\n", b"\n")
        events: list[tuple[str | None, str]] = []
        start = 0
        find = buf.find
        while (end := find(b"\n\n", start)) >= 0:
            parsed = _parse_block(buf[start:end])
            if parsed is not None:
                events.append(parsed)
            start = end + 2
        self._buf = buf[start:]
        return events

    def flush(self) -> list[tuple[str | None, str]]:
        """Events left in the buffer when the stream ended without a final blank line."""
        rest, self._buf = self._buf.strip(b"\n"), b""
        parsed = _parse_block(rest) if rest else None
        return [parsed] if parsed is not None else []


def _parse_block(block: bytes) -> tuple[str | None, str] | None:
    if block.startswith(b"data: ") and b"\n" not in block:  # the common upstream shape, one data line
        return None, block[6:].decode()
    event: str | None = None
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
        elif line.startswith(b"event:"):
            event = line[6:].strip().decode()
    if not data:
        return None
    return event, b"\n".join(data).decode()
