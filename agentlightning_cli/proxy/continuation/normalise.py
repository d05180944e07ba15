"""Messages in alight's canonical chat form, compared under ONLY the normalisations listed in NORMALISATIONS.

A harness sends the conversation back in its own protocol; the translators (anthropic.py, responses.py) or the
chat passthrough turn it into chat-completions messages. Two messages are the same turn when their canonical forms
are equal; every normalisation is counted when it fires, so `alight inspect` can show what was forgiven. Anything
not listed is a mismatch: a changed word, a different tool-call id, a dropped message.

Two kinds of counting: *dropping* normalisations (cache_control, billing_header, reasoning, unknown_keys) count
each item removed from the request (including what the translator already dropped and noted in `dropped`);
*equivalence* normalisations (content_parts, null_empty, tool_call_arguments, assistant_strip, and reasoning once
more when only one side carried it) count each compared pair of messages that is equal only thanks to them.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

NORMALISATIONS: dict[str, str] = {
    "cache_control": "`cache_control` on messages, content parts and tools is dropped (a caching hint, not prompt)",
    "billing_header": "the `x-anthropic-billing-header:` system text is dropped (a per-conversation hash)",
    "reasoning": "thinking/reasoning is dropped: `reasoning`, `reasoning_content`, `thinking`, `signature` keys,"
                 " thinking/reasoning content parts, Anthropic thinking blocks and Responses reasoning items",
    "content_parts": "a list of text content parts equals their text joined with \"\\n\" (vLLM's string form)",
    "null_empty": "null, \"\" and an absent key are the same (content, name, tool_call_id, tool_calls: [])",
    "unknown_keys": "keys outside the chat message schema (role, content, name, tool_calls, tool_call_id) are"
                    " ignored, as are unknown keys of tool calls and content parts",
    "tool_call_arguments": "tool calls are equal by id + name + parsed JSON arguments (not the argument text)",
    "assistant_strip": "assistant text is equal after stripping leading and trailing whitespace",
}

_KNOWN = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
_REASONING_KEYS = frozenset({"reasoning", "reasoning_content", "thinking", "signature"})
_REASONING_PARTS = frozenset({"thinking", "redacted_thinking", "reasoning", "reasoning_text"})
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_PART_KEYS = frozenset({"type", "text", "cache_control"})
_CALL_KEYS = frozenset({"id", "type", "function", "index"})
_BILLING_HEADER = "x-anthropic-billing-header:"
_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # canonical JSON when the text parses, else the text itself
    raw_arguments: Any = field(compare=False, default=None)


@dataclass(frozen=True)
class Message:
    """One turn as compared; `raw` (not compared) is the message as sent, to tell which equivalence fired."""

    role: str
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    other_parts: tuple[str, ...] = ()  # non-text content parts as canonical JSON: compared exactly
    raw: Any = field(compare=False, default=None)


@dataclass
class Request:
    """A chat body seen by continuation: its chain key, the turns after the leading system text, and the
    dropping normalisations that fired while reading it."""

    key: str
    system: tuple[str, ...]
    messages: tuple[Message, ...]
    fired: Counter = field(default_factory=Counter)
    prefill: bool = False  # continue_final_message: the last assistant turn is continued, not closed


def canonical_request(body: dict, dropped: dict | None = None) -> Request:
    """A chat-completions body (as sent upstream) -> its canonical turns and chain key. `dropped` is what the
    translator removed on the way (translated.py keeps it); its thinking, cache_control and billing notes count
    as the normalisations they are."""
    fired: Counter = Counter()
    _count_dropped(dropped or {}, fired)
    messages = body.get("messages") or []
    head = 0
    system: list[str] = []
    while head < len(messages) and isinstance(messages[head], dict) and messages[head].get("role") in _SYSTEM_ROLES:
        system.append(_system_text(messages[head], fired))
        head += 1
    turns = tuple(canonical_message(m, fired) for m in messages[head:])
    tools = [_without_cache_control(t, fired) for t in body.get("tools") or []]
    key_parts = {"system": system, "tools": tools, "chat_template_kwargs": body.get("chat_template_kwargs") or {},
                 "reasoning_effort": _effort(body, dropped or {})}
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
    return Request(key=key, system=tuple(system), messages=turns, fired=fired,
                   prefill=bool(body.get("continue_final_message")))


def canonical_message(message: Any, fired: Counter) -> Message:
    if not isinstance(message, dict):
        return Message(role="?", text=json.dumps(message, sort_keys=True), raw=message)
    for key in message:
        if key in _REASONING_KEYS:
            fired["reasoning"] += message[key] not in (None, "")
        elif key == "cache_control":
            fired["cache_control"] += 1
        elif key not in _KNOWN:
            fired["unknown_keys"] += 1
    role = str(message.get("role") or "")
    text, others = _content(message.get("content"), fired)
    if role == "assistant":
        text = text.strip()
    calls = tuple(_tool_call(c, fired) for c in message.get("tool_calls") or ())
    return Message(role=role, text=text, tool_calls=calls, tool_call_id=str(message.get("tool_call_id") or ""),
                   name=str(message.get("name") or ""), other_parts=others, raw=message)


def equivalences(a: Message, b: Message) -> list[str]:
    """For two canonically equal messages: the equivalence normalisations their raw forms needed."""
    ra, rb = a.raw if isinstance(a.raw, dict) else {}, b.raw if isinstance(b.raw, dict) else {}
    out = []
    ca, cb = ra.get("content"), rb.get("content")
    if isinstance(ca, list) != isinstance(cb, list) or (isinstance(ca, list) and _texts(ca) != _texts(cb)):
        out.append("content_parts")
    empties = [(ra.get(k), k in ra, rb.get(k), k in rb) for k in ("content", "name", "tool_call_id", "tool_calls")]
    if any(x != y or hx != hy for x, hx, y, hy in empties if not x and not y):
        out.append("null_empty")
    if a.role == "assistant" and _joined(ca) != _joined(cb):
        out.append("assistant_strip")
    if any(x.raw_arguments != y.raw_arguments for x, y in zip(a.tool_calls, b.tool_calls)):
        out.append("tool_call_arguments")
    if bool(_REASONING_KEYS & _present(ra)) != bool(_REASONING_KEYS & _present(rb)):
        out.append("reasoning")
    return out


def shared_prefix(request: Sequence[Message], history: Sequence[Message]) -> tuple[int, Counter, dict | None]:
    """How many leading turns `request` shares with `history`, the equivalences that made them equal, and where
    the first mismatch is ({index, fields}) when the request diverges inside the history."""
    fired: Counter = Counter()
    n = min(len(request), len(history))
    for i in range(n):
        a, b = request[i], history[i]
        if a != b:
            fields = [f for f in ("role", "text", "tool_calls", "tool_call_id", "name", "other_parts")
                      if getattr(a, f) != getattr(b, f)]
            return i, fired, {"index": i, "fields": fields}
        fired.update(equivalences(a, b))
    return n, fired, None


def _effort(body: dict, dropped: dict) -> object:
    """Chat's `reasoning_effort`, else what the translator dropped of the client's reasoning settings (Responses
    `reasoning.effort`, Anthropic `thinking`): another effort is another chain even where vLLM never saw it."""
    if body.get("reasoning_effort") is not None:
        return body["reasoning_effort"]
    reasoning = dropped.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    return effort if effort is not None else dropped.get("thinking")


def _count_dropped(dropped: dict, fired: Counter) -> None:
    fired["cache_control"] += len(dropped.get("cache_control") or ())
    fired["billing_header"] += "system_billing_header" in dropped
    for group in ("blocks", "items"):
        for summary in (dropped.get(group) or {}).values():
            if isinstance(summary, dict) and summary.get("type") in _REASONING_PARTS:
                fired["reasoning"] += 1


def _system_text(message: dict, fired: Counter) -> str:
    for key in message:
        if key == "cache_control":
            fired["cache_control"] += 1
        elif key not in _KNOWN:
            fired["unknown_keys"] += 1
    content = message.get("content")
    if isinstance(content, list):
        kept = []
        for part in content:
            if isinstance(part, dict) and str(part.get("text") or "").startswith(_BILLING_HEADER):
                fired["billing_header"] += 1
            else:
                kept.append(part)
        content = kept
    elif isinstance(content, str) and content.startswith(_BILLING_HEADER):
        fired["billing_header"] += 1
        content = ""
    text, others = _content(content, fired)
    return text if not others else json.dumps([text, *others])


def _content(content: Any, fired: Counter) -> tuple[str, tuple[str, ...]]:
    if content is None or isinstance(content, str):
        return content or "", ()
    if not isinstance(content, list):
        return json.dumps(content, sort_keys=True), ()
    texts, others = [], []
    for part in content:
        if not isinstance(part, dict):
            others.append(json.dumps(part, sort_keys=True))
            continue
        kind = part.get("type")
        if kind in _REASONING_PARTS:
            fired["reasoning"] += 1
            continue
        fired["cache_control"] += "cache_control" in part
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            fired["unknown_keys"] += len(part.keys() - _PART_KEYS)
            texts.append(part["text"])
        else:
            others.append(json.dumps({k: v for k, v in part.items() if k != "cache_control"}, sort_keys=True))
    return "\n".join(texts), tuple(others)


def _tool_call(call: Any, fired: Counter) -> ToolCall:
    if not isinstance(call, dict):
        return ToolCall(id="", name="", arguments=json.dumps(call, sort_keys=True), raw_arguments=call)
    fired["unknown_keys"] += len(call.keys() - _CALL_KEYS)
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    raw = function.get("arguments")
    arguments = raw
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError:
            arguments = raw
    canon = arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    return ToolCall(id=str(call.get("id") or ""), name=str(function.get("name") or ""), arguments=canon,
                    raw_arguments=raw)


def _without_cache_control(tool: Any, fired: Counter) -> Any:
    """A tool without `cache_control` on it or on its function (never inside the parameter schema: a property
    may be called anything)."""
    if not isinstance(tool, dict):
        return tool
    fired["cache_control"] += "cache_control" in tool
    out = {k: v for k, v in tool.items() if k != "cache_control"}
    if isinstance(out.get("function"), dict):
        fired["cache_control"] += "cache_control" in out["function"]
        out["function"] = {k: v for k, v in out["function"].items() if k != "cache_control"}
    return out


def _texts(parts: list) -> list:
    return [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") in _TEXT_PARTS]


def _joined(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(t for t in _texts(content) if isinstance(t, str))
    return content or ""


def _present(raw: dict) -> set:
    return {k for k, v in raw.items() if v not in (None, "")}
