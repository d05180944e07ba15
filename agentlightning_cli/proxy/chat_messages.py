"""Builds a chat-completions `messages` list from another protocol's conversation (shared by the translators).

Placement of system text is the one decision every chat template cares about:

* System text that comes before any conversation turn (Anthropic `system`, leading `role: "system"` messages,
  Responses `instructions` and leading `system`/`developer` messages) becomes ONE leading system message.
* System text in the middle of a conversation (Claude Code's `role: "system"` messages, a later Codex
  `developer` message) becomes user-role text wrapped in `<system-reminder>` tags, appended to the preceding
  user message when the last message is one, else a new user message. Many chat templates reject or
  misplace a system message after the first position, and the translator cannot see the template, so it
  never emits one. Appending to the *preceding* message (rather than prepending to the next) keeps every
  call's prompt a prefix of the next call's, which exact token-prefix merging of training rows relies on.
  The tag is the convention Claude Code itself uses for such reminders with first-party model names.
  Right after an assistant's tool calls (or among their results) the reminder waits until the tool results
  are in, because chat requires the `tool` messages to follow the calls directly; it then opens the next
  user message (or becomes one).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from .errors import TranslationError

REMINDER_OPEN = "<system-reminder>"


def as_reminder(text: str) -> str:
    if text.lstrip().startswith(REMINDER_OPEN):
        return text
    return f"{REMINDER_OPEN}\n{text}\n</system-reminder>"


class ChatMessages:
    """Accumulates chat messages; `parts_joiner` joins the text parts of one message."""

    __slots__ = ("messages", "_system", "_pending", "_started", "_joiner")

    def __init__(self, parts_joiner: str = "\n") -> None:
        self.messages: list[dict] = []
        self._system: list[str] = []
        self._pending: list[str] = []  # reminders waiting for tool results to end
        self._started = False
        self._joiner = parts_joiner

    def system(self, text: str) -> None:
        """System text at this point of the conversation (leading or mid-conversation, see module doc)."""
        if not text:
            return
        if not self._started:
            self._system.append(text)
            return
        reminder = as_reminder(text)
        last = self.messages[-1] if self.messages else None
        if last is not None and (last["role"] == "tool" or last.get("tool_calls")):
            self._pending.append(reminder)
        elif last is not None and last["role"] == "user" and isinstance(last.get("content"), str):
            last["content"] = f"{last['content']}{self._joiner}{reminder}"
        else:
            self.messages.append({"role": "user", "content": reminder})

    def add(self, message: dict) -> dict:
        if not self._started:
            self._start()
        if self._pending and message["role"] != "tool":
            reminders, self._pending = self._joiner.join(self._pending), []
            if message["role"] == "user" and isinstance(message.get("content"), str):
                message["content"] = f"{reminders}{self._joiner}{message['content']}"
            else:
                self.messages.append({"role": "user", "content": reminders})
        self.messages.append(message)
        return message

    def add_tool_call(self, call: dict) -> None:
        """Attach a tool call to the assistant message that ends the list, or open one: consecutive calls of
        one model turn arrive as separate items (Responses) but chat wants them on one message."""
        last = self.messages[-1] if self._started and self.messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
            if last.get("content") == "":
                last["content"] = None
        else:
            self.add({"role": "assistant", "content": None, "tool_calls": [call]})

    def result(self) -> list[dict]:
        if not self._started:
            self._start()
        if self._pending:
            self.messages.append({"role": "user", "content": self._joiner.join(self._pending)})
            self._pending = []
        return self.messages

    def _start(self) -> None:
        self._started = True
        if self._system:
            self.messages.append({"role": "system", "content": "\n\n".join(self._system)})


def copy_sampling(body: dict, chat: dict, max_key: str, number_keys: tuple[str, ...]) -> None:
    """Validate and copy what both protocols share: the token limit (under its own name), numeric sampling
    settings, and `stream` (streams always ask vLLM for usage, which the translated reply reports)."""
    max_tokens = body.get(max_key)
    if max_tokens is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise TranslationError(f"`{max_key}` must be a positive integer", max_key)
        chat["max_tokens"] = max_tokens
    for key in number_keys:
        value = body.get(key)
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TranslationError(f"`{key}` must be a number", key)
            chat[key] = value
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise TranslationError("`stream` must be a boolean", "stream")
    chat["stream"] = stream
    if stream:
        chat["stream_options"] = {"include_usage": True}


def note(dropped: dict, group: str, where: str, value: Any) -> None:
    """Record in `dropped` (kept with the call) something of the client's request that did not reach vLLM."""
    dropped.setdefault(group, {})[where] = value


def convert_tools(body: dict, chat: dict, function_of: Callable[[int, Any], dict | None]) -> None:
    """The client's `tools` -> chat function tools; `function_of(i, tool)` is a tool's function, or None for one
    it dropped (and noted)."""
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise TranslationError("`tools` must be a list", "tools")
    converted = []
    for i, tool in enumerate(tools):
        function = function_of(i, tool)
        if function is not None:
            converted.append({"type": "function", "function": function})
    if converted:
        chat["tools"] = converted


def apply_tool_choice(chat: dict, mapped: Any, kind: str) -> bool:
    """Set chat's `tool_choice` when there are tools to choose from (vLLM rejects it otherwise); a choice that
    forces a call without any `kind` tools is the client's error. True when it was set."""
    if mapped is None:
        return False
    if "tools" in chat:
        chat["tool_choice"] = mapped
        return True
    if mapped in ("auto", "none"):
        return False
    raise TranslationError(f"`tool_choice` forces a tool call but no {kind} tools were given", "tool_choice")


def arguments_object(arguments: Any) -> dict:
    """A chat tool call's `arguments` (a JSON string, as vLLM returns them) as the object Anthropic's `input` and
    Gemini's `args` must be: an object passes, empty is {}, and text that is not a JSON object (a model's broken
    call) is kept whole under `_raw` rather than dropped."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}
