"""Each REAL harness, unmodified, through the real proxy and store against the scripted upstream.

The scripted model drives one shell tool call that writes out.txt, then the harness's own way of finishing
(Aider, a text-mode harness: a file listing it rejects, then one it writes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_support import HARNESSES, installed, scripted

from agentlightning_cli.testing.proxy_env import SmokeEnvironment
from agentlightning_cli.scripted.harness_scripts import AIDER_NO_FILENAME, OUT_FILE, OUT_TEXT

pytestmark = pytest.mark.harness
PROMPT = f"Create {OUT_FILE} containing: {OUT_TEXT}"
# How each protocol hands a tool's result back: a chat message's role, a Messages content block's or a Responses
# input item's type; Gemini's is a part's key.
TOOL_RESULT = {"openai-chat": "tool", "anthropic-messages": "tool_result", "openai-responses": "function_call_output",
               "gemini-generate-content": "functionResponse"}


def _roles_and_types(body: object) -> set[str]:
    """Every `role` and `type` value anywhere in a request body, and Gemini's `functionResponse` part key."""
    found: set[str] = set()
    stack = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found |= {str(item[k]) for k in ("role", "type") if isinstance(item.get(k), str)}
            found |= {"functionResponse"} & item.keys()
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
    return found


@pytest.mark.parametrize("name", HARNESSES)
async def test_harness_runs_one_tool_call_then_finishes(name: str, tmp_path: Path) -> None:
    recipe, inst = installed(name)
    async with SmokeEnvironment(tmp_path / "run", scripted(recipe)) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", PROMPT, timeout_s=240)
        other = env.new_episode(recipe, tmp_path / "idle-ws", PROMPT)  # registered, never run
        outcome = await env.run(recipe, inst, spec)
        calls = env.store.get_calls(spec.episode_id)
        assert env.store.get_calls(other.episode_id) == []
    assert outcome.status == "finished", (outcome.reason, Path(outcome.stderr_path).read_text()[-2000:])
    assert outcome.exit_code == 0 and outcome.calls == len(calls) >= 2
    assert (spec.workspace / OUT_FILE).read_text() == OUT_TEXT + "\n"
    assert [c.seq for c in calls] == list(range(len(calls)))
    for call in calls:
        assert call.episode_id == spec.episode_id
        assert call.protocol == recipe.protocol and call.status == "ok"
        assert call.prompt_token_ids and call.completion_token_ids
        assert call.completion_logprobs and len(call.completion_logprobs) == len(call.completion_token_ids)
    # The last call carries the tool's result in the protocol's own form (the first does not): the harness really
    # ran the command and reported back.
    if recipe.tool_calls:
        # `alight harness check` does not name the harness: it tells it from the tools the request offers (as chat
        # completions, after the proxy's translation) and must pick the same shell tool the script used here.
        from agentlightning_cli.scripted.harness_scripts import SHELL_TOOLS, detect

        guessed = detect(json.loads(calls[0].upstream_request))
        assert guessed and SHELL_TOOLS[guessed] == SHELL_TOOLS[name], (name, guessed)
        marker = TOOL_RESULT[recipe.protocol]
        assert marker not in _roles_and_types(json.loads(calls[0].client_request))
        assert marker in _roles_and_types(json.loads(calls[-1].client_request)), calls[-1].client_request[:2000]
    else:  # text mode (Aider): no tools offered; its verdict on the first reply comes back as a user message
        first, last = json.loads(calls[0].client_request), json.loads(calls[-1].client_request)
        assert not first.get("tools") and not last.get("tools")
        # No temperature sent (Aider's default for an unknown model is 0: greedy calls are never trained).
        assert "temperature" not in first and "temperature" not in last
        assert AIDER_NO_FILENAME not in json.dumps(first["messages"][-1])
        assert AIDER_NO_FILENAME in json.dumps(last["messages"][-1]) and last["messages"][-1]["role"] == "user"
    assert len(calls[-1].prompt_token_ids) > len(calls[0].prompt_token_ids)
    # Logs land in the run's log folder; the key never appears in the harness's argv-visible output.
    assert Path(outcome.stdout_path) == tmp_path / "run" / "logs" / "episodes" / f"{spec.episode_id}.stdout"
    assert outcome.first_call_s is not None and 0 <= outcome.first_call_s <= outcome.wall_s


@pytest.mark.parametrize("name", ["openhands", "claude-code", "opencode", "qwen-code", "gemini-cli", "kilo-code",
                                  "mistral-vibe"])
async def test_upstream_error_is_a_harness_error_even_with_exit_code_zero(name: str, tmp_path: Path) -> None:
    recipe, inst = installed(name)
    bad = lambda body: {"error": {"status": 400, "message": "scripted bad request"}}  # noqa: E731
    async with SmokeEnvironment(tmp_path / "run", bad) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", PROMPT, timeout_s=240)
        outcome = await env.run(recipe, inst, spec)
        calls = env.store.get_calls(spec.episode_id)
    assert outcome.status == "harness_error", outcome
    assert calls and all(c.http_status == 400 for c in calls)
    if name == "openhands":
        assert outcome.exit_code == 0  # the trap: only the event stream tells
        assert "ConversationErrorEvent" not in outcome.reason and "LLMBadRequestError" in outcome.reason
    elif name == "qwen-code":
        assert outcome.exit_code == 0  # the trap: a `success` result whose text is "[API Error: ...]"
        assert outcome.reason == "qwen-code: [API Error: 400 scripted bad request]"
    elif name == "mistral-vibe":  # read from its export.json: outcome infrastructure_failure (exit code 2)
        assert outcome.reason.startswith("mistral-vibe: infrastructure failure") and "400" in outcome.reason, outcome
        assert outcome.exit_code == 2
    else:
        assert "400" in outcome.reason


@pytest.mark.parametrize("name", ["claude-code", "gemini-cli", "mistral-vibe"])
async def test_turn_limit_is_reported_as_finished_at_the_limit(name: str, tmp_path: Path) -> None:
    from agentlightning_cli.scripted.harness_scripts import endless

    recipe, inst = installed(name)
    async with SmokeEnvironment(tmp_path / "run", endless(name)) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", PROMPT, timeout_s=120, max_turns=3)
        outcome = await env.run(recipe, inst, spec)
    assert outcome.status == "finished" and outcome.turn_limit_reached, outcome
    assert outcome.calls == 3


async def test_kilo_code_step_limit_lands_on_its_code_agent(tmp_path: Path) -> None:
    """Kilo's primary agent is `code` (OpenCode's `build`; Kilo takes that name for it too): its `steps` is the
    recipe's turn limit (without it no limit message comes). Soft, as in OpenCode: from the limit on it asks for a
    text-only answer but still offers its tools, so a model that keeps calling them is stopped by the call budget."""
    from agentlightning_cli.config import Budgets, ProxySettings
    from agentlightning_cli.scripted.harness_scripts import endless

    recipe, inst = installed("kilo-code")
    settings = ProxySettings(budgets=Budgets(max_calls=3))
    async with SmokeEnvironment(tmp_path / "run", endless("kilo-code"), proxy_settings=settings) as env:
        spec = env.new_episode(recipe, tmp_path / "ws", PROMPT, timeout_s=120, max_turns=2)
        outcome = await env.run(recipe, inst, spec)
        calls = env.store.get_calls(spec.episode_id)
    assert outcome.status == "budget_exceeded", outcome
    last_user = [json.dumps(json.loads(c.client_request)["messages"][-1]) for c in calls]
    assert "MAXIMUM STEPS REACHED" not in last_user[0]
    assert all("MAXIMUM STEPS REACHED" in text for text in last_user[1:]), last_user
    assert all(json.loads(c.client_request).get("tools") for c in calls)  # soft: the tools are still offered
