"""Anthropic Messages -> vLLM chat completions (request side) and count_tokens.

The reply side (JSON and incremental SSE) lives in `anthropic_reply.py` and is re-exported here, so the server
uses one module per protocol (the Translator of translators.py): `request_to_chat`, `response_from_chat`,
`open_stream`; `error_body` (errors.py) is re-exported too.

Translation choices (the client's full request is recorded anyway; `dropped` lists what did not reach vLLM):
* Text blocks of one message are joined with "\\n"; the `x-anthropic-billing-header` system block (a per
  conversation hash, metadata rather than prompt) is dropped. System placement: see `chat_messages.py`.
* `tool_result` blocks become `tool` messages placed before the user's text of the same message, so they
  follow the assistant's tool calls as chat requires; `is_error: true` prefixes the text with "Error: ".
* A `tool_use` input of the form {"_raw": "<text>"} (how `anthropic_reply` returns arguments that were not a
  JSON object) goes back upstream as the raw text, so the model sees what it generated.
* Tools with `defer_loading: true` and server tools (no `input_schema`) are dropped and recorded.
* A final assistant message is a prefill: vLLM continues it (`continue_final_message`).
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from .anthropic_reply import StreamTranslator, response_from_chat  # noqa: F401  (re-exported interface)
from .chat_messages import ChatMessages, apply_tool_choice, convert_tools, copy_sampling
from .chat_messages import note as _note
from .errors import TranslationError
from .errors import anthropic_error_body as error_body  # noqa: F401  (re-exported interface)

PROTOCOL = "anthropic-messages"

_HANDLED = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "stop_sequences", "max_tokens", "temperature",
     "top_p", "top_k", "stream"}
)
_BILLING_HEADER = "x-anthropic-billing-header:"
_TOOL_FIELDS = frozenset({"name", "description", "input_schema", "type", "strict", "cache_control"})
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def request_to_chat(body: dict) -> tuple[dict, dict]:
    """Client request -> (chat-completions body for vLLM, {what was dropped: value})."""
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise TranslationError("`messages` is required and must be a list", "messages")
    dropped: dict = {key: value for key, value in body.items() if key not in _HANDLED}
    builder = ChatMessages()
    _system_field(body.get("system"), builder, dropped)
    for i, message in enumerate(messages):
        _message(message, f"messages.{i}", builder, dropped)
    chat: dict = {"model": body.get("model"), "messages": builder.result()}
    if chat["messages"] and chat["messages"][-1]["role"] == "assistant":
        chat["add_generation_prompt"] = False
        chat["continue_final_message"] = True
    _tools(body, chat, dropped)
    _sampling(body, chat)
    return chat, dropped


def open_stream(*, client_model: str | None, request: dict) -> StreamTranslator:
    return StreamTranslator(client_model=client_model, request=request)


def count_tokens_request(body: dict) -> dict:
    """A `/v1/messages/count_tokens` body -> the body for vLLM's `/tokenize` (same prompt rendering)."""
    chat, _ = request_to_chat({key: value for key, value in body.items() if key != "stream"})
    out = {"model": chat["model"], "messages": chat["messages"],
           "add_generation_prompt": chat.get("add_generation_prompt", True)}
    if chat.get("continue_final_message"):
        out["continue_final_message"] = True
    if "tools" in chat:
        out["tools"] = chat["tools"]
    return out


def _system_field(system, builder: ChatMessages, dropped: dict) -> None:
    if system is None:
        return
    if isinstance(system, str):
        builder.system(system)
        return
    if not isinstance(system, list):
        raise TranslationError("`system` must be a string or a list of text blocks", "system")
    builder.system(_texts(system, "system", dropped, skip_billing=True))


def _blocks(blocks: list, path: str, dropped: dict) -> Iterator[tuple[str, object, dict, str | None]]:
    """(where, type, block, its text for a text block) per content block, checked; `cache_control` noted."""
    for j, block in enumerate(blocks):
        where = f"{path}.{j}"
        if not isinstance(block, dict):
            raise TranslationError("content blocks must be objects", where)
        if "cache_control" in block:
            _note(dropped, "cache_control", where, block["cache_control"])
        kind, text = block.get("type"), None
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise TranslationError("a text block needs a string `text`", f"{where}.text")
        yield where, kind, block, text


def _texts(blocks: list, path: str, dropped: dict, skip_billing: bool = False) -> str:
    """Text of a list of content blocks where only text is meaningful (system, tool results)."""
    texts = []
    for where, _, block, text in _blocks(blocks, path, dropped):
        if text is None:
            _drop_block(block, where, dropped)
        elif skip_billing and text.startswith(_BILLING_HEADER):
            dropped["system_billing_header"] = text
        else:
            texts.append(text)
    return "\n".join(texts)


def _drop_block(block: dict, where: str, dropped: dict) -> None:
    kind = block.get("type")
    summary: dict = {"type": kind}
    if kind in ("thinking", "redacted_thinking"):
        summary["chars"] = len(block.get("thinking") or block.get("data") or "")
    elif isinstance(block.get("source"), dict):
        summary["source"] = {k: v for k, v in block["source"].items() if k != "data"}
    _note(dropped, "blocks", where, summary)


def _message(message, path: str, builder: ChatMessages, dropped: dict) -> None:
    if not isinstance(message, dict):
        raise TranslationError("each message must be an object", path)
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, (str, list)):
        raise TranslationError("`content` must be a string or a list of blocks", f"{path}.content")
    if role == "system":
        builder.system(content if isinstance(content, str) else _texts(content, f"{path}.content", dropped))
    elif role == "user":
        _user(content, path, builder, dropped)
    elif role == "assistant":
        _assistant(content, path, builder, dropped)
    else:
        raise TranslationError(f"unknown role {role!r} (expected user, assistant or system)", f"{path}.role")


def _user(content, path: str, builder: ChatMessages, dropped: dict) -> None:
    if isinstance(content, str):
        builder.add({"role": "user", "content": content})
        return
    texts = []
    for where, kind, block, text in _blocks(content, f"{path}.content", dropped):
        if text is not None:
            texts.append(text)
        elif kind == "tool_result":
            builder.add(_tool_result(block, where, dropped))
        else:
            _drop_block(block, where, dropped)
    if texts:
        builder.add({"role": "user", "content": "\n".join(texts)})


def _tool_result(block: dict, where: str, dropped: dict) -> dict:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise TranslationError("a tool_result block needs a string `tool_use_id`", f"{where}.tool_use_id")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = _texts(content, f"{where}.content", dropped)
    else:
        raise TranslationError("tool_result `content` must be a string or a list of blocks", f"{where}.content")
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _assistant(content, path: str, builder: ChatMessages, dropped: dict) -> None:
    if isinstance(content, str):
        builder.add({"role": "assistant", "content": content})
        return
    texts, calls = [], []
    for where, kind, block, text in _blocks(content, f"{path}.content", dropped):
        if text is not None:
            texts.append(text)
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise TranslationError("a tool_use block needs string `id` and `name`", where)
            arguments = _arguments(block.get("input"))
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        else:
            _drop_block(block, where, dropped)
    message: dict = {"role": "assistant", "content": "\n".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    builder.add(message)


def _arguments(value) -> str:
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("_raw"), str):
        return value["_raw"]
    return json.dumps({} if value is None else value, ensure_ascii=False)


def _tools(body: dict, chat: dict, dropped: dict) -> None:
    def function_of(i: int, tool: Any) -> dict | None:
        where = f"tools.{i}"
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise TranslationError("each tool must be an object with a string `name`", where)
        if "cache_control" in tool:
            _note(dropped, "cache_control", where, tool["cache_control"])
        if tool.get("defer_loading"):
            _note(dropped, "tools", tool["name"], "defer_loading")
            return None
        if not isinstance(tool.get("input_schema"), dict) or tool.get("type") not in (None, "custom"):
            _note(dropped, "tools", tool["name"], f"server tool {tool.get('type')!r}")
            return None
        function = {"name": tool["name"]}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        function["parameters"] = tool["input_schema"]
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
        for key in tool.keys() - _TOOL_FIELDS:
            _note(dropped, "tool_fields", f"{where}.{key}", tool[key])
        return function

    convert_tools(body, chat, function_of)
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "none", "tool"):
        raise TranslationError("`tool_choice.type` must be auto, any, tool or none", "tool_choice")
    if choice["type"] == "tool":
        if not isinstance(choice.get("name"), str):
            raise TranslationError("`tool_choice` of type tool needs a string `name`", "tool_choice.name")
        mapped: dict | str = {"type": "function", "function": {"name": choice["name"]}}
    else:
        mapped = _TOOL_CHOICES[choice["type"]]
    if apply_tool_choice(chat, mapped, "usable") and choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False


def _sampling(body: dict, chat: dict) -> None:
    copy_sampling(body, chat, "max_tokens", ("temperature", "top_p", "top_k"))
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise TranslationError("`stop_sequences` must be a list of strings", "stop_sequences")
        if stop:
            chat["stop"] = stop
