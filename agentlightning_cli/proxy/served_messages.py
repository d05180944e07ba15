"""A chat body's messages and tools as vLLM hands them to the chat template (vLLM 0.32: renderers/chat_utils.py
`_parse_chat_message_content` and `_postprocess_messages`, and `tool.model_dump()` of each request tool), so the
proxy can render requests with tools, tool calls and tool results in its own process (proxy/local_token_io.py).

What the server does to a message before the template sees it, and so what is done here:
- content becomes its text parts: a string is one part, None none. In the server's content format (detected from
  the template: "string" or "openai"), "string" joins the non-empty parts with newlines, "openai" keeps each part as
  `{"type": "text", "text": ...}` (empty ones too), except that a tool result's parts are joined with newlines.
- an assistant's tool calls are kept, their `arguments` parsed from JSON to a dict ({} when empty, not JSON or not
  an object); an empty tool_calls list is dropped.
- a tool message keeps its `tool_call_id`; any message its string `name`. Keys come in the server's order: role,
  content, tool_calls / tool_call_id, name.
- each tool becomes `{"type": "function", "function": {name, description, parameters[, strict]}}` (description
  and parameters None when absent; the server's serializers drop unknown keys and a None strict / defer_loading).

Anything else (images, reasoning fields, a billing-header system line the server strips, unknown keys, tool-call
arguments that are not a string) raises NotLocal: the server renders that request. Which content format the server
uses is not known here: local_token_io tries both against the server's renders and keeps what matches.
"""

from __future__ import annotations

import json

CONTENT_FORMATS = ("openai", "string")

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
_BILLING_HEADER = "x-anthropic-billing-header"  # vLLM strips this line from system text: left to the server


class NotLocal(Exception):
    """Something in the request the in-process render does not reproduce."""


def _texts(content) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            and p.keys() <= {"type", "text"} for p in content):
        return [p["text"] for p in content]
    raise NotLocal("content other than text")


def _arguments(text: str | None) -> dict:
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _tool_calls(calls) -> list[dict]:
    if not isinstance(calls, list):
        raise NotLocal("tool_calls is not a list")
    out = []
    for call in calls:
        if not isinstance(call, dict) or not call.keys() <= {"id", "type", "function"} \
                or call.get("type", "function") != "function":
            raise NotLocal("a tool call alight does not render")
        function = call.get("function")
        if not isinstance(function, dict) or not function.keys() <= {"name", "arguments"} \
                or not isinstance(function.get("name"), str) \
                or not isinstance(function.get("arguments"), (str, type(None))):
            raise NotLocal("a tool call's function alight does not render")
        out.append({**call, "function": {**function, "arguments": _arguments(function.get("arguments"))}})
    return out


def served_conversation(messages, content_format: str) -> list[dict]:
    """The messages as the server's template gets them in `content_format` ("openai" or "string")."""
    if not isinstance(messages, list) or not messages:
        raise NotLocal("no messages")
    out = []
    for message in messages:
        if not isinstance(message, dict) or not message.keys() <= _MESSAGE_KEYS:
            raise NotLocal("a message key alight does not render")
        role = message.get("role")
        if role not in _ROLES:
            raise NotLocal(f"role {role!r}")
        texts = _texts(message.get("content"))
        if role == "system" and any(t.startswith(_BILLING_HEADER) for t in texts):
            raise NotLocal("a billing header the server strips")
        if role == "tool" or content_format == "string":
            # A tool result's parts are joined in both formats; "openai" joins them all, "string" drops empty ones.
            content: str | list = "\n".join(texts if content_format == "openai" else [t for t in texts if t])
        else:
            content = [{"type": "text", "text": t} for t in texts]
        served: dict = {"role": role, "content": content}
        if message.get("tool_calls") is not None:
            if role != "assistant":
                raise NotLocal("tool calls outside an assistant turn")
            calls = _tool_calls(message["tool_calls"])
            if calls:
                served["tool_calls"] = calls
        if "tool_call_id" in message:
            if role != "tool" or not isinstance(message["tool_call_id"], str):
                raise NotLocal("a tool_call_id alight does not render")
            served["tool_call_id"] = message["tool_call_id"]
        if "name" in message:
            if not isinstance(message["name"], str):
                raise NotLocal("a name that is not a string")
            served["name"] = message["name"]
        out.append(served)
    return out


def served_tools(tools) -> list[dict]:
    """The request's tools as the server's template gets them."""
    if not isinstance(tools, list):
        raise NotLocal("tools is not a list")
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or not tool.keys() <= {"type", "function"} \
                or tool.get("type", "function") != "function":
            raise NotLocal("a tool alight does not render")
        function = tool.get("function")
        if not isinstance(function, dict) or not function.keys() <= {"name", "description", "parameters", "strict"} \
                or not isinstance(function.get("name"), str):
            raise NotLocal("a tool function alight does not render")
        description, parameters, strict = (function.get(k) for k in ("description", "parameters", "strict"))
        if not isinstance(description, (str, type(None))) or not isinstance(parameters, (dict, type(None))) \
                or not isinstance(strict, (bool, type(None))):
            raise NotLocal("a tool field of another type")
        served = {"name": function["name"], "description": description, "parameters": parameters}
        if strict is not None:
            served["strict"] = strict
        out.append({"type": "function", "function": served})
    return out


def plain(messages) -> bool:
    """Text turns only (system / user / assistant, string content, no other key): rendered as sent, in either
    content format (the shape's first render confirms it)."""
    return isinstance(messages, list) and bool(messages) and all(
        isinstance(m, dict) and m.get("role") in ("system", "user", "assistant") and isinstance(m.get("content"), str)
        and m.keys() <= {"role", "content"} for m in messages)


def kind(message: dict) -> tuple:
    """What decides how the server prepares a message, beyond its role: the content's form, how many tool calls
    (none, one, several), a tool_call_id, a name. () for a plain text turn."""
    content = message.get("content")
    if isinstance(content, str) and message.keys() <= {"role", "content"}:
        return ()
    form = "none" if content is None else ("empty" if content == "" else "text") if isinstance(content, str) \
        else f"parts{min(len(content), 2)}" if isinstance(content, list) else "other"
    calls = message.get("tool_calls")
    return (form, min(len(calls), 2) if isinstance(calls, list) else calls is not None,
            "tool_call_id" in message, "name" in message)
