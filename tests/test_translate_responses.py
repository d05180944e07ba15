"""OpenAI Responses -> vLLM chat completions: requests from real Codex captures (tests/data/captures), item
and tool edge cases, and the protocol's error shape. Replies and streams: test_translate_responses_reply.py."""

from __future__ import annotations

import json

import openai
import pytest

from translate_support import canned_http, capture
from vllm_shapes import Completion, call, chat_json, split

from agentlightning_cli.proxy import responses as translate
from agentlightning_cli.proxy.errors import TranslationError

ALIAS = "probe-model"




def sdk_client(status: int, body: bytes, content_type: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0,
                         http_client=canned_http(status, body, content_type))


# ---------------------------------------------------------------- requests


def test_codex_request_with_developer_messages_and_function_call_output():
    body = capture("codex-request-2.json")
    chat, dropped = translate.request_to_chat(body)
    messages = chat["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "user", "assistant", "tool"]
    # Both developer messages (three parts) form the one leading system message.
    system = messages[0]["content"]
    assert system.startswith("You are a coding agent running in the Codex CLI")
    assert "\n\n<skills_instructions>" in system and "\n<permissions instructions>" in system
    assert messages[1]["content"].startswith("<environment_context>")
    assert messages[2]["content"] == "Create a file out.txt containing hello"
    assert messages[3] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_76e813a90e2c429dbb83461e", "type": "function",
         "function": {"name": "exec_command", "arguments": "{\"cmd\": \"echo hello > out.txt\"}"}}]}
    assert messages[4] == {"role": "tool", "tool_call_id": "call_76e813a90e2c429dbb83461e",
                           "content": body["input"][5]["output"]}
    assert [t["function"]["name"] for t in chat["tools"]] == ["exec_command", "write_stdin"]
    assert chat["tools"][0] == {"type": "function", "function": {
        "name": "exec_command", "description": body["tools"][0]["description"],
        "parameters": body["tools"][0]["parameters"], "strict": False}}
    assert (chat["tool_choice"], chat["parallel_tool_calls"], chat["stream"]) == ("auto", True, True)
    assert chat["stream_options"] == {"include_usage": True}
    for key in ("reasoning", "store", "include", "prompt_cache_key", "client_metadata"):
        assert dropped[key] == body[key]
    assert {"input", "store", "include", "client_metadata", "prompt_cache_key"}.isdisjoint(chat)


def test_codex_defaults_drop_namespace_and_web_search_tools():
    chat, dropped = translate.request_to_chat(capture("codex-defaults-request-1.json"))
    assert [t["function"]["name"] for t in chat["tools"]] == ["exec_command", "write_stdin", "get_goal"]
    assert dropped["tools"] == {"tools.2": {"type": "namespace", "name": "multi_agent_v1"},
                                "tools.4": {"type": "web_search", "name": None}}
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "user"]


def test_instructions_mid_conversation_developer_reasoning_and_parallel_calls():
    body = {"model": ALIAS, "instructions": "Be careful.", "max_output_tokens": 256, "temperature": 0.2,
            "top_p": 0.95, "parallel_tool_calls": False, "text": {"verbosity": "low"}, "truncation": "auto",
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "shell"},
            "input": [
                {"role": "system", "content": "System rules."},
                {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                             {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
                 "encrypted_content": "gAAA"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running."}]},
                {"type": "function_call", "call_id": "a", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
                {"type": "function_call", "call_id": "b", "name": "shell", "arguments": "{\"cmd\":\"pwd\"}"},
                {"type": "function_call_output", "call_id": "a", "output": "file.txt"},
                {"type": "function_call_output", "call_id": "b",
                 "output": [{"type": "input_text", "text": "/work"}]},
                {"type": "message", "role": "developer", "content": "Approval mode changed."},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}]}
    chat, dropped = translate.request_to_chat(body)
    assert chat["messages"] == [
        {"role": "system", "content": "Be careful.\n\nSystem rules."},
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": "Running.", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"ls\"}"}},
            {"id": "b", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"pwd\"}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "file.txt"},
        {"role": "tool", "tool_call_id": "b", "content": "/work"},
        {"role": "user", "content": "<system-reminder>\nApproval mode changed.\n</system-reminder>"},
        {"role": "assistant", "content": "I can't."}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "shell"}}
    assert (chat["max_tokens"], chat["temperature"], chat["top_p"], chat["parallel_tool_calls"]) == (
        256, 0.2, 0.95, False)
    assert chat["stream"] is False and "stream_options" not in chat
    assert dropped["items"] == {"input.2": {"type": "reasoning", "summary_parts": 1, "encrypted": True}}
    assert dropped["parts"] == {"input.1.content.1": {"type": "input_image"}}
    assert (dropped["text"], dropped["truncation"]) == ({"verbosity": "low"}, "auto")


def test_string_input_and_no_tools():
    chat, dropped = translate.request_to_chat({"model": ALIAS, "input": "hello", "tool_choice": "auto"})
    assert chat == {"model": ALIAS, "messages": [{"role": "user", "content": "hello"}], "stream": False}
    assert dropped == {}


def test_each_call_prompt_is_a_prefix_of_the_next():
    """Codex echoes our output items back; call N's chat messages must start call N+1's (row merging)."""
    first = capture("codex-defaults-request-1.json")
    reply = translate.response_from_chat(chat_json(Completion(
        reasoning=split("plan"), text=split("Creating it."),
        calls=[call("call_1", "exec_command", {"cmd": "echo hello > out.txt"}),
               call("call_2", "exec_command", {"cmd": "cat out.txt"})], finish_reason="tool_calls")),
        client_model=ALIAS, request=first)
    outputs = [{"type": "function_call_output", "call_id": c, "output": "ok"} for c in ("call_1", "call_2")]
    second = dict(first, input=first["input"] + reply["output"] + outputs)
    chat1, _ = translate.request_to_chat(first)
    chat2, dropped = translate.request_to_chat(second)
    assert chat2["messages"][:len(chat1["messages"])] == chat1["messages"]
    assert [m["role"] for m in chat2["messages"][len(chat1["messages"]):]] == ["assistant", "tool", "tool"]
    assistant = chat2["messages"][len(chat1["messages"])]
    assert assistant["content"] == "Creating it." and len(assistant["tool_calls"]) == 2
    assert list(dropped["items"].values()) == [{"type": "reasoning", "summary_parts": 0, "encrypted": False}]


@pytest.mark.parametrize("change, field", [
    ({"input": None}, "input"), ({"input": 5}, "input"), ({"input": ["x"]}, "input.0"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input.0.role"),
    ({"input": [{"role": "user", "content": 1}]}, "input.0.content"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]}, "input.0.output"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"), ({"stream": 1}, "stream"),
    ({"max_output_tokens": 0}, "max_output_tokens"), ({"instructions": ["x"]}, "instructions"),
    ({"tools": [{"type": "function"}]}, "tools.0.name"), ({"tool_choice": "required"}, "tool_choice"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls")])
def test_invalid_requests_name_the_field(change, field):
    with pytest.raises(TranslationError) as info:
        translate.request_to_chat(dict({"model": ALIAS, "input": "hi"}, **change))
    assert info.value.field == field


def test_error_bodies():
    assert translate.error_body(400, "bad", param="input") == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "input", "code": None}}
    assert translate.error_body(401, "key")["error"]["code"] == "invalid_api_key"
    assert translate.error_body(502, "down")["error"]["type"] == "server_error"
    with pytest.raises(openai.AuthenticationError, match="key"):
        sdk_client(401, json.dumps(translate.error_body(401, "key")).encode(), "application/json").responses.create(
            model=ALIAS, input="x")
