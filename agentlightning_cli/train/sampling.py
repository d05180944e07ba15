"""Sampling as vLLM sampled: each call's effective sampling settings, and its tokens' logprobs computed the way
vLLM 0.32 computes `--logprobs-mode processed_logprobs`, so the trainer scores what was actually sampled from.

Effective settings: what the call sent upstream (`calls.sampling`), else the model's generation_config.json
defaults when vLLM ran with `--generation-config auto` or a folder (vLLM's ModelConfig.get_diff_sampling_param:
GenerationConfig.to_diff_dict() restricted to the sampling keys), else vLLM's neutral values.

Processed logprobs (vllm/v1/sample/sampler.py, ops/topk_topp_sampler.py, logits_processor/builtin.py), in order:
penalties, temperature, min_p (masks tokens with prob < min_p x max prob), top_k (keeps logits >= the k-th
largest, ties kept), top_p (sorted ascending, masks tokens whose cumulative prob <= 1 - top_p, never the most
likely), then log_softmax over what is left. Penalties depend on the whole output history (and repetition on
the prompt), so calls with them are not trained (rows.usable_calls counts them as `penalised_calls`); nor are
calls vLLM sampled under a constraint (forced tool calls, structured outputs, logit bias, min_tokens, ...:
proxy/sampling_keys.py), counted as `constrained_calls`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentlightning_cli.proxy.sampling_keys import NEUTRAL, constraints

PENALTIES = ("presence_penalty", "frequency_penalty", "repetition_penalty")
# What vLLM takes from a generation_config.json (get_diff_sampling_param's available_params, less max tokens).
GENERATION_CONFIG_KEYS = ("repetition_penalty", "presence_penalty", "frequency_penalty", "temperature", "top_k",
                          "top_p", "min_p")


def effective_sampling(sent: dict[str, Any] | None, defaults: dict[str, Any] | None = None) -> dict[str, float]:
    """The settings vLLM sampled with: sent values, else `defaults` (generation_config.json), else neutral."""
    out: dict[str, float] = dict(NEUTRAL)
    for layer in (defaults or {}, sent or {}):
        out.update({k: layer[k] for k in NEUTRAL if layer.get(k) is not None})
    out["temperature"] = float(out["temperature"])
    out["top_p"] = float(out["top_p"])
    out["min_p"] = float(out["min_p"])
    out["top_k"] = max(0, int(out["top_k"]))  # vLLM: 0 and -1 both mean no top-k
    return out


def is_penalised(settings: dict[str, float]) -> bool:
    return any(float(settings[k]) != NEUTRAL[k] for k in PENALTIES)


def call_constraints(call: Any) -> list[str]:
    """What constrained vLLM's sampling of a stored call ([] for nothing): recorded by the proxy with its sampling;
    for a call recorded before it looked, read from the body it sent upstream (else the recorded tool_choice)."""
    recorded = (call.sampling or {}).get("constraints")
    if recorded is not None:
        return list(recorded)
    body = getattr(call, "upstream_request", None)
    if body:
        try:
            sent = json.loads(body)
        except ValueError:
            sent = None
        if isinstance(sent, dict):
            return constraints(sent)
    return constraints(call.sampling or {})


def filters_of(settings: dict[str, float]) -> tuple[float, int, float]:
    """(top_p, top_k, min_p): what the trainer must apply after the temperature."""
    return settings["top_p"], settings["top_k"], settings["min_p"]


def generation_defaults(source: str, model_dir: Path | str | None) -> dict[str, Any]:
    """The sampling defaults vLLM applied to unsent keys under `--generation-config source`: {} for "vllm"; the
    generation_config.json of the served model ("auto") or of the folder `source`, read as vLLM reads it."""
    if source == "vllm":
        return {}
    folder = model_dir if source == "auto" else source
    if folder is None or not (Path(folder) / "generation_config.json").is_file():
        return {}
    from transformers import GenerationConfig

    config = GenerationConfig.from_pretrained(str(folder), local_files_only=True).to_diff_dict()
    return {k: config[k] for k in GENERATION_CONFIG_KEYS if config.get(k) is not None}


def processed_logps(logits: Any, labels: Any, temperature: float, top_p: float = 1.0, top_k: int = 0,
                    min_p: float = 0.0, entropy: bool = False) -> tuple[Any, Any]:
    """(logprob of each label, entropy or None) under vLLM's processed distribution. logits (..., V), labels (...).
    Differentiable in logits. The label itself is never masked: at a boundary where float differences between
    engines put the sampled token just outside the trainer's kept set, its logprob stays finite (the importance
    weight then sees the mismatch) instead of -inf turning the loss into NaN."""
    import torch

    logits = logits.float() / temperature
    vocab = logits.size(-1)
    flat = logits.reshape(-1, vocab)
    label = labels.reshape(-1, 1)
    with torch.no_grad():
        # vLLM's own steps, op for op (builtin.MinPLogitsProcessor.apply, topk_topp_sampler.apply_top_k_top_p_pytorch
        # / apply_top_k_only): with top-p, ONE ascending sort of the min-p-masked logits, then top-k and top-p in
        # that order. Sorting the same tensor puts tied logits in the same order, so a tie that straddles the top-p
        # boundary keeps the same copy vLLM kept (sorting after the top-k mask, as this did before, can keep another).
        kept = flat
        if min_p > 0:
            probs = kept.softmax(-1)
            kept = kept.masked_fill(probs < probs.amax(-1, keepdim=True) * min_p, float("-inf"))
        if top_p < 1.0:
            ascending, order = kept.sort(dim=-1, descending=False)
            if 0 < top_k < vocab:
                ascending = ascending.masked_fill(ascending < ascending[:, vocab - top_k:vocab - top_k + 1],
                                                  float("-inf"))
            below = ascending.softmax(-1).cumsum(-1) <= 1 - top_p
            below[:, -1] = False  # at least one
            kept = kept.scatter(-1, order, ascending.masked_fill(below, float("-inf")))
        elif 0 < top_k < vocab:
            kept = kept.masked_fill(kept < kept.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
        drop = torch.isinf(kept) & ~torch.isinf(flat)
        drop.scatter_(-1, label, False)
    logp = flat.masked_fill(drop, float("-inf")).log_softmax(-1)
    out = logp.gather(-1, label).reshape(labels.shape)
    ent = None
    if entropy:
        p = logp.exp()
        ent = -(p * torch.where(drop, torch.zeros_like(logp), logp)).sum(-1).reshape(labels.shape)
    return out, ent
