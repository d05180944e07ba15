"""Anthropic Messages -> vLLM chat completions: requests from real Claude Code captures (tests/data/captures),
edge cases of content blocks, tools and sampling, and the protocol's error shape. Replies and streams:
test_translate_anthropic_reply.py."""

from __future__ import annotations

import json

import anthropic
import pytest
from translate_support import canned_http, capture
from vllm_shapes import Completion, call, chat_json, split, walk_keys

from agentlightning_cli.proxy import anthropic as translate
from agentlightning_cli.proxy.errors import TranslationError

MODEL = "claude-sonnet-4-5"
ALIAS = "alight-policy"  # the model name a client asked for, echoed back




def sdk_client(status: int, body: bytes, content_type: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9", max_retries=0,
                               http_client=canned_http(status, body, content_type))


# ---------------------------------------------------------------- requests


def test_claude_code_request_with_tool_result_cache_control_and_metadata():
    body = capture("claude-code-request-2.json")
    chat, dropped = translate.request_to_chat(body)
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    system = chat["messages"][0]["content"]
    assert system.startswith("You are a Claude agent") and "\nYou are an interactive agent" in system
    user = chat["messages"][1]["content"]
    assert user.startswith("<system-reminder>") and user.endswith("Create a file out.txt containing hello")
    assistant = chat["messages"][2]
    assert assistant["content"] == "I'll create the file."
    assert assistant["tool_calls"] == [{"id": "toolu_a85483c141994cb58559a70b", "type": "function", "function": {
        "name": "Bash", "arguments": json.dumps({"command": "echo hello > out.txt",
                                                 "description": "Write hello to out.txt"})}}]
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "toolu_a85483c141994cb58559a70b",
                                   "content": "(Bash completed with no output)"}
    assert [t["function"]["name"] for t in chat["tools"]] == ["Agent", "Bash"]
    assert chat["tools"][1]["function"]["parameters"] == body["tools"][1]["input_schema"]
    assert (chat["max_tokens"], chat["temperature"], chat["stream"]) == (32000, 1, True)
    assert chat["stream_options"] == {"include_usage": True}
    assert "tool_choice" not in chat  # vLLM defaults to auto when tools are present
    assert dropped["metadata"] == body["metadata"]
    assert set(dropped["cache_control"]) == {"system.0", "system.1", "messages.2.content.0"}
    assert {"cache_control", "metadata", "input_schema"}.isdisjoint(walk_keys(chat))


def test_defaults_capture_system_message_thinking_and_deferred_tools():
    body = capture("claude-code-2.1.332-defaults-request-1.json")
    chat, dropped = translate.request_to_chat(body)
    messages = chat["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    # The billing header block (a per-conversation hash) never reaches the prompt.
    assert "x-anthropic-billing-header" not in messages[0]["content"]
    assert dropped["system_billing_header"].startswith("x-anthropic-billing-header:")
    # The mid-conversation system message becomes a reminder appended to the preceding user turn.
    user = messages[1]["content"]
    assert user.index("Create a file out.txt containing hello") < user.index("<system-reminder>\n# Environment")
    assert user.endswith("\n</system-reminder>")
    for key in ("thinking", "context_management", "output_config", "metadata"):
        assert dropped[key] == body[key]
    assert dropped["tools"] == {"DeferredToolPlaceholder": "defer_loading"}
    assert [t["function"]["name"] for t in chat["tools"]] == ["Agent", "Bash", "ToolSearch"]
    assert "messages.1.content.0" in dropped["cache_control"]
    assert {"thinking", "output_config", "context_management", "defer_loading"}.isdisjoint(chat)


def test_each_call_prompt_is_a_prefix_of_the_next():
    """Exact token-prefix merging of training rows needs call N's messages to start call N+1's."""
    first = capture("claude-code-2.1.332-defaults-request-1.json")
    reply = translate.response_from_chat(chat_json(Completion(
        text=split("On it."), calls=[call("chatcmpl-tool-7", "Bash", {"command": "echo hello > out.txt"})],
        finish_reason="tool_calls")), client_model=ALIAS, request=first)
    second = dict(first, messages=first["messages"] + [
        {"role": "assistant", "content": reply["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "chatcmpl-tool-7", "content": "ok"}]},
        {"role": "system", "content": "<system-reminder>\nbudget left\n</system-reminder>"}])
    chat1, _ = translate.request_to_chat(first)
    chat2, _ = translate.request_to_chat(second)
    assert chat2["messages"][:len(chat1["messages"])] == chat1["messages"]
    assert [m["role"] for m in chat2["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert chat2["messages"][-1]["content"] == "<system-reminder>\nbudget left\n</system-reminder>"


def test_tool_results_come_before_user_text_errors_and_images():
    body = {"model": MODEL, "max_tokens": 100, "messages": [
        {"role": "user", "content": "run both"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "two calls", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xyz"},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "false"}},
            {"type": "tool_use", "id": "t2", "name": "Read", "input": {}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "here you go"},
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "Exit code 1"},
            {"type": "tool_result", "tool_use_id": "t2", "content": [
                {"type": "text", "text": "line one"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                {"type": "text", "text": "line two"}]}]}]}
    chat, dropped = translate.request_to_chat(body)
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool", "tool", "user"]
    assert chat["messages"][1]["content"] is None
    assert chat["messages"][2]["content"] == "Error: Exit code 1"
    assert chat["messages"][3]["content"] == "line one\nline two"
    assert chat["messages"][4]["content"] == "here you go"
    assert chat["messages"][1]["tool_calls"][1]["function"]["arguments"] == "{}"
    assert dropped["blocks"] == {
        "messages.1.content.0": {"type": "thinking", "chars": 9},
        "messages.1.content.1": {"type": "redacted_thinking", "chars": 3},
        "messages.2.content.2.content.1": {"type": "image", "source": {"type": "base64", "media_type": "image/png"}}}


def test_system_message_between_tool_calls_and_results_waits_for_the_results():
    body = {"model": MODEL, "max_tokens": 100, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "system", "content": "mind the budget"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                                     {"type": "text", "text": "continue"}]}]}
    chat, _ = translate.request_to_chat(body)
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool", "user"]
    assert chat["messages"][3]["content"] == "<system-reminder>\nmind the budget\n</system-reminder>\ncontinue"
    ends_with_results = dict(body, messages=body["messages"][:3] + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}])
    chat, _ = translate.request_to_chat(ends_with_results)
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool", "user"]


@pytest.mark.parametrize("choice, mapped", [
    ({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none"),
    ({"type": "tool", "name": "Bash"}, {"type": "function", "function": {"name": "Bash"}})])
def test_tool_choice(choice, mapped):
    body = capture("claude-code-request-2.json")
    chat, _ = translate.request_to_chat(dict(body, tool_choice=dict(choice, disable_parallel_tool_use=True)))
    assert chat["tool_choice"] == mapped
    assert chat["parallel_tool_calls"] is False


def test_sampling_stop_sequences_and_prefill():
    body = {"model": MODEL, "max_tokens": 64, "temperature": 0.7, "top_p": 0.9, "top_k": 20,
            "stop_sequences": ["</answer>"], "system": "Be brief.", "service_tier": "auto",
            "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    chat, dropped = translate.request_to_chat(body)
    assert chat == {"model": MODEL, "messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Hi"},
                                                 {"role": "assistant", "content": "Hello"}],
                    "add_generation_prompt": False, "continue_final_message": True, "max_tokens": 64,
                    "temperature": 0.7, "top_p": 0.9, "top_k": 20, "stop": ["</answer>"], "stream": False}
    assert dropped == {"service_tier": "auto"}


@pytest.mark.parametrize("change, field", [
    ({"messages": None}, "messages"), ({"messages": {"role": "user"}}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "x", "input": {}}]}]},
     "messages.0.content.0"),
    ({"stream": "yes"}, "stream"), ({"max_tokens": "10"}, "max_tokens"), ({"temperature": True}, "temperature"),
    ({"tools": [{"description": "no name"}]}, "tools.0"), ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"tool_choice": {"type": "any"}, "tools": []}, "tool_choice"), ({"system": 3}, "system")])
def test_invalid_requests_name_the_field(change, field):
    body = dict({"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}, **change)
    with pytest.raises(TranslationError) as info:
        translate.request_to_chat(body)
    assert info.value.field == field


def test_count_tokens_request_matches_the_generation_prompt():
    body = capture("claude-code-request-2.json")
    chat, _ = translate.request_to_chat(body)
    tokenize = translate.count_tokens_request({k: v for k, v in body.items() if k not in ("max_tokens", "stream")})
    assert tokenize == {"model": MODEL, "messages": chat["messages"], "add_generation_prompt": True,
                        "tools": chat["tools"]}


def test_error_bodies():
    assert translate.error_body(400, "bad") == {"type": "error", "error": {"type": "invalid_request_error",
                                                                           "message": "bad"}}
    assert translate.error_body(401, "key")["error"]["type"] == "authentication_error"
    assert translate.error_body(404, "nope")["error"]["type"] == "not_found_error"
    assert translate.error_body(413, "big")["error"]["type"] == "request_too_large"
    assert translate.error_body(502, "down")["error"]["type"] == "api_error"
    assert translate.error_body(400, "x", "overloaded_error")["error"]["type"] == "overloaded_error"
    body = translate.error_body(400, "must be a list", param="messages")
    assert body["error"]["message"] == "messages: must be a list"
    # The SDK maps the body to its typed error.
    with pytest.raises(anthropic.NotFoundError, match="nope"):
        sdk_client(404, json.dumps(translate.error_body(404, "nope")).encode(), "application/json").messages.create(
            model="probe-model", max_tokens=5, messages=[{"role": "user", "content": "x"}])
