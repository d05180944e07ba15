"""Chat-completions passthrough: ask vLLM for token ids and logprobs, keep them, hide them from the client.

The client sees what an OpenAI server would have sent for its own request: the fields vLLM adds
(`prompt_token_ids`, per-choice `token_ids`, `stop_reason`, ...) are removed, logprobs only appear when the
client asked, the usage chunk only when the client asked, and `model` is the name the client used.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from agentlightning_cli.config import SamplingOverrides
from agentlightning_cli.proxy.sampling_keys import constraints, explicit_neutral

# vLLM-only fields (not in OpenAI's schema); prompt_token_ids, token_ids and prompt_logprobs stay only when asked.
VLLM_TOP = ("prompt_text", "kv_transfer_params", "ec_transfer_params", "metrics")
VLLM_CHOICE = ("stop_reason", "routed_experts")
SAMPLING_KEYS = ("tool_choice", "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "n", "seed",
                 "stop", "presence_penalty", "frequency_penalty", "repetition_penalty", "top_logprobs")


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


def plan_chat(body: dict, model: str | None, sampling: SamplingOverrides, seed: int | None = None,
              tokens_left: int | None = None) -> ChatPlan:
    """Rewrite a chat body for vLLM: policy model, token ids + logprobs, sampling overrides, every sampling key the
    trainer models at its neutral value when unsent (proxy/sampling_keys.py), stream usage, and
    the episode's seed in a seeded run (it replaces a client's own `seed`: a harness that sends a fixed one
    would otherwise make every attempt of a task sample alike). `tokens_left`, the episode's completion-token
    budget still open, bounds max_tokens like `max_tokens_cap` (the smaller wins)."""
    up = dict(body)
    up["model"] = model
    if seed is not None:
        up["seed"] = seed
    if getattr(sampling, "token_ids", True):  # off only for an upstream that rejects them (run --upstream)
        up["logprobs"] = True
        up["return_token_ids"] = True
    if sampling.temperature is not None:
        up["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        up["top_p"] = sampling.top_p
    if sampling.tool_choice is not None and body.get("tools"):
        up["tool_choice"] = sampling.tool_choice
    if getattr(sampling, "token_ids", True):  # vLLM: never let a server's generation_config.json fill a key in
        explicit_neutral(up)
    caps = [c for c in (sampling.max_tokens_cap, tokens_left) if c is not None]
    cap = min(caps) if caps else None
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
        # `constraints` always recorded ([] for none): a call without the key was recorded before alight looked.
        sampling={**{k: up[k] for k in SAMPLING_KEYS if up.get(k) is not None}, "constraints": constraints(up)},
        top_drop=frozenset(top_drop),
        choice_drop=frozenset(VLLM_CHOICE) | (frozenset() if want_ids else {"token_ids"}),
    )


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
