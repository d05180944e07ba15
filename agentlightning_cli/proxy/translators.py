"""The protocols the proxy translates to chat completions and back, in one static table.

A translator (a module: anthropic.py, responses.py, gemini.py) turns a client request into a chat-completions body plus
what it dropped, a whole chat completion into the client's reply, and opens a StreamTranslator that turns
parsed `chat.completion.chunk`s into the client's events. The chat passthrough is a StreamTranslator too
(passthrough.py), so one stream loop (relay.py) serves every protocol. Error shapes live in errors.py: paths
that translate nothing need them as well.
"""

from __future__ import annotations

from typing import Protocol

from agentlightning_cli.proxy import anthropic, gemini, responses


class StreamTranslator(Protocol):
    def feed(self, chunk: dict) -> bytes:
        """The client's bytes for one upstream chunk (may be empty)."""
        ...

    def finish(self) -> bytes:
        """The closing events once the upstream sent [DONE]."""
        ...

    def fail(self, message: str) -> bytes:
        """The closing events when the stream broke (`message` says why)."""
        ...


class Translator(Protocol):
    def request_to_chat(self, body: dict) -> tuple[dict, dict]:
        """Client request -> (chat-completions body, {what was dropped: value}); TranslationError if it cannot."""
        ...

    def response_from_chat(self, chat: dict, *, client_model: str | None, request: dict) -> dict:
        """A whole chat completion -> the client's reply JSON."""
        ...

    def open_stream(self, *, client_model: str | None, request: dict) -> StreamTranslator:
        ...


# Each module is checked against the Protocol here (a type checker matches a module's functions to its methods).
_ANTHROPIC: Translator = anthropic
_RESPONSES: Translator = responses
_GEMINI: Translator = gemini
TRANSLATORS: dict[str, Translator] = {anthropic.PROTOCOL: _ANTHROPIC, responses.PROTOCOL: _RESPONSES,
                                      gemini.PROTOCOL: _GEMINI}
