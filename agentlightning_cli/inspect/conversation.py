"""A call's request and reply as a list of turns, whatever the protocol (chat completions, Anthropic Messages,
OpenAI Responses, Gemini), streamed or not. What the viewer renders and `show --json` prints as `messages`/`reply`.

Bodies are read as the client sent and saw them; anything that does not parse becomes one `raw` turn with the
text, so a viewer never fails on a strange body.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Turn:
    """One piece of a conversation: a role's text, a tool call, a tool result, reasoning, or unparsed bytes."""

    role: str  # system | user | assistant | tool | error
    kind: str  # text | tool_call | tool_result | thinking | raw
    text: str
    name: str | None = None  # the tool's name, for tool calls
    call_id: str | None = None  # ties a tool result to its call

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _text(content: Any) -> str:
    """Text of a content field: a string, or a list of parts with text (other parts named by their type)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part) for part in content)
    if isinstance(content, dict):
        for key in ("text", "thinking", "output", "content", "refusal"):
            if isinstance(content.get(key), (str, list)):
                return _text(content[key])
        return f"[{content.get('type', 'part')}]"
    return json.dumps(content)


def _args(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _chat_message(msg: dict[str, Any]) -> list[Turn]:
    role = msg.get("role", "user")
    turns = []
    if msg.get("reasoning_content") or msg.get("reasoning"):
        turns.append(Turn(role, "thinking", _text(msg.get("reasoning_content") or msg.get("reasoning"))))
    if role == "tool":
        return [Turn("tool", "tool_result", _text(msg.get("content")), call_id=msg.get("tool_call_id"))]
    if msg.get("content") not in (None, "", []):
        turns.append(Turn(role, "text", _text(msg.get("content"))))
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        turns.append(Turn(role, "tool_call", _args(fn.get("arguments", "")), name=fn.get("name"), call_id=call.get("id")))
    return turns


def _anthropic_blocks(role: str, content: Any) -> list[Turn]:
    if isinstance(content, str):
        return [Turn(role, "text", content)]
    turns = []
    for block in content or []:
        kind = block.get("type")
        if kind == "tool_use":
            turns.append(Turn(role, "tool_call", _args(block.get("input", {})), name=block.get("name"),
                              call_id=block.get("id")))
        elif kind == "tool_result":
            turns.append(Turn("tool", "tool_result", _text(block.get("content")), call_id=block.get("tool_use_id")))
        elif kind in ("thinking", "redacted_thinking"):
            turns.append(Turn(role, "thinking", block.get("thinking") or "[redacted]"))
        else:
            turns.append(Turn(role, "text", _text(block)))
    return turns


def _responses_items(items: Any) -> list[Turn]:
    if isinstance(items, str):
        return [Turn("user", "text", items)]
    turns = []
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "function_call":
            turns.append(Turn("assistant", "tool_call", _args(item.get("arguments", "")), name=item.get("name"),
                              call_id=item.get("call_id")))
        elif kind == "function_call_output":
            turns.append(Turn("tool", "tool_result", _text(item.get("output")), call_id=item.get("call_id")))
        elif kind == "reasoning":
            turns.append(Turn("assistant", "thinking", _text(item.get("content") or item.get("summary"))))
        elif kind == "message":
            turns.append(Turn(item.get("role", "user"), "text", _text(item.get("content"))))
        else:
            turns.append(Turn(item.get("role", "user"), "text", _text(item)))
    return turns


_GEMINI = "gemini-generate-content"


def _gemini_contents(contents: Any) -> list[Turn]:
    """Gemini Contents (role user/model; parts of text, functionCall, functionResponse) as turns."""
    turns = []
    for content in contents or []:
        role = "assistant" if content.get("role") == "model" else "user"
        for part in content.get("parts") or []:
            if isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                turns.append(Turn(role, "tool_call", _args(call.get("args", {})), name=call.get("name"),
                                  call_id=call.get("id")))
            elif isinstance(part.get("functionResponse"), dict):
                response = part["functionResponse"]
                turns.append(Turn("tool", "tool_result", _text(response.get("response")), name=response.get("name"),
                                  call_id=response.get("id")))
            elif part.get("thought"):
                turns.append(Turn(role, "thinking", part.get("text") or ""))
            elif isinstance(part.get("text"), str):
                turns.append(Turn(role, "text", part["text"]))
            else:
                turns.append(Turn(role, "text", f"[{', '.join(sorted(part))}]"))
    return turns


def _gemini_stream(events: list[tuple[str | None, Any]]) -> list[Turn]:
    """The streamed events' parts in order, consecutive text pieces of one kind joined."""
    parts: list[dict] = []
    for _, data in events:
        for candidate in (data.get("candidates") or [])[:1]:
            for part in (candidate.get("content") or {}).get("parts") or []:
                last = parts[-1] if parts else None
                if (last is not None and isinstance(part.get("text"), str) and isinstance(last.get("text"), str)
                        and bool(part.get("thought")) == bool(last.get("thought"))):
                    parts[-1] = {**last, "text": last["text"] + part["text"]}
                else:
                    parts.append(part)
        if isinstance(data.get("error"), dict):
            return _gemini_contents([{"role": "model", "parts": parts}]) + [
                Turn("error", "text", data["error"].get("message", ""))]
    return _gemini_contents([{"role": "model", "parts": [p for p in parts if p.get("text") != ""]}])


def request_turns(protocol: str, body: bytes) -> list[Turn]:
    """The conversation the client sent (system prompt, history, tool results), oldest first."""
    try:
        data = json.loads(body)
        if protocol == "openai-chat":
            return [t for msg in data.get("messages", []) for t in _chat_message(msg)]
        if protocol == "anthropic-messages":
            system = [Turn("system", "text", _text(data["system"]))] if data.get("system") else []
            return system + [t for msg in data.get("messages", [])
                             for t in _anthropic_blocks(msg.get("role", "user"), msg.get("content"))]
        if protocol == "openai-responses":
            system = [Turn("system", "text", data["instructions"])] if data.get("instructions") else []
            return system + _responses_items(data.get("input"))
        if protocol == _GEMINI:
            data = data.get("generateContentRequest") or data  # countTokens may wrap the request
            system = data.get("systemInstruction")
            head = [Turn("system", "text", _text(system.get("parts") if isinstance(system, dict) else system))] \
                if system else []
            return head + _gemini_contents(data.get("contents"))
    except (ValueError, AttributeError, TypeError, KeyError):
        pass
    return [Turn("user", "raw", body.decode("utf-8", "replace"))]


def tool_names(protocol: str, body: bytes) -> list[str]:
    """Names of the tools the request offered."""
    try:
        tools = json.loads(body).get("tools") or []
        if protocol == _GEMINI:
            return [d.get("name", "?") for t in tools for d in t.get("functionDeclarations") or ()] + [
                key for t in tools for key in t if key != "functionDeclarations"]
        return [t.get("name") or (t.get("function") or {}).get("name") or t.get("type", "?") for t in tools]
    except (ValueError, AttributeError, TypeError):
        return []


def reply_turns(protocol: str, body: bytes | None, stream: bool) -> list[Turn]:
    """What the model answered, as the client saw it (a stream is reassembled from its events)."""
    if not body:
        return []
    try:
        if stream and body.lstrip()[:1] != b"{":
            return _stream_turns(protocol, body)
        data = json.loads(body)
        if isinstance(data.get("error"), (dict, str)):
            error = data["error"]
            return [Turn("error", "text", error.get("message", json.dumps(error)) if isinstance(error, dict) else error)]
        if protocol == "openai-chat":
            choices = data.get("choices") or [{}]
            return _chat_message(choices[0].get("message") or {})
        if protocol == "anthropic-messages":
            return _anthropic_blocks("assistant", data.get("content"))
        if protocol == "openai-responses":
            return _responses_items(data.get("output"))
        if protocol == _GEMINI:
            return _gemini_contents([c.get("content") or {} for c in (data.get("candidates") or [])[:1]])
    except (ValueError, AttributeError, TypeError, KeyError, IndexError):
        pass
    return [Turn("assistant", "raw", body.decode("utf-8", "replace"))]


def _events(body: bytes) -> list[tuple[str | None, Any]]:
    """The (event name, parsed data) of each server-sent event; `[DONE]` dropped. Parsed here rather than with
    the proxy's decoder: importing the proxy package would cost the CLI ~0.4 s."""
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line.startswith(b"event:"):
                name = line[6:].strip().decode()
        payload = b"\n".join(data)
        if data and payload.strip() != b"[DONE]":
            out.append((name, json.loads(payload)))
    return out


def _stream_turns(protocol: str, body: bytes) -> list[Turn]:
    events = _events(body)
    if protocol == "openai-chat":
        return _chat_stream(events)
    if protocol == "anthropic-messages":
        return _anthropic_stream(events)
    if protocol == "openai-responses":
        for _, data in reversed(events):
            if data.get("type") in ("response.completed", "response.failed", "response.incomplete"):
                return _responses_items(data["response"].get("output"))
        return _responses_items([d["item"] for _, d in events if d.get("type") == "response.output_item.done"])
    if protocol == _GEMINI:
        return _gemini_stream(events)
    raise ValueError(protocol)


def _chat_stream(events: list[tuple[str | None, Any]]) -> list[Turn]:
    text, thinking, calls = [], [], {}
    for _, chunk in events:
        if chunk.get("error"):
            return [Turn("error", "text", _text(chunk["error"].get("message")))]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            thinking.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call.get("index", 0), {"id": None, "name": None, "arguments": ""})
                fn = call.get("function") or {}
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] = fn.get("name") or slot["name"]
                slot["arguments"] += fn.get("arguments") or ""
    message = {"role": "assistant", "content": "".join(text) or None, "reasoning_content": "".join(thinking) or None,
               "tool_calls": [{"id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}}
                              for _, c in sorted(calls.items())]}
    return _chat_message(message)


def _anthropic_stream(events: list[tuple[str | None, Any]]) -> list[Turn]:
    blocks: dict[int, dict[str, Any]] = {}
    for _, data in events:
        kind = data.get("type")
        if kind == "error":
            return [Turn("error", "text", _text((data.get("error") or {}).get("message")))]
        if kind == "content_block_start":
            blocks[data["index"]] = {**data["content_block"], "_json": ""}
        elif kind == "content_block_delta":
            block, delta = blocks.setdefault(data["index"], {"type": "text", "text": "", "_json": ""}), data["delta"]
            if delta.get("type") == "input_json_delta":
                block["_json"] += delta.get("partial_json", "")
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            else:
                block["text"] = block.get("text", "") + delta.get("text", "")
    content = []
    for _, block in sorted(blocks.items()):
        if block.get("type") == "tool_use" and block["_json"]:
            block["input"] = block["_json"]  # shown as sent, even if it is not valid JSON
        content.append({k: v for k, v in block.items() if k != "_json"})
    return _anthropic_blocks("assistant", content)
