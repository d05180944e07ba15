"""Deterministic chat rendering and tokenisation for the fake upstream.

One token per Unicode code point (id = ord + 10) plus two special tokens, so token text is exact and a
conversation that extends call N renders to a prompt that starts with call N's prompt + completion ids —
the prefix property the store's prefix-delta relies on (it holds for real Qwen-style templates too).
"""

from __future__ import annotations

import json
from typing import Any

IM_START, IM_END = 1, 2
OFFSET = 10
SPECIAL_TEXT = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}


def text_ids(text: str) -> list[int]:
    return [ord(ch) + OFFSET for ch in text]


def token_text(token_id: int) -> str:
    if token_id in SPECIAL_TEXT:
        return SPECIAL_TEXT[token_id]
    code = token_id - OFFSET
    if 0 <= code < 0x110000 and not 0xD800 <= code < 0xE000:
        return chr(code)
    return f"<|reserved_{token_id}|>"


def content_text(content: Any) -> str:
    """Chat content may be a string or a list of parts; only text parts count here."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def assistant_text(content: str | None, tool_calls: list[dict] | None) -> str:
    """What the model 'generates' for a turn; the same function renders that turn when it comes back."""
    text = content or ""
    for call in tool_calls or []:
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        text += "\n<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}) + "\n</tool_call>"
    return text


def _block(role: str, text: str) -> list[int]:
    return [IM_START, *text_ids(f"{role}\n{text}"), IM_END, *text_ids("\n")]


def render_prompt(messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = True) -> list[int]:
    ids: list[int] = []
    if tools:
        ids += _block("system", "# Tools\n" + json.dumps(tools, sort_keys=True))
    for msg in messages:
        role = msg.get("role", "user")
        if role == "assistant":
            text = assistant_text(content_text(msg.get("content")), msg.get("tool_calls"))
        elif role == "tool":
            role, text = "user", "<tool_response>\n" + content_text(msg.get("content")) + "\n</tool_response>"
        else:
            text = content_text(msg.get("content"))
        ids += _block(role, text)
    if add_generation_prompt:
        ids += [IM_START, *text_ids("assistant\n")]
    return ids


def logprob_of(token_id: int, position: int) -> float:
    """A fixed, non-trivial logprob so tests can check alignment of logprobs with tokens."""
    return -round(((token_id * 7 + position * 3) % 97) / 100.0, 4)
