"""The text of a call's sampled tokens, where the store has it: vLLM reports each sampled token's string beside its
logprob (`choices[0].logprobs.content[i].token`), and the proxy keeps vLLM's whole answer for non-streamed calls
(`upstream_response`). A streamed call keeps only ids unless the client itself asked for logprobs (then they are in
the stream it saw). No tokenizer is loaded: where the text was not stored, views show ids.
"""

from __future__ import annotations

import json
from typing import Any

from agentlightning_cli.inspect.conversation import _events
from agentlightning_cli.store import Call


def _tokens(choice: dict[str, Any]) -> list[str]:
    content = (choice.get("logprobs") or {}).get("content") or []
    return [entry.get("token", "") for entry in content if isinstance(entry, dict)]


def completion_token_texts(call: Call) -> list[str] | None:
    """One string per completion token id, or None when the stored bodies do not carry them (or do not line up
    with the ids: then they would mislabel tokens)."""
    ids = call.completion_token_ids or []
    if not ids:
        return None
    texts: list[str] = []
    try:
        if call.upstream_response:
            data = json.loads(call.upstream_response)
            choice = next((c for c in data.get("choices") or [] if c.get("index", 0) == 0), None)
            texts = _tokens(choice) if choice else []
        elif call.stream and call.protocol == "openai-chat" and call.response:
            for _, chunk in _events(call.response):
                for choice in chunk.get("choices") or []:
                    if choice.get("index", 0) == 0:
                        texts += _tokens(choice)
    except (ValueError, AttributeError, TypeError):
        return None
    return texts if len(texts) == len(ids) else None
