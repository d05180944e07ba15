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


def vllm_processed_logprobs(logits, temperature: float, top_p: float, top_k: int, min_p: float):
    """vLLM 0.32's own processed logprobs for `logits` (B, V): its Sampler.sample (temperature, then the argmax-
    invariant logits processors with its MinPLogitsProcessor, then TopKTopPSampler -> apply_top_k_top_p, then
    log_softmax), as a server with --logprobs-mode processed_logprobs computes them on this machine's platform."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.logits_processor.builtin import MinPLogitsProcessor
    from vllm.v1.sample.logits_processor.interface import BatchUpdate
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.sampler import Sampler

    rows = logits.size(0)
    config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=rows))
    min_p_processor = MinPLogitsProcessor(config, torch.device("cpu"), False)
    min_p_processor.update_state(BatchUpdate(batch_size=rows, removed=[], moved=[],
                                             added=[(i, SamplingParams(min_p=min_p), [], []) for i in range(rows)]))
    metadata = SamplingMetadata(
        temperature=torch.full((rows,), temperature), all_greedy=False, all_random=True,
        top_p=torch.full((rows,), top_p) if top_p < 1 else None,
        top_k=torch.full((rows,), top_k, dtype=torch.int32) if top_k else None, generators={},
        max_num_logprobs=None, no_penalties=True, prompt_token_ids=None, frequency_penalties=torch.zeros(rows),
        presence_penalties=torch.zeros(rows), repetition_penalties=torch.ones(rows),
        output_token_ids=[[] for _ in range(rows)], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors([min_p_processor]))
    _, processed = Sampler(logprobs_mode="processed_logprobs").sample(logits.clone(), metadata)
    return processed


@pytest.mark.parametrize("temperature,top_p,top_k,min_p", [(1.0, 1.0, 3, 0.0), (0.7, 1.0, 40, 0.0),
                                                           (1.0, 0.9, 0, 0.0), (0.7, 0.8, 40, 0.0),
                                                           (0.7, 0.9, 40, 0.05), (0.6, 0.95, 50, 0.02)])
def test_ties_on_the_top_k_and_top_p_boundaries_are_kept_as_vllm_keeps_them(temperature: float, top_p: float,
                                                                             top_k: int, min_p: float) -> None:
    """Logits on a grid of 0.25 (many exact ties, as bf16 logits have), labels ON the boundary: every copy of the
    least likely value vLLM kept, and the most likely tokens: the trainer's logprob of each is vLLM's. A kept set
    that differs by one tied token (kept by one, masked by the other) moves every kept token's logprob, so this
    compares the kept sets too."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm.v1.sample.sampler")
    gen = torch.Generator().manual_seed(0)
    logits = torch.cat([(torch.randn(8, 5000, generator=gen) * 12).round() / 4,
                        torch.tensor([[5.0, 4.0, 3.0, 3.0, 1.0] + [0.0] * 4995])])  # a tie AT the k-th (k=3)
    expected = vllm_processed_logprobs(logits, temperature, top_p, top_k, min_p)
    straddled = 0
    for row in range(logits.size(0)):
        kept = torch.isfinite(expected[row]).nonzero().flatten()
        boundary = logits[row, kept].min()
        straddled += int(bool((logits[row] == boundary).sum() > (logits[row, kept] == boundary).sum()))
        # every boundary copy vLLM kept, and the most likely tokens (any set difference moves their logprobs)
        top = kept[logits[row, kept].topk(min(3, len(kept))).indices]
        labels = torch.cat([kept[logits[row, kept] == boundary], top]).unique()
        got, _ = processed_logps(logits[row].expand(len(labels), -1), labels, temperature, top_p, top_k, min_p)
        assert torch.allclose(got, expected[row, labels], atol=1e-6), (row, (got - expected[row, labels]).abs().max())
    if top_p < 1:  # the case that matters: a tie split by the top-p boundary (one copy kept, another masked)
        assert straddled > 0


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


@pytest.mark.parametrize("body, found", [
    ({"tool_choice": "required", "tools": [{}]}, ["tool_choice"]),
    ({"tool_choice": {"type": "function", "function": {"name": "bash"}}}, ["tool_choice"]),
    ({"tool_choice": "auto"}, []),
    ({"tool_choice": "none"}, []),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}, ["response_format"]),
    ({"response_format": {"type": "json_object"}}, ["response_format"]),
    ({"response_format": {"type": "text"}}, []),
    ({"structured_outputs": {"regex": "a+"}}, ["structured_outputs"]),
    ({"structured_outputs": {"disable_any_whitespace": True}}, []),  # an option without a constraint
    ({"guided_json": {"type": "object"}, "guided_choice": ["a", "b"]}, ["guided_json", "guided_choice"]),
    ({"logit_bias": {"42": -100}}, ["logit_bias"]),
    ({"logit_bias": {}}, []),
    ({"min_tokens": 3}, ["min_tokens"]),  # vLLM masks EOS and stop ids for the first 3 tokens
    ({"min_tokens": 0}, []),
    ({"allowed_token_ids": [1, 2]}, ["allowed_token_ids"]),
    ({"bad_words": ["x"]}, ["bad_words"]),
    ({"bad_words": []}, []),
    ({"thinking_token_budget": 64}, ["thinking_token_budget"]),
    ({"use_beam_search": True, "watermarking": False}, ["use_beam_search"]),
    ({"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "stop": ["x"], "seed": 3, "n": 2}, []),
])
def test_constraints_name_what_changes_vllms_distribution(body: dict, found: list[str]) -> None:
    from agentlightning_cli.proxy.sampling_keys import constraints

    assert constraints(body) == found


def test_the_proxy_sends_every_modelled_key_and_records_the_constraints() -> None:
    from agentlightning_cli.config import SamplingOverrides
    from agentlightning_cli.proxy.chat import plan_chat

    body = {"model": "m", "messages": [], "tools": [{"type": "function", "function": {"name": "bash"}}],
            "temperature": 0.7, "logit_bias": {"5": 2.0}}
    plan = plan_chat(body, "policy-r0", SamplingOverrides(tool_choice="required"))
    assert plan.upstream["top_k"] == 0 and plan.upstream["repetition_penalty"] == 1.0
    assert plan.sampling == {"tool_choice": "required", "temperature": 0.7, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                             "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
                             "constraints": ["tool_choice", "logit_bias"]}
    # a hosted upstream (token ids off) gets no vLLM-only keys it may reject
    hosted = plan_chat({"model": "m", "messages": []}, None, SamplingOverrides(token_ids=False))
    assert "top_k" not in hosted.upstream and hosted.sampling == {"constraints": []}


def test_constrained_calls_are_left_out_counted_recorded_or_read_from_the_body_sent() -> None:
    calls = [call(0, [1, 2], [3, 4], temperature=0.7, constraints=[]),
             call(1, [1, 2, 3, 4, 5], [6], temperature=0.7, constraints=["tool_choice"]),
             call(2, [1, 2, 3, 4, 5, 6, 7], [8], temperature=0.7, tool_choice="required"),  # recorded before
             call(3, [1, 2, 3, 4, 5, 6, 7, 8, 9], [10], temperature=0.7),
             call(4, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [12], temperature=0.7)]
    calls[3].upstream_request = json.dumps({"min_tokens": 4, "temperature": 0.7}).encode()
    calls[4].upstream_request = json.dumps({"min_tokens": 0, "temperature": 0.7}).encode()
    report = build_rows("e", calls, RowContext())
    assert report.dropped["constrained_calls"] == 3
    # their tokens stay as context: the free calls after them continue one row
    assert [r.call_ids for r in report.rows] == [["c0", "c4"]]
    assert report.rows[0].mask == [1, 1] + [0] * 7 + [1]


@pytest.mark.parametrize("top, mode", [
    ([-0.31326168751822286, -1.3132616875182228, -9999.0, -9999.0, -9999.0], "processed"),
    ([-1e-7, -16.2, -9999.0, -9999.0, -9999.0], "processed"),  # a peaked distribution: the sum is still 1
    ([-1e-6, -14.0, -15.0, -16.0, -17.0], "raw"),  # raw, yet the top two hold all but ~1e-6: the 3rd decides
    ([-0.5, -1.2, -2.0, -2.5, -3.1], "raw"),
    ([5.25, 4.0, -9999.0, -9999.0, -9999.0], "logits"),  # processed_logits: masked, but no distribution
    ([-0.2, -1.7], "unknown"),
])
def test_the_logprobs_probe_reads_processed_raw_and_logits_apart(top: list[float], mode: str) -> None:
    from agentlightning_cli.proxy.logprobs_mode import classify, probe_body

    assert classify(top).mode == mode
    body = probe_body("m")  # temperature 1, never left to the server: at 0 vLLM skips top-k (greedy path)
    assert body["temperature"] == 1.0 and body["top_k"] == 2 and body["top_logprobs"] == 5
    assert body["repetition_penalty"] == 1.0 and body["min_p"] == 0.0
