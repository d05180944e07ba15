"""Chat-completions passthrough: ask vLLM for token ids and logprobs, keep them, hide them from the client.

The client sees what an OpenAI server would have sent for its own request: the fields vLLM adds
(`prompt_token_ids`, per-choice `token_ids`, `stop_reason`, ...) are removed, logprobs only appear when the
client asked, the usage chunk only when the client asked, and `model` is the name the client used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import orjson

# vLLM-only fields (not in OpenAI's schema); prompt_token_ids, token_ids and prompt_logprobs stay only when asked.
VLLM_TOP = ("prompt_text", "kv_transfer_params", "ec_transfer_params", "metrics")
VLLM_CHOICE = ("stop_reason", "routed_experts")
SAMPLING_KEYS = ("tool_choice", "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "n", "seed",
                 "stop", "presence_penalty", "frequency_penalty", "repetition_penalty", "top_logprobs")


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, like vLLM's own; orjson is ~5x cheaper per event than the json module."""
    try:
        return orjson.dumps(obj)
    except TypeError:  # ints past 64 bits and other things orjson refuses
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # NaN/Infinity or huge ints, which the json module accepts
        return json.loads(data)


def resolve_model(client_model: str | None, aliases: dict[str, str], policy: str | None) -> str | None:
    """The upstream name for what the client asked: an exact alias, then a wildcard alias, else the policy
    (no policy: the client's own name, for `alight proxy` in front of an arbitrary server)."""
    if client_model is not None and client_model in aliases:
        return aliases[client_model]
    for pattern, target in aliases.items():
        if "*" in pattern and client_model is not None and fnmatchcase(client_model, pattern):
            return target
    return aliases.get("*", policy if policy is not None else client_model)


@dataclass
class ChatPlan:
    """What the client asked for (to decide what to strip) and the body we send upstream."""

    client_model: str | None
    stream: bool
    want_logprobs: bool
    want_token_ids: bool
    want_prompt_logprobs: bool
    want_usage: bool
    upstream: dict
    sampling: dict
    top_drop: frozenset = frozenset()
    choice_drop: frozenset = frozenset()


def plan_chat(body: dict, model: str, sampling: Any) -> ChatPlan:
    """Rewrite a chat body for vLLM: policy model, token ids + logprobs, sampling overrides, stream usage."""
    up = dict(body)
    up["model"] = model
    if getattr(sampling, "token_ids", True):  # off only for an upstream that rejects them (run --upstream)
        up["logprobs"] = True
        up["return_token_ids"] = True
    if sampling.temperature is not None:
        up["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        up["top_p"] = sampling.top_p
    if sampling.tool_choice is not None and body.get("tools"):
        up["tool_choice"] = sampling.tool_choice
    cap = sampling.max_tokens_cap
    if cap is not None:
        keys = [k for k in ("max_completion_tokens", "max_tokens") if up.get(k) is not None]
        for key in keys:
            up[key] = min(up[key], cap)
        if not keys:
            up["max_tokens"] = cap
    stream = bool(body.get("stream"))
    options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
    if stream:
        up["stream_options"] = {**options, "include_usage": True}
    want_ids, want_prompt_logprobs = bool(body.get("return_token_ids")), body.get("prompt_logprobs") is not None
    top_drop = set(VLLM_TOP) | ({"prompt_token_ids"} if not want_ids else set())
    top_drop |= {"prompt_logprobs"} if not want_prompt_logprobs else set()
    return ChatPlan(
        client_model=body.get("model"),
        stream=stream,
        want_logprobs=bool(body.get("logprobs")),
        want_token_ids=want_ids,
        want_prompt_logprobs=want_prompt_logprobs,
        want_usage=bool(options.get("include_usage")),
        upstream=up,
        sampling={k: up[k] for k in SAMPLING_KEYS if up.get(k) is not None},
        top_drop=frozenset(top_drop),
        choice_drop=frozenset(VLLM_CHOICE) | (frozenset() if want_ids else {"token_ids"}),
    )


@dataclass
class Collected:
    """Token data gathered from vLLM's answer for the record (choice 0 only)."""

    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict | None = None
    error: str | None = None

    def add_choice(self, choice: dict) -> None:
        ids = choice.get("token_ids")
        if ids:
            self.completion_token_ids.extend(ids)
        logprobs = choice.get("logprobs")
        if logprobs and logprobs.get("content"):
            self.completion_logprobs.extend([entry["logprob"] for entry in logprobs["content"]])
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def add_chunk(self, chunk: dict) -> None:
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0:
                self.add_choice(choice)
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("error"):
            err = chunk["error"]
            self.error = err.get("message") if isinstance(err, dict) else str(err)


def strip_response(data: dict, plan: ChatPlan) -> None:
    """Make a vLLM chat answer (JSON body or stream chunk) look like what the client asked for, in place."""
    # Set intersections keep this cheap: it runs once per SSE event.
    for key in plan.top_drop.intersection(data):
        del data[key]
    if plan.client_model is not None and "model" in data:
        data["model"] = plan.client_model
    for choice in data.get("choices") or ():
        for key in plan.choice_drop.intersection(choice):
            del choice[key]
        if not plan.want_logprobs and choice.get("logprobs") is not None:
            choice["logprobs"] = None
        message = choice.get("message")
        if message is not None and message.get("reasoning", 0) is None:
            del message["reasoning"]


class ChatStreamReader:
    """Splits vLLM's SSE byte stream into events (they may straddle reads) and collects token data."""

    def __init__(self) -> None:
        self.collected = Collected()
        self.done = False
        self._buffer = b""

    def events(self, data: bytes) -> list[bytes]:
        """Complete `data: ...` payloads in `data`, after what was buffered."""
        buf = self._buffer + data if self._buffer else data
        parts = buf.split(b"\n\n")
        self._buffer = parts.pop()
        out = []
        for part in parts:
            if part.startswith(b"data: ") and b"\n" not in part:  # vLLM: one data line per event
                out.append(part[6:])
                continue
            for line in part.split(b"\n"):
                if line.startswith(b"data:"):
                    out.append(line[5:].strip())
        return out

    def parse(self, payload: bytes) -> dict | None:
        """The chunk as a dict after collecting its token data; None for `[DONE]` or junk."""
        if payload == b"[DONE]":
            self.done = True
            return None
        try:
            chunk = loads(payload)
        except ValueError:
            return None
        if isinstance(chunk, dict):
            self.collected.add_chunk(chunk)
            return chunk
        return None


class ChatStreamFilter(ChatStreamReader):
    """Passthrough: each upstream read becomes the stripped events it completes, ready to write."""

    def __init__(self, plan: ChatPlan) -> None:
        super().__init__()
        self.plan = plan

    def feed(self, data: bytes) -> bytes:
        out = []
        for payload in self.events(data):
            chunk = self.parse(payload)
            if chunk is None:
                if self.done:
                    out.append(b"data: [DONE]\n\n")
                continue
            if not chunk.get("choices") and chunk.get("usage") and not self.plan.want_usage:
                continue  # the usage chunk we asked for ourselves
            strip_response(chunk, self.plan)
            out.append(b"data: " + dumps(chunk) + b"\n\n")
        return b"".join(out)
