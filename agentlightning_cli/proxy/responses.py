"""OpenAI Responses -> vLLM chat completions (request side).

The reply side (JSON and the SSE event sequence Codex needs) lives in `responses_reply.py` and is re-exported
here; with `request_to_chat` and `open_stream` this module is the Translator of translators.py (`error_body`,
from errors.py, is re-exported).

Translation choices (the client's full request is recorded anyway; `dropped` lists what did not reach vLLM):
* `instructions` and leading `system`/`developer` messages form one leading system message (joined with a
  blank line); later ones become `<system-reminder>` user text (see `chat_messages.py`).
* Text parts of one message are joined with "\\n". Image and file parts are dropped and recorded.
* Consecutive `function_call` items (and an assistant message right before them) form one assistant message.
* `reasoning` items and non-function tools (web_search, namespace, file_search, custom...) are dropped and
  recorded. `previous_response_id`/`conversation` are refused: the proxy keeps no server-side state.
"""

from __future__ import annotations

from typing import Any

from .chat_messages import ChatMessages, apply_tool_choice, convert_tools, copy_sampling
from .chat_messages import note as _note
from .errors import TranslationError
from .errors import responses_error_body as error_body  # noqa: F401  (re-exported interface)
from .responses_reply import StreamTranslator, response_from_chat  # noqa: F401  (re-exported interface)

PROTOCOL = "openai-responses"

_HANDLED = frozenset(
    {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
     "temperature", "top_p", "stream"}
)
_STATEFUL = ("previous_response_id", "conversation")
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def request_to_chat(body: dict) -> tuple[dict, dict]:
    """Client request -> (chat-completions body for vLLM, {what was dropped: value})."""
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    for key in _STATEFUL:
        if body.get(key) is not None:
            raise TranslationError(f"`{key}` is not supported: this proxy keeps no stored responses; "
                                   "send the whole conversation in `input`", key)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    elif not isinstance(items, list):
        raise TranslationError("`input` is required and must be a string or a list of items", "input")
    dropped: dict = {key: value for key, value in body.items() if key not in _HANDLED}
    builder = ChatMessages()
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise TranslationError("`instructions` must be a string", "instructions")
        builder.system(instructions)
    for i, item in enumerate(items):
        _item(item, f"input.{i}", builder, dropped)
    chat: dict = {"model": body.get("model"), "messages": builder.result()}
    _tools(body, chat, dropped)
    _sampling(body, chat)
    return chat, dropped


def open_stream(*, client_model: str | None, request: dict) -> StreamTranslator:
    return StreamTranslator(client_model=client_model, request=request)


def _item(item, where: str, builder: ChatMessages, dropped: dict) -> None:
    if not isinstance(item, dict):
        raise TranslationError("each input item must be an object", where)
    kind = item.get("type")
    if kind == "message" or (kind is None and "role" in item):
        _message(item, where, builder, dropped)
    elif kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
            raise TranslationError("a function_call item needs string `call_id`, `name` and `arguments`", where)
        builder.add_tool_call({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
    elif kind == "function_call_output":
        call_id = item.get("call_id")
        if not isinstance(call_id, str):
            raise TranslationError("a function_call_output item needs a string `call_id`", f"{where}.call_id")
        output = item.get("output")
        if isinstance(output, list):
            output = _text(output, f"{where}.output", dropped)
        elif not isinstance(output, str):
            raise TranslationError("`output` must be a string or a list of parts", f"{where}.output")
        builder.add({"role": "tool", "tool_call_id": call_id, "content": output})
    else:
        summary = {"type": kind}
        if kind == "reasoning":
            summary["summary_parts"] = len(item.get("summary") or ())
            summary["encrypted"] = bool(item.get("encrypted_content"))
        _note(dropped, "items", where, summary)


def _message(item: dict, where: str, builder: ChatMessages, dropped: dict) -> None:
    role, content = item.get("role"), item.get("content")
    if isinstance(content, list):
        content = _text(content, f"{where}.content", dropped)
    elif not isinstance(content, str):
        raise TranslationError("message `content` must be a string or a list of parts", f"{where}.content")
    if role in ("system", "developer"):
        builder.system(content)
    elif role == "user":
        builder.add({"role": "user", "content": content})
    elif role == "assistant":
        builder.add({"role": "assistant", "content": content})
    else:
        raise TranslationError(f"unknown role {role!r} (expected user, assistant, system or developer)",
                               f"{where}.role")


def _text(parts: list, where: str, dropped: dict) -> str:
    texts = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise TranslationError("content parts must be objects", f"{where}.{j}")
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            text = part.get("refusal") if kind == "refusal" else part.get("text")
            if not isinstance(text, str):
                raise TranslationError(f"a {kind} part needs a string", f"{where}.{j}")
            texts.append(text)
        else:
            _note(dropped, "parts", f"{where}.{j}", {"type": kind})
    return "\n".join(texts)


def _tools(body: dict, chat: dict, dropped: dict) -> None:
    def function_of(i: int, tool: Any) -> dict | None:
        if not isinstance(tool, dict):
            raise TranslationError("each tool must be an object", f"tools.{i}")
        if tool.get("type") != "function":
            _note(dropped, "tools", f"tools.{i}", {"type": tool.get("type"), "name": tool.get("name")})
            return None
        if not isinstance(tool.get("name"), str):
            raise TranslationError("a function tool needs a string `name`", f"tools.{i}.name")
        return {key: tool[key] for key in ("name", "description", "parameters", "strict") if tool.get(key) is not None}

    convert_tools(body, chat, function_of)
    choice = body.get("tool_choice")
    if choice is not None:
        if isinstance(choice, dict) and choice.get("type") == "function":
            if not isinstance(choice.get("name"), str):
                raise TranslationError("a function `tool_choice` needs a string `name`", "tool_choice.name")
            apply_tool_choice(chat, {"type": "function", "function": {"name": choice["name"]}}, "function")
        elif choice in ("auto", "none", "required"):
            apply_tool_choice(chat, choice, "function")
        else:
            dropped["tool_choice"] = choice  # hosted-tool or allowed_tools choices have no chat equivalent
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise TranslationError("`parallel_tool_calls` must be a boolean", "parallel_tool_calls")
        if "tools" in chat:
            chat["parallel_tool_calls"] = parallel


def _sampling(body: dict, chat: dict) -> None:
    copy_sampling(body, chat, "max_output_tokens", ("temperature", "top_p"))
