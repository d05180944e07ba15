"""Sampling as sampled, without a server: the trainer's filters are vLLM 0.32's own (checked against its sampler
ops in the serving venv), each call's effective settings merge the model's generation_config.json when vLLM ran
with `--generation-config auto`, and penalised calls are left out of rows with a counted reason."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentlightning_cli.train.rows import RowContext, build_rows
from agentlightning_cli.train.sampling import effective_sampling, generation_defaults, processed_logps


def call(i: int, prompt: list[int], reply: list[int], **sampling) -> SimpleNamespace:
    return SimpleNamespace(id=f"c{i}", status="ok", sampling=sampling, prompt_token_ids=prompt,
                           completion_token_ids=reply, completion_logprobs=[-1.0] * len(reply))


@pytest.mark.parametrize("top_p,top_k,min_p", [(0.9, 0, 0.0), (1.0, 20, 0.0), (0.8, 40, 0.0), (0.9, 40, 0.05),
                                               (1.0, 0, 0.1)])
def test_processed_logprobs_are_vllms(top_p: float, top_k: int, min_p: float) -> None:
    torch = pytest.importorskip("torch")
    ops = pytest.importorskip("vllm.v1.sample.ops.topk_topp_sampler")
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5000, generator=gen) * 3
    temperature = 0.7
    # vLLM's order (sampler.py): temperature, min_p (logits_processor/builtin.py), top_k/top_p, log_softmax
    ref = logits / temperature
    if min_p:
        probs = ref.softmax(-1)
        ref = ref.masked_fill(probs < probs.amax(-1, keepdim=True) * min_p, float("-inf"))
    k = torch.full((6,), top_k, dtype=torch.long) if top_k else None
    p = torch.full((6,), top_p) if top_p < 1 else None
    expected = ops.apply_top_k_top_p_pytorch(ref.clone(), k, p, allow_cpu_sync=True).log_softmax(-1)
    labels = expected.argmax(-1)  # a token vLLM kept
    got, entropy = processed_logps(logits, labels, temperature, top_p, top_k, min_p, entropy=True)
    assert torch.allclose(got, expected.gather(-1, labels[:, None])[:, 0], atol=1e-5)
    assert torch.isfinite(entropy).all()
    # temperature alone (what the trainer did before) is measurably off whenever a filter drops mass
    plain = (logits / temperature).log_softmax(-1).gather(-1, labels[:, None])[:, 0]
    assert (got - plain).abs().mean() > 1e-3


def test_a_sampled_token_outside_the_trainers_kept_set_stays_finite() -> None:
    torch = pytest.importorskip("torch")
    logits = torch.tensor([[5.0, 4.0, 0.0, -1.0]], requires_grad=True)
    got, _ = processed_logps(logits, torch.tensor([3]), 1.0, top_k=2)
    got.sum().backward()
    assert torch.isfinite(got).all() and torch.isfinite(logits.grad).all()


def test_effective_sampling_sent_then_generation_config_then_neutral() -> None:
    defaults = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
    got = effective_sampling({"temperature": 0.3, "top_k": -1}, defaults)
    assert got["temperature"] == 0.3 and got["top_p"] == 0.8 and got["top_k"] == 0 and got["min_p"] == 0.0
    assert effective_sampling({}, None)["temperature"] == 1.0


def test_generation_defaults_read_the_models_generation_config_as_vllm_does(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05,
         "eos_token_id": 2}))
    assert generation_defaults("vllm", tmp_path) == {}
    got = generation_defaults("auto", tmp_path)
    assert got == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    assert generation_defaults(str(tmp_path), None) == got  # --generation-config FOLDER
    assert generation_defaults("auto", tmp_path / "none") == {}


def test_rows_carry_the_filters_and_split_where_they_change() -> None:
    calls = [call(0, [1, 2], [3, 4], temperature=0.7, top_p=0.9),
             call(1, [1, 2, 3, 4, 5], [6, 7], temperature=0.7, top_p=0.9),
             call(2, [1, 2, 3, 4, 5, 6, 7, 8], [9], temperature=0.7, top_k=20)]
    report = build_rows("e", calls, RowContext())
    assert [r.sampling for r in report.rows] == [(0.7, 0.9, 0, 0.0), (0.7, 1.0, 20, 0.0)]
    assert report.dropped["sampling_splits"] == 1 and not report.dropped["temperature_splits"]


def test_unsent_keys_take_the_generation_config_and_penalised_calls_are_left_out_counted() -> None:
    calls = [call(0, [1, 2], [3, 4]), call(1, [1, 2, 3, 4, 5], [6], repetition_penalty=1.1),
             call(2, [1, 2, 3, 4, 5, 6, 7], [8], top_k=5)]
    report = build_rows("e", calls, RowContext(sampling_defaults={"temperature": 0.7, "top_k": 20}))
    assert report.dropped["penalised_calls"] == 1  # its tokens stay as context of c2's row
    assert [(r.call_ids, r.sampling) for r in report.rows] == [(["c0"], (0.7, 1.0, 20, 0.0)),
                                                                 (["c2"], (0.7, 1.0, 5, 0.0))]
    assert report.rows[1].prompt_ids == [1, 2, 3, 4, 5, 6, 7]
    report = build_rows("e", calls[:1], RowContext(sampling_defaults={"repetition_penalty": 1.05}))
    assert not report.rows and report.dropped["penalised_calls"] == 1
