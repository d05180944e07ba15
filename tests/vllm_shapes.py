"""vLLM chat-completions replies (JSON and chunk sequences) in vLLM 0.32's exact field layout, for the
translator tests. A `Completion` describes one generation; both shapes are derived from it, so a stream and
its non-stream twin always describe the same tokens. vLLM-only fields (token ids, logprobs, stop_reason,
kv_transfer_params...) are present on purpose: translated output must never contain them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

CHAT_ID = "chatcmpl-9f2c41d07b5e4a6e"
CREATED = 1796000000
PROMPT_IDS = list(range(100, 137))
EOS = 2
VLLM_ONLY = ("token_ids", "prompt_token_ids", "logprobs", "prompt_logprobs", "stop_reason", "kv_transfer_params",
             "metrics", "prompt_text", "system_fingerprint", "routed_experts", "ec_transfer_params")


@dataclass
class Completion:
    text: list[str] = field(default_factory=list)        # content fragments, in stream order
    reasoning: list[str] = field(default_factory=list)   # reasoning fragments (come first)
    calls: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (id, name, argument fragments)
    finish_reason: str = "stop"
    stop_reason: int | str | None = EOS

    def token_count(self) -> int:
        fragments = len(self.text) + len(self.reasoning) + sum(1 + len(frags) for _, _, frags in self.calls)
        return fragments + (1 if self.finish_reason == "stop" else 0)


def _logprobs(n: int) -> dict:
    return {"content": [{"token": f"t{i}", "logprob": -0.25, "bytes": [116], "top_logprobs": []} for i in range(n)]}


def _usage(c: Completion) -> dict:
    n = c.token_count()
    return {"prompt_tokens": len(PROMPT_IDS), "total_tokens": len(PROMPT_IDS) + n, "completion_tokens": n,
            "prompt_tokens_details": None}


def chat_json(c: Completion) -> dict:
    """The non-stream `chat.completion` vLLM returns with return_token_ids and logprobs."""
    n = c.token_count()
    calls = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "".join(frags)}}
             for call_id, name, frags in c.calls]
    message = {"role": "assistant", "content": "".join(c.text) if c.text else None, "refusal": None,
               "annotations": None, "audio": None, "function_call": None, "tool_calls": calls,
               "reasoning": "".join(c.reasoning) if c.reasoning else None}
    return {"id": CHAT_ID, "object": "chat.completion", "created": CREATED, "model": "policy-r0",
            "choices": [{"index": 0, "message": message, "logprobs": _logprobs(n), "finish_reason": c.finish_reason,
                         "stop_reason": c.stop_reason, "token_ids": list(range(1000, 1000 + n))}],
            "service_tier": None, "system_fingerprint": None, "usage": _usage(c), "prompt_logprobs": None,
            "prompt_token_ids": PROMPT_IDS, "prompt_text": None, "kv_transfer_params": None}


def chat_chunks(c: Completion, usage: bool = True) -> list[dict]:
    """The `chat.completion.chunk` sequence vLLM streams for the same generation (one token per fragment)."""
    next_id = iter(range(1000, 10_000))

    def chunk(delta: dict, tokens: int = 1, finish: str | None = None, **extra) -> dict:
        ids = [next(next_id) for _ in range(tokens)]
        choice = {"index": 0, "delta": delta, "logprobs": _logprobs(tokens) if tokens else None,
                  "finish_reason": finish, "stop_reason": c.stop_reason if finish else None, "token_ids": ids}
        return {"id": CHAT_ID, "object": "chat.completion.chunk", "created": CREATED, "model": "policy-r0",
                "choices": [choice], **extra}

    chunks = [chunk({"role": "assistant", "content": ""}, tokens=0, prompt_token_ids=PROMPT_IDS, prompt_text=None)]
    chunks += [chunk({"reasoning": piece}) for piece in c.reasoning]
    chunks += [chunk({"content": piece}) for piece in c.text]
    for index, (call_id, name, frags) in enumerate(c.calls):
        chunks.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": frag}}]}) for frag in frags]
    chunks.append(chunk({"content": ""}, tokens=1 if c.finish_reason == "stop" else 0, finish=c.finish_reason))
    if usage:
        chunks.append({"id": CHAT_ID, "object": "chat.completion.chunk", "created": CREATED, "model": "policy-r0",
                       "choices": [], "usage": _usage(c)})
    return chunks


def split(text: str, size: int = 3) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def call(call_id: str, name: str, arguments: dict, size: int = 4) -> tuple[str, str, list[str]]:
    return call_id, name, split(json.dumps(arguments), size)


def walk_keys(value) -> set[str]:
    """Every dict key anywhere inside a JSON value."""
    keys: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            keys.update(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return keys
