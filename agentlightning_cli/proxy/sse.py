"""Server-sent events: a compact encoder for the streams we synthesise and the one incremental decoder for
upstream streams (and tests).

Both sit on the per-event hot path (the proxy budget is ~20 µs per event), so they work on bytes directly and
serialise JSON once per event with orjson (jsonio.py).
"""

from __future__ import annotations

from agentlightning_cli.proxy.jsonio import dumps


def encode(event: str, payload: dict) -> bytes:
    """One named SSE event: `event: <type>\ndata: <json>\n\n`."""
    return b"event: " + event.encode() + b"\ndata: " + dumps(payload) + b"\n\n"


def encode_raw(event: str, data: str) -> bytes:
    """Like `encode` for a payload that is already JSON text (lets callers splice pre-serialised parts)."""
    return f"event: {event}\ndata: {data}\n\n".encode()


class SSEDecoder:
    """Splits a byte stream into SSE events as chunks arrive (chunk boundaries may fall anywhere).

    `payloads` returns the data of each complete event as bytes (the proxy's path: it parses them as JSON);
    `feed` returns `(event_name_or_None, data)` text pairs. Comment-only and empty blocks are skipped; several
    `data:` lines of one event are joined with "\\n", as the SSE spec says.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def _blocks(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # CRLF framing is legal; a lone CR split across chunks is completed by the next call's replace.
            buf = buf.replace(b"\r\n", b"\n")
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        return blocks

    def payloads(self, chunk: bytes) -> list[bytes]:
        out = []
        for block in self._blocks(chunk):
            if block.startswith(b"data: ") and b"\n" not in block:  # vLLM: one data line per event
                out.append(block[6:])
                continue
            parsed = _parse_block(block)
            if parsed is not None:
                out.append(parsed[1])
        return out

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        events = []
        for block in self._blocks(chunk):
            parsed = _parse_block(block)
            if parsed is not None:
                events.append((parsed[0], parsed[1].decode()))
        return events

    def flush(self) -> list[tuple[str | None, str]]:
        """Events left in the buffer when the stream ended without a final blank line."""
        rest, self._buf = self._buf.strip(b"\n"), b""
        parsed = _parse_block(rest) if rest else None
        return [(parsed[0], parsed[1].decode())] if parsed is not None else []


def _parse_block(block: bytes) -> tuple[str | None, bytes] | None:
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
    return event, b"\n".join(data)
