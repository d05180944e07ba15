"""The KV-cache size alight gives vLLM on CPU, where vLLM cannot size it itself.

vLLM refuses to start unless the cache holds one whole sequence of `--max-model-len` tokens, and a harness recipe
raises that length to what the harness needs (Claude Code 96k, Qwen Code 64k): a fixed size would fail there
("To serve at least one request with the model's max seq len ..."). Unset, `serve.kv_cache_bytes` is therefore
one such sequence, read from the model's config.json, with room for vLLM's block rounding, and never below the
floor a short context has always had.
"""

from __future__ import annotations

import json
from pathlib import Path

FLOOR_BYTES = 256 * 1024 * 1024
"""What every CPU server got before the size followed the context: a few short sequences at once."""
MARGIN = 1.1
"""vLLM allocates whole blocks and keeps a little for itself: 65,536 tokens at exactly their size held 65,408."""


def bytes_per_token(config: dict, dtype_bytes: int) -> int | None:
    """Keys and values of one token over every layer; None when config.json does not say (an unknown layout)."""
    config = config.get("text_config") or config  # a multimodal model's language half
    try:
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def cache_dtype_bytes(extra_args: list[str]) -> int:
    """4 when vLLM is told `--dtype float32`, else 2: with dtype `auto` vLLM casts a float32 checkpoint down to
    its platform's first 16-bit type, and the cache takes the model's dtype."""
    for i, arg in enumerate(extra_args):
        value = arg.split("=", 1)[1] if arg.startswith("--dtype=") else (
            extra_args[i + 1] if arg == "--dtype" and i + 1 < len(extra_args) else None)
        if value is not None:
            return 4 if value in ("float32", "float") else 2
    return 2


def cpu_kv_cache_bytes(model: Path, max_model_len: int, extra_args: list[str], configured: int | None) -> int:
    """`serve.kv_cache_bytes` when set; else one sequence of max_model_len tokens (with MARGIN), at least FLOOR."""
    if configured is not None:
        return configured
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return FLOOR_BYTES
    per_token = bytes_per_token(config, cache_dtype_bytes(extra_args))
    if per_token is None:
        return FLOOR_BYTES
    return max(FLOOR_BYTES, int(per_token * max_model_len * MARGIN))
