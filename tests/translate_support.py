"""What the translator tests share: the recorded client requests (tests/data/captures), an HTTP client that answers
every request with one canned reply (so an official SDK parses alight's output in process, no sockets), and a
stream translator run over vLLM-shaped chunks with its SSE decoded back into events."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
from vllm_shapes import Completion, chat_chunks

from agentlightning_cli.proxy.sse import SSEDecoder

CAPTURES = Path(__file__).parent / "data" / "captures"


def capture(name: str) -> dict:
    """The body of a recorded request (a real harness's, captured through the proxy)."""
    return json.loads((CAPTURES / name).read_text())["body"]


def canned_http(status: int, body: bytes, content_type: str) -> httpx2.Client:
    """An HTTP client whose every request gets this reply: what an SDK client is built on here."""
    transport = httpx2.MockTransport(lambda request: httpx2.Response(status, headers={"content-type": content_type},
                                                                     content=body))
    return httpx2.Client(transport=transport)


def run_stream(translate: ModuleType, completion: Completion, request: dict, usage: bool = True,
               client_model: str = "alias") -> tuple[Any, list[bytes]]:
    """A protocol's StreamTranslator fed `completion` as vLLM's chunks, then finished: (translator, SSE pieces)."""
    translator = translate.StreamTranslator(client_model=client_model, request=request)
    pieces = [translator.feed(chunk) for chunk in chat_chunks(completion, usage=usage)]
    pieces.append(translator.finish())
    return translator, pieces


def sse_events(sse: bytes) -> list[tuple[str, dict]]:
    """The SSE decoded into (event name, data): nothing left over, each event named as its data's type."""
    decoder = SSEDecoder()
    events = [(name, json.loads(data)) for name, data in decoder.feed(sse)]
    assert decoder.flush() == []
    for name, data in events:
        assert name == data["type"]
    return events
