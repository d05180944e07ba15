"""vLLM chat completions -> OpenAI Responses replies: one response object, or the SSE event sequence.

Output items: `reasoning` (when vLLM returns reasoning text), one `message` with an `output_text` part, then one
`function_call` per tool call. Ids derive from vLLM's request id, so a stream and its record agree. A
`length` finish gives `status: "incomplete"` with `incomplete_details.reason = "max_output_tokens"`; streams
always end in `response.completed` (carrying that status), because Codex treats any other ending as a broken
turn. vLLM's extras (token ids, logprobs, stop_reason, metrics...) are never copied.
"""

from __future__ import annotations

import time

from .chunk_stream import ChunkStream
from .jsonio import dumps_text
from .sse import encode, encode_raw

_REASONING, _MESSAGE, _CALL = "reasoning", "message", "function_call"


def response_from_chat(chat: dict, *, client_model: str | None, request: dict) -> dict:
    """vLLM chat.completion JSON (non-stream) -> OpenAI Response JSON."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    base = id_base(chat.get("id"))
    output: list[dict] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        output.append(_reasoning_item(f"rs_{base}", reasoning))
    if message.get("content"):
        output.append(_message_item(f"msg_{base}", message["content"], "completed"))
    for i, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        output.append(_call_item(f"fc_{base}_{i}", call.get("id") or f"call_{base}_{i}",
                                 function.get("name") or "", function.get("arguments") or "", "completed"))
    return build_response(base, chat.get("created"), client_model, request, output,
                          _status(choice.get("finish_reason")), usage(chat.get("usage")))


def id_base(chat_id: str | None) -> str:
    return (chat_id or "").removeprefix("chatcmpl-") or "alight"


def usage(chat_usage: dict | None, generated: int = 0, prompt_len: int = 0) -> dict:
    chat_usage = chat_usage or {}
    input_tokens = chat_usage.get("prompt_tokens") or prompt_len
    output_tokens = chat_usage.get("completion_tokens") or generated
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (chat_usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": input_tokens + output_tokens}


def _status(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def build_response(base: str, created, model: str | None, request: dict, output: list, status: str,
                   usage_: dict | None, error: dict | None = None) -> dict:
    """The response object, echoing the request settings the OpenAI SDK's `Response` type carries."""
    return {
        "id": f"resp_{base}", "object": "response", "created_at": created or int(time.time()), "status": status,
        "background": False, "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"), "max_output_tokens": request.get("max_output_tokens"),
        "model": model, "output": output, "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None, "reasoning": request.get("reasoning"),
        "temperature": request.get("temperature"), "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools") or [],
        "top_p": request.get("top_p"), "truncation": request.get("truncation") or "disabled",
        "usage": usage_, "metadata": request.get("metadata") or {},
    }


def _message_item(item_id: str, text: str, status: str) -> dict:
    return {"type": "message", "id": item_id, "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def _reasoning_item(item_id: str, text: str) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


class StreamTranslator(ChunkStream):
    """Turns parsed `chat.completion.chunk`s into Responses SSE events as they arrive, each with its
    `sequence_number`. `response_body` (set by `finish` or `fail`) equals what `response_from_chat` returns for
    the same completion, for the record."""

    REASONING, CONTENT = _REASONING, _MESSAGE

    def __init__(self, *, client_model: str | None, request: dict):
        super().__init__()
        self.client_model = client_model
        self.request = request
        self.response_body: dict | None = None
        self._seq = 0
        self._base = ""
        self._created = None
        self._items: list[list] = []  # [kind, item_id, parts, call_id, name] in output order
        self._open = False
        self._tool_item: dict[int, int] = {}  # tool-call index -> output index
        self._messages = 0

    def _event(self, name: str, payload: dict) -> bytes:
        payload["sequence_number"] = self._seq
        self._seq += 1
        return encode(name, payload)

    def finish(self) -> bytes:
        out = self._opening({}) + self._close()
        response = self._response(_status(self._finish_reason), "completed")
        self.response_body = response
        return out + self._event("response.completed", {"type": "response.completed", "response": response})

    def fail(self, message: str) -> bytes:
        out = self._opening({})
        error = {"code": "server_error", "message": message}
        response = self._response("failed", "incomplete", error)
        self.response_body = response
        return out + self._event("response.failed", {"type": "response.failed", "response": response})

    def _start(self, chunk: dict) -> bytes:
        self._base = id_base(chunk.get("id"))
        self._created = chunk.get("created")
        # created and in_progress carry the same snapshot: serialise it (tools echo included) once.
        snapshot = dumps_text(build_response(self._base, self._created, self.client_model, self.request, [],
                                        "in_progress", None))
        out = b""
        for name in ("response.created", "response.in_progress"):
            out += encode_raw(name, f'{{"type":"{name}","sequence_number":{self._seq},"response":{snapshot}}}')
            self._seq += 1
        return out

    def _open_item(self, kind: str, item: dict) -> bytes:
        out = self._close()
        self._items.append([kind, item["id"], [], item.get("call_id"), item.get("name")])
        self._open = True
        out += self._event("response.output_item.added", {"type": "response.output_item.added",
                                                          "output_index": len(self._items) - 1, "item": item})
        return out

    def _text(self, kind: str, text: str) -> bytes:
        out = b""
        if not self._open or self._items[-1][0] != kind:
            if kind == _MESSAGE:
                item_id = f"msg_{self._base}" + (f"_{self._messages}" if self._messages else "")
                self._messages += 1
                out = self._open_item(kind, {"type": "message", "id": item_id, "role": "assistant",
                                             "status": "in_progress", "content": []})
                out += self._event("response.content_part.added", {
                    "type": "response.content_part.added", "item_id": item_id, "output_index": len(self._items) - 1,
                    "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})
            else:
                out = self._open_item(kind, {"type": "reasoning", "id": f"rs_{self._base}", "summary": []})
        index = len(self._items) - 1
        item = self._items[index]
        item[2].append(text)
        name = "response.output_text.delta" if kind == _MESSAGE else "response.reasoning_text.delta"
        payload = {"type": name, "item_id": item[1], "output_index": index, "content_index": 0, "delta": text}
        if kind == _MESSAGE:
            payload["logprobs"] = []
        return out + self._event(name, payload)

    def _tool(self, call: dict) -> bytes:
        index = call.get("index", 0)
        function = call.get("function") or {}
        out = b""
        position = self._tool_item.get(index)
        if position is None:
            position = len(self._items)
            self._tool_item[index] = position
            out = self._open_item(_CALL, _call_item(
                f"fc_{self._base}_{index}", call.get("id") or f"call_{self._base}_{index}",
                function.get("name") or "", "", "in_progress"))
        fragment = function.get("arguments")
        if fragment:
            item = self._items[position]
            item[2].append(fragment)
            out += self._event("response.function_call_arguments.delta", {
                "type": "response.function_call_arguments.delta", "item_id": item[1], "output_index": position,
                "delta": fragment})
        return out

    def _close(self) -> bytes:
        if not self._open:
            return b""
        self._open = False
        index = len(self._items) - 1
        kind, item_id, parts, call_id, name = self._items[index]
        text = "".join(parts)
        out = b""
        if kind == _MESSAGE:
            part = {"type": "output_text", "text": text, "annotations": []}
            out += self._event("response.output_text.done", {
                "type": "response.output_text.done", "item_id": item_id, "output_index": index, "content_index": 0,
                "text": text, "logprobs": []})
            out += self._event("response.content_part.done", {
                "type": "response.content_part.done", "item_id": item_id, "output_index": index,
                "content_index": 0, "part": part})
        elif kind == _REASONING:
            out += self._event("response.reasoning_text.done", {
                "type": "response.reasoning_text.done", "item_id": item_id, "output_index": index,
                "content_index": 0, "text": text})
        else:
            out += self._event("response.function_call_arguments.done", {
                "type": "response.function_call_arguments.done", "item_id": item_id, "output_index": index,
                "name": name, "arguments": text})
        return out + self._event("response.output_item.done", {
            "type": "response.output_item.done", "output_index": index, "item": self._item(index, "completed")})

    def _item(self, index: int, status: str) -> dict:
        kind, item_id, parts, call_id, name = self._items[index]
        if kind == _MESSAGE:
            return _message_item(item_id, "".join(parts), status)
        if kind == _REASONING:
            return _reasoning_item(item_id, "".join(parts))
        return _call_item(item_id, call_id, name, "".join(parts), status)

    def _response(self, status: str, item_status: str, error: dict | None = None) -> dict:
        # Items closed before the end are complete; after a failure the open one is cut short.
        output = [self._item(i, "completed" if (i < len(self._items) - 1 or not self._open) else item_status)
                  for i in range(len(self._items))]
        return build_response(self._base, self._created, self.client_model, self.request, output, status,
                              usage(self._usage, self._generated, self._prompt_len), error)
