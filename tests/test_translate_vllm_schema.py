"""Every translated request is one vLLM's own request models accept (chat completions and /tokenize), with the
fields the proxy adds. Uses vLLM's pydantic models directly, no server: importing them takes ~10 s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.proxy import anthropic, responses

CAPTURES = Path(__file__).parent / "data" / "captures"
TOOL = {"name": "Bash", "description": "run", "input_schema": {"type": "object", "properties": {
    "command": {"type": "string"}}, "required": ["command"]}}
ANTHROPIC_VARIANTS = [
    {"tool_choice": {"type": "any"}}, {"tool_choice": {"type": "tool", "name": "Bash"}},
    {"tool_choice": {"type": "none"}}, {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
    {"stop_sequences": ["</x>"], "top_k": 5, "top_p": 0.5, "stream": False},
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]},
    {"messages": [{"role": "user", "content": "go"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash",
                                                     "input": {"_raw": "{bad"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": True,
                                               "content": [{"type": "text", "text": "no"}]}]}]},
]
RESPONSES_VARIANTS = [
    {"tool_choice": "required"}, {"tool_choice": {"type": "function", "name": "exec_command"}},
    {"tool_choice": "none", "parallel_tool_calls": False}, {"instructions": "Be brief.", "max_output_tokens": 9},
    {"input": "just text", "stream": False, "temperature": 0.3, "top_p": 0.8},
]


def captured(name: str) -> dict:
    return json.loads((CAPTURES / name).read_text())["body"]


def as_sent(chat: dict) -> dict:
    """What the proxy adds before forwarding (server side): token ids and logprobs, the policy name."""
    return dict(chat, model="policy-r0", return_token_ids=True, logprobs=True)


@pytest.fixture(scope="module")
def vllm_models():
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.serve.tokenize.protocol import TokenizeChatRequest
    return ChatCompletionRequest, TokenizeChatRequest


def anthropic_bodies():
    for name in ("claude-code-request-2.json", "claude-code-2.1.332-request-2.json",
                 "claude-code-2.1.332-defaults-request-1.json"):
        yield captured(name)
    base = {"model": "m", "max_tokens": 50, "tools": [TOOL], "messages": [{"role": "user", "content": "x"}]}
    for variant in ANTHROPIC_VARIANTS:
        yield dict(base, **variant)


def responses_bodies():
    for name in ("codex-request-2.json", "codex-defaults-request-1.json"):
        yield captured(name)
    for variant in RESPONSES_VARIANTS:
        yield dict(captured("codex-request-2.json"), **variant)


def test_vllm_accepts_every_translated_request(vllm_models):
    chat_request, tokenize_request = vllm_models
    checked = 0
    for module, bodies in ((anthropic, anthropic_bodies()), (responses, responses_bodies())):
        for body in bodies:
            chat, _ = module.request_to_chat(body)
            parsed = chat_request.model_validate(as_sent(chat))
            assert len(parsed.messages) == len(chat["messages"])
            assert bool(parsed.tools) == bool(chat.get("tools"))
            if chat.get("tool_choice") not in (None, "none"):
                assert parsed.tool_choice is not None
            checked += 1
    for body in anthropic_bodies():
        tokenize_request.model_validate(anthropic.count_tokens_request(body))
    assert checked == 3 + len(ANTHROPIC_VARIANTS) + 2 + len(RESPONSES_VARIANTS)
