"""The chat-chunk side every reply stream translator shares: reading vLLM's `chat.completion.chunk`s.

A subclass (anthropic_reply.StreamTranslator, responses_reply.StreamTranslator) says how to open its stream
(`_start`), how text of one kind (`_text(kind, text)` with its own REASONING / CONTENT kinds) and a tool-call
fragment (`_tool`) become its events; `feed` here walks the chunk once and keeps the counts its closing
events need (prompt length, generated tokens, usage, finish and stop reason).
"""

from __future__ import annotations

from typing import Any


class ChunkStream:
    REASONING: Any
    CONTENT: Any

    def __init__(self, show_reasoning: bool = True) -> None:
        self._show_reasoning = show_reasoning
        self._started = False
        self._prompt_len = 0
        self._generated = 0
        self._usage: dict | None = None
        self._finish_reason: str | None = None
        self._stop_reason: Any = None

    def feed(self, chunk: dict) -> bytes:
        out = b"" if self._started else self._opening(chunk)  # per event: no call once started
        choices = chunk.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if delta:
                if self._show_reasoning:
                    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
                    if reasoning:
                        out += self._text(self.REASONING, reasoning)
                text = delta.get("content")
                if text:
                    out += self._text(self.CONTENT, text)
                calls = delta.get("tool_calls")
                if calls:
                    for call in calls:
                        out += self._tool(call)
            token_ids = choice.get("token_ids")
            if token_ids:
                self._generated += len(token_ids)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
                self._stop_reason = choice.get("stop_reason")
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        return out

    def _opening(self, chunk: dict) -> bytes:
        """The stream's opening events before its first content (or before `finish`/`fail` of an empty one)."""
        if self._started:
            return b""
        self._started = True
        self._prompt_len = len(chunk.get("prompt_token_ids") or ())
        return self._start(chunk)

    def _start(self, chunk: dict) -> bytes:
        raise NotImplementedError

    def _text(self, kind: Any, text: str) -> bytes:
        raise NotImplementedError

    def _tool(self, call: dict) -> bytes:
        raise NotImplementedError
