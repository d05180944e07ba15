"""vLLM chat completions -> Anthropic Messages replies: one JSON message, or an SSE stream built incrementally.

Only fields Anthropic defines are produced; vLLM's extras (token ids, logprobs, stop_reason, metrics...) are
read where needed and never copied. Tool arguments that are not a JSON object come back as
`{"_raw": "<text>"}` so the harness sees a schema error instead of a crash and the text survives the round
trip (the request side sends it back verbatim). The model's reasoning text becomes a `thinking` block only when
the request enabled thinking without `display: "omitted"`.
"""

from __future__ import annotations

from .chat_messages import arguments_object
from .chunk_stream import ChunkStream
from .sse import encode

_THINKING, _TEXT = -2, -1  # kinds of the open content block; tool calls use their index (>= 0)


def response_from_chat(chat: dict, *, client_model: str | None, request: dict) -> dict:
    """vLLM chat.completion JSON (non-stream) -> Anthropic Message JSON."""
    choices = chat.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    msg_id = message_id(chat.get("id"))
    content: list[dict] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning and shows_thinking(request):
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for i, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{msg_id[4:]}_{i}",
                        "name": function.get("name") or "", "input": arguments_object(function.get("arguments"))})
    stop_reason, stop_sequence = stop_fields(choice.get("finish_reason"), choice.get("stop_reason"),
                                             bool(message.get("tool_calls")))
    usage = chat.get("usage") or {}
    return _message(msg_id, client_model, content, stop_reason, stop_sequence,
                    usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)


def message_id(chat_id: str | None) -> str:
    """`msg_` + vLLM's request id: deterministic, so a stream and its record agree."""
    suffix = (chat_id or "").removeprefix("chatcmpl-")
    return f"msg_{suffix or 'alight'}"


def shows_thinking(request: dict) -> bool:
    thinking = request.get("thinking")
    return (isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
            and thinking.get("display") != "omitted")


def stop_fields(finish_reason: str | None, vllm_stop_reason, has_tool_calls: bool) -> tuple[str, str | None]:
    """Anthropic (stop_reason, stop_sequence). vLLM's `stop_reason` is the matched stop string (a str) or the
    stop token id (an int) when finish_reason is "stop"."""
    if finish_reason == "length":
        return "max_tokens", None
    if has_tool_calls:
        return "tool_use", None
    if isinstance(vllm_stop_reason, str):
        return "stop_sequence", vllm_stop_reason
    return "end_turn", None


def _usage(input_tokens: int, output_tokens: int) -> dict:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _message(msg_id, model, content, stop_reason, stop_sequence, input_tokens, output_tokens) -> dict:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": _usage(input_tokens, output_tokens)}


class StreamTranslator(ChunkStream):
    """Turns parsed `chat.completion.chunk`s into Anthropic SSE events as they arrive.

    Each content kind change (reasoning, text, a new tool-call index) closes the open block and opens the
    next, so text reaches the client while vLLM is still generating. `response_body` (set by `finish` or
    `fail`) is the message a non-streamed request would have returned, for the record.
    """

    REASONING, CONTENT = _THINKING, _TEXT

    def __init__(self, *, client_model: str | None, request: dict):
        super().__init__(show_reasoning=shows_thinking(request))
        self.client_model = client_model
        self.response_body: dict | None = None
        self._msg_id = ""
        self._open = False
        self._kind = _TEXT
        self._blocks: list[list] = []  # [kind, parts, id, name] per content block, in index order
        self._tool_block: dict[int, int] = {}  # tool-call index -> content block index

    def finish(self) -> bytes:
        out = self._opening({}) + self._close()
        has_tools = any(block[0] >= 0 for block in self._blocks)
        stop_reason, stop_sequence = stop_fields(self._finish_reason, self._stop_reason, has_tools)
        input_tokens, output_tokens = self._token_counts()
        usage = _usage(input_tokens, output_tokens)
        out += encode("message_delta", {"type": "message_delta",
                                        "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                                        "usage": usage})
        out += encode("message_stop", {"type": "message_stop"})
        self.response_body = self._body(stop_reason, stop_sequence)
        return out

    def fail(self, message: str) -> bytes:
        self.response_body = self._body(None, None)
        return encode("error", {"type": "error", "error": {"type": "api_error", "message": message}})

    def _start(self, chunk: dict) -> bytes:
        self._msg_id = message_id(chunk.get("id"))
        message = _message(self._msg_id, self.client_model, [], None, None, self._prompt_len, 0)
        return encode("message_start", {"type": "message_start", "message": message})

    def _close(self) -> bytes:
        if not self._open:
            return b""
        self._open = False
        return encode("content_block_stop", {"type": "content_block_stop", "index": len(self._blocks) - 1})

    def _text(self, kind: int, text: str) -> bytes:
        out = b""
        if not self._open or self._kind != kind:
            out = self._close()
            self._blocks.append([kind, [], None, None])
            self._open, self._kind = True, kind
            block = ({"type": "text", "text": ""} if kind == _TEXT
                     else {"type": "thinking", "thinking": "", "signature": ""})
            out += encode("content_block_start", {"type": "content_block_start", "index": len(self._blocks) - 1,
                                                  "content_block": block})
        self._blocks[-1][1].append(text)
        delta = ({"type": "text_delta", "text": text} if kind == _TEXT
                 else {"type": "thinking_delta", "thinking": text})
        return out + encode("content_block_delta", {"type": "content_block_delta", "index": len(self._blocks) - 1,
                                                    "delta": delta})

    def _tool(self, call: dict) -> bytes:
        index = call.get("index", 0)
        function = call.get("function") or {}
        out = b""
        position = self._tool_block.get(index)
        if position is None:
            out = self._close()
            position = len(self._blocks)
            call_id = call.get("id") or f"toolu_{self._msg_id[4:]}_{index}"
            name = function.get("name") or ""
            self._blocks.append([index, [], call_id, name])
            self._tool_block[index] = position
            self._open, self._kind = True, index
            out += encode("content_block_start", {
                "type": "content_block_start", "index": position,
                "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}})
        fragment = function.get("arguments")
        if fragment:
            self._blocks[position][1].append(fragment)
            out += encode("content_block_delta", {"type": "content_block_delta", "index": position,
                                                  "delta": {"type": "input_json_delta", "partial_json": fragment}})
        return out

    def _token_counts(self) -> tuple[int, int]:
        if self._usage:
            return self._usage.get("prompt_tokens") or self._prompt_len, self._usage.get("completion_tokens") or 0
        return self._prompt_len, self._generated

    def _body(self, stop_reason, stop_sequence) -> dict:
        content: list[dict] = []
        for kind, parts, call_id, name in self._blocks:
            if kind == _TEXT:
                content.append({"type": "text", "text": "".join(parts)})
            elif kind == _THINKING:
                content.append({"type": "thinking", "thinking": "".join(parts), "signature": ""})
            else:
                content.append({"type": "tool_use", "id": call_id, "name": name,
                                "input": arguments_object("".join(parts))})
        input_tokens, output_tokens = self._token_counts()
        return _message(self._msg_id or message_id(None), self.client_model, content, stop_reason, stop_sequence,
                        input_tokens, output_tokens)
