"""vLLM chat completions -> Gemini `GenerateContentResponse`s: one JSON reply, or the `alt=sse` stream.

Only fields Google defines are produced; vLLM's extras (token ids, logprobs...) are read where needed and never
copied. `modelVersion` is the model name the client put in its URL. Function call arguments are objects in
Gemini: arguments that are not a JSON object come back as `{"_raw": "<text>"}` (the request side sends them
back as they came, as for Anthropic). The model's reasoning becomes a `thought: true` part only when the request
asked for it (`thinkingConfig.includeThoughts`).

Tool-call ids are positional (`call_<content index>_<n>`, the index the model turn will have in the client's next
`contents`), never vLLM's random ones: the same conversation gets the same ids, and a client that drops them is
given the same ids again by the request side (gemini.py).

Streaming: text goes out as it arrives, one event per upstream chunk, held back by one piece so the last event
carries text together with `finishReason` and `usageMetadata` (Gemini CLI treats an event with an empty text part
as invalid, and the real API ends the same way). A function call goes out whole once its arguments are complete:
when the next call starts, or at the end.
"""

from __future__ import annotations

from typing import Callable

from .chat_messages import arguments_object
from .chunk_stream import ChunkStream
from .jsonio import dumps

_THOUGHT, _TEXT = "thought", "text"
_FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY"}


def call_id(content_index: int, number: int) -> str:
    """The id of the `number`th call of the model turn at `contents[content_index]`: the request side gives a call
    without an id this one, and the reply side gives it to a call vLLM sent without one (same history, same id)."""
    return f"call_{content_index}_{number}"


def response_id(chat_id: str | None) -> str:
    """vLLM's request id without its prefix: deterministic, so a stream and its record agree."""
    return (chat_id or "").removeprefix("chatcmpl-") or "alight"


def finish_reason(chat_finish: str | None) -> str:
    return _FINISH.get(chat_finish or "stop", "OTHER")


def shows_thoughts(request: dict) -> bool:
    config = request.get("generationConfig")
    thinking = config.get("thinkingConfig") if isinstance(config, dict) else None
    return isinstance(thinking, dict) and thinking.get("includeThoughts") is True


def function_call_part(call: dict, position: int, number: int) -> dict:
    """vLLM's call as a Gemini part, under its positional id (vLLM's own id is random: see `positional_ids`)."""
    function = call.get("function") or {}
    return {"functionCall": {"id": call_id(position, number), "name": function.get("name") or "",
                             "args": arguments_object(function.get("arguments"))}}


def positional_ids(request: dict) -> Callable[[dict], None]:
    """Rewrites the tool-call ids of a chat completion (or of a chunk's delta) to the positional ids the reply
    hands out, in place: exact continuation's chain then learns the ids the client sees (continued.exact_chat's
    `rewrite`), so the next request matches whether the client sends them back or leaves them out (the request
    side gives an id-less call the same id)."""
    position = _position(request)

    def rewrite(data: dict) -> None:
        for choice in data.get("choices") or ():
            holder = choice.get("message") or choice.get("delta") or {}
            for n, call in enumerate(holder.get("tool_calls") or ()):
                if isinstance(call, dict) and call.get("id"):
                    call["id"] = call_id(position, call.get("index", n))

    return rewrite


def usage_metadata(prompt: int, completion: int) -> dict:
    return {"promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion}


def _reply(parts: list[dict], finish: str | None, usage: dict | None, model: str | None, rid: str) -> dict:
    candidate: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    out: dict = {"candidates": [candidate]}
    if usage is not None:
        out["usageMetadata"] = usage
    out["modelVersion"] = model
    out["responseId"] = rid
    return out


def _position(request: dict) -> int:
    """Where the reply's model turn will sit in the client's next `contents`."""
    contents = request.get("contents")
    return len(contents) if isinstance(contents, list) else 0


def response_from_chat(chat: dict, *, client_model: str | None, request: dict) -> dict:
    """vLLM chat.completion JSON (non-stream) -> GenerateContentResponse JSON."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    parts: list[dict] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning and shows_thoughts(request):
        parts.append({"text": reasoning, "thought": True})
    if message.get("content"):
        parts.append({"text": message["content"]})
    position = _position(request)
    for n, call in enumerate(message.get("tool_calls") or ()):
        parts.append(function_call_part(call, position, n))
    usage = chat.get("usage") or {}
    return _reply(parts, finish_reason(choice.get("finish_reason")),
                  usage_metadata(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0),
                  client_model, response_id(chat.get("id")))


def sse(payload: dict) -> bytes:
    """One Gemini SSE event: a bare `data:` line, no event name (what Google's `alt=sse` sends)."""
    return b"data: " + dumps(payload) + b"\r\n\r\n"


class StreamTranslator(ChunkStream):
    """Turns parsed `chat.completion.chunk`s into Gemini SSE events as they arrive (module doc).
    `response_body` (set by `finish` or `fail`) is the reply a non-streamed request would have returned."""

    REASONING, CONTENT = _THOUGHT, _TEXT

    def __init__(self, *, client_model: str | None, request: dict):
        super().__init__(show_reasoning=shows_thoughts(request))
        self.client_model = client_model
        self.response_body: dict | None = None
        self._rid = "alight"
        self._position = _position(request)
        self._held: tuple[str, str] | None = None  # (kind, text) not sent yet
        self._calls: dict[int, dict] = {}  # tool-call index -> {"id", "name", "arguments": [fragments]}
        self._sent_calls: set[int] = set()
        self._texts: dict[str, list[str]] = {_THOUGHT: [], _TEXT: []}

    def _start(self, chunk: dict) -> bytes:
        self._rid = response_id(chunk.get("id"))
        return b""

    def _event(self, parts: list[dict], finish: str | None = None, usage: dict | None = None) -> bytes:
        return sse(_reply(parts, finish, usage, self.client_model, self._rid))

    def _flush_text(self) -> list[dict]:
        if self._held is None:
            return []
        kind, text = self._held
        self._held = None
        return [{"text": text, "thought": True} if kind == _THOUGHT else {"text": text}]

    def _text(self, kind: str, text: str) -> bytes:
        self._texts[kind].append(text)
        parts = self._flush_text()
        self._held = (kind, text)
        return self._event(parts) if parts else b""

    def _tool(self, call: dict) -> bytes:
        index = call.get("index", 0)
        function = call.get("function") or {}
        parts = []
        if index not in self._calls:
            parts = self._flush_text() + self._complete_calls()  # the calls before this one are complete
            self._calls[index] = {"id": call.get("id"), "name": function.get("name") or "", "arguments": []}
        if function.get("arguments"):
            self._calls[index]["arguments"].append(function["arguments"])
        return self._event(parts) if parts else b""

    def _complete_calls(self) -> list[dict]:
        parts = []
        for index in sorted(self._calls.keys() - self._sent_calls):
            self._sent_calls.add(index)
            parts.append(self._call_part(index))
        return parts

    def _call_part(self, index: int) -> dict:
        slot = self._calls[index]
        call = {"id": slot["id"], "function": {"name": slot["name"], "arguments": "".join(slot["arguments"])}}
        return function_call_part(call, self._position, sorted(self._calls).index(index))

    def _usage_metadata(self) -> dict:
        if self._usage:
            return usage_metadata(self._usage.get("prompt_tokens") or self._prompt_len,
                                  self._usage.get("completion_tokens") or 0)
        return usage_metadata(self._prompt_len, self._generated)

    def finish(self) -> bytes:
        self._opening({})
        parts = self._flush_text() + self._complete_calls()
        if not parts:
            parts = [{"text": ""}]  # an empty generation: the one event still carries a candidate's content
        finish = finish_reason(self._finish_reason)
        self.response_body = self._body(finish)
        return self._event(parts, finish, self._usage_metadata())

    def fail(self, message: str) -> bytes:
        self.response_body = self._body(None)
        tail = self._flush_text() + self._complete_calls()
        out = self._event(tail) if tail else b""
        # Google ends a broken stream with an error object in place of a response.
        return out + sse({"error": {"code": 500, "message": message, "status": "INTERNAL"}})

    def _body(self, finish: str | None) -> dict:
        parts: list[dict] = []
        if self._texts[_THOUGHT]:
            parts.append({"text": "".join(self._texts[_THOUGHT]), "thought": True})
        if self._texts[_TEXT]:
            parts.append({"text": "".join(self._texts[_TEXT])})
        parts += [self._call_part(index) for index in sorted(self._calls)]
        return _reply(parts, finish, self._usage_metadata(), self.client_model, self._rid)
