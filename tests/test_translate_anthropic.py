"""Anthropic Messages <-> vLLM chat completions: requests from real Claude Code captures, vLLM-shaped replies,
incremental streams checked against the official `anthropic` SDK's own stream accumulator (in-process
transport, no sockets)."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx2
import pytest
from vllm_shapes import (CHAT_ID, PROMPT_IDS, VLLM_ONLY, Completion, call, chat_chunks, chat_json, split,
                         walk_keys)

from agentlightning_cli.proxy import anthropic as translate
from agentlightning_cli.proxy.errors import TranslationError
from agentlightning_cli.proxy.sse import SSEDecoder

CAPTURES = Path(__file__).parent / "data" / "captures"
LEAKS = set(VLLM_ONLY) - {"stop_reason"}  # Anthropic has its own `stop_reason`
MODEL = "claude-sonnet-4-5"
ALIAS = "alight-policy"  # the model name a client asked for, echoed back


def capture(name: str) -> dict:
    return json.loads((CAPTURES / name).read_text())["body"]


def sdk_client(status: int, body: bytes, content_type: str) -> anthropic.Anthropic:
    transport = httpx2.MockTransport(lambda request: httpx2.Response(status, headers={"content-type": content_type},
                                                                     content=body))
    return anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9", max_retries=0,
                               http_client=httpx2.Client(transport=transport))


def sdk_stream(sse: bytes):
    with sdk_client(200, sse, "text/event-stream").messages.stream(
            model="probe-model", max_tokens=10, messages=[{"role": "user", "content": "x"}]) as stream:
        events = list(stream)
        return events, stream.get_final_message()


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


# ---------------------------------------------------------------- replies

TOOL_CALL = call("chatcmpl-tool-1f0e", "Bash", {"command": "echo hello > out.txt", "description": "write"})
SCENARIOS = {
    "text": (Completion(text=split("Hello! The file is created.")), "end_turn", None),
    "tool_call": (Completion(text=split("I'll create it."), calls=[TOOL_CALL], finish_reason="tool_calls"),
                  "tool_use", None),
    "tool_calls_only": (Completion(calls=[TOOL_CALL, call("chatcmpl-tool-2a", "Read", {"file_path": "out.txt"})],
                                   finish_reason="tool_calls"), "tool_use", None),
    "length": (Completion(text=split("This answer is cut o"), finish_reason="length", stop_reason=None),
               "max_tokens", None),
    "stop_sequence": (Completion(text=split("Answer: 42"), stop_reason="</answer>"), "stop_sequence", "</answer>"),
    "unicode": (Completion(text=["h\u00e9", "llo \U0001f600", " \u4e16\u754c"]), "end_turn", None),
}
REQUEST = {"model": MODEL, "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize("name", SCENARIOS)
def test_response_from_chat(name):
    completion, stop_reason, stop_sequence = SCENARIOS[name]
    chat = chat_json(completion)
    body = translate.response_from_chat(chat, client_model=ALIAS, request=REQUEST)
    assert body["id"] == "msg_" + CHAT_ID.removeprefix("chatcmpl-")
    assert (body["model"], body["stop_reason"], body["stop_sequence"]) == (ALIAS, stop_reason, stop_sequence)
    assert body["usage"] == {"input_tokens": len(PROMPT_IDS), "output_tokens": completion.token_count(),
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    texts = [b["text"] for b in body["content"] if b["type"] == "text"]
    assert texts == (["".join(completion.text)] if completion.text else [])
    uses = [b for b in body["content"] if b["type"] == "tool_use"]
    assert [(u["id"], u["name"], u["input"]) for u in uses] == [
        (cid, n, json.loads("".join(frags))) for cid, n, frags in completion.calls]
    assert not LEAKS & walk_keys(body)
    assert anthropic.types.Message.model_validate(body).model_dump(exclude_none=True) == _without_none(body)
    parsed = sdk_client(200, json.dumps(body).encode(), "application/json").messages.create(
        model="probe-model", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert parsed.stop_reason == stop_reason


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def test_invalid_tool_arguments_round_trip_verbatim():
    raw = '{"command": "ls", oops'
    chat = chat_json(Completion(calls=[("call-1", "Bash", [raw])], finish_reason="tool_calls"))
    body = translate.response_from_chat(chat, client_model=ALIAS, request=REQUEST)
    assert body["content"][0]["input"] == {"_raw": raw}
    echoed, _ = translate.request_to_chat(dict(REQUEST, messages=[
        {"role": "user", "content": "x"}, {"role": "assistant", "content": body["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call-1", "content": "bad input"}]}]))
    assert echoed["messages"][1]["tool_calls"][0]["function"]["arguments"] == raw


def test_reasoning_shown_only_when_thinking_is_enabled():
    chat = chat_json(Completion(reasoning=split("Let me think."), text=split("Done.")))
    hidden = translate.response_from_chat(chat, client_model=ALIAS, request=REQUEST)
    assert [b["type"] for b in hidden["content"]] == ["text"]
    thinking = dict(REQUEST, thinking={"type": "enabled", "budget_tokens": 1024})
    shown = translate.response_from_chat(chat, client_model=ALIAS, request=thinking)
    assert shown["content"][0] == {"type": "thinking", "thinking": "Let me think.", "signature": ""}
    omitted = dict(REQUEST, thinking={"type": "adaptive", "display": "omitted"})
    assert translate.response_from_chat(chat, client_model=ALIAS, request=omitted)["content"] == hidden["content"]


# ---------------------------------------------------------------- streams


def run_stream(completion: Completion, request: dict = REQUEST, usage: bool = True):
    translator = translate.StreamTranslator(client_model=ALIAS, request=request)
    pieces = [translator.feed(chunk) for chunk in chat_chunks(completion, usage=usage)]
    pieces.append(translator.finish())
    return translator, pieces


def parse_events(sse: bytes) -> list[tuple[str, dict]]:
    decoder = SSEDecoder()
    events = [(name, json.loads(data)) for name, data in decoder.feed(sse)]
    assert decoder.flush() == []
    for name, data in events:
        assert name == data["type"]
    return events


@pytest.mark.parametrize("name", SCENARIOS)
def test_stream_events_deltas_and_record(name):
    completion, stop_reason, stop_sequence = SCENARIOS[name]
    translator, pieces = run_stream(completion)
    sse = b"".join(pieces)
    events = parse_events(sse)
    types = [name for name, _ in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == len(PROMPT_IDS)
    # Blocks open, receive deltas and close strictly in index order.
    open_index, next_index = None, 0
    for kind, data in events[1:-2]:
        if kind == "content_block_start":
            assert open_index is None and data["index"] == next_index
            open_index, next_index = data["index"], next_index + 1
        elif kind == "content_block_delta":
            assert data["index"] == open_index
        else:
            assert kind == "content_block_stop" and data["index"] == open_index
            open_index = None
    assert open_index is None
    text = "".join(d["delta"]["text"] for k, d in events if k == "content_block_delta"
                   and d["delta"]["type"] == "text_delta")
    assert text == "".join(completion.text)
    arguments = {}
    for kind, data in events:
        if kind == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
            arguments[data["index"]] = arguments.get(data["index"], "") + data["delta"]["partial_json"]
    assert list(arguments.values()) == ["".join(frags) for _, _, frags in completion.calls]
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    assert delta["usage"]["output_tokens"] == completion.token_count()
    assert not LEAKS & walk_keys([data for _, data in events])
    # The record equals the non-stream translation of the same generation.
    expected = translate.response_from_chat(chat_json(completion), client_model=ALIAS, request=REQUEST)
    assert translator.response_body == expected
    # The official SDK accumulates the stream into the same message.
    _, final = sdk_stream(sse)
    assert final.model_dump(exclude_none=True) == _without_none(expected)


def test_stream_is_incremental():
    """Every upstream chunk with text or tool arguments yields its own delta at once."""
    completion = SCENARIOS["tool_call"][0]
    _, pieces = run_stream(completion)
    chunks = chat_chunks(completion)
    for chunk, piece in zip(chunks, pieces):
        delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
        fragment = delta.get("content") or "".join(
            c["function"].get("arguments", "") for c in delta.get("tool_calls", ()))
        if fragment:
            assert json.dumps(fragment)[1:-1].encode() in piece
    assert pieces[0].startswith(b"event: message_start\n")


def test_stream_without_usage_counts_token_ids_and_thinking_blocks():
    completion = Completion(reasoning=split("hmm"), text=split("ok then"))
    request = dict(REQUEST, thinking={"type": "enabled", "budget_tokens": 100})
    translator, pieces = run_stream(completion, request=request, usage=False)
    events = parse_events(b"".join(pieces))
    starts = [d["content_block"]["type"] for k, d in events if k == "content_block_start"]
    assert starts == ["thinking", "text"]
    assert events[-2][1]["usage"]["output_tokens"] == completion.token_count()
    assert translator.response_body == translate.response_from_chat(chat_json(completion), client_model=ALIAS,
                                                                    request=request)
    _, final = sdk_stream(b"".join(pieces))
    assert final.content[0].thinking == "hmm"


def test_tool_call_in_one_fragment_and_text_after_tools():
    translator = translate.StreamTranslator(client_model=ALIAS, request=REQUEST)
    out = translator.feed({"id": CHAT_ID, "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c0", "type": "function", "function": {"name": "Bash", "arguments": '{"command":"ls"}'}},
        {"index": 1, "id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]}}]})
    out += translator.feed({"id": CHAT_ID, "choices": [{"index": 0, "delta": {"content": "after"},
                                                        "finish_reason": "tool_calls"}]})
    out += translator.finish()
    events = parse_events(out)
    assert [d["content_block"]["type"] for k, d in events if k == "content_block_start"] == [
        "tool_use", "tool_use", "text"]
    body = translator.response_body
    assert [b.get("input") for b in body["content"]] == [{"command": "ls"}, {}, None]
    assert body["stop_reason"] == "tool_use"
    _, final = sdk_stream(out)
    assert final.model_dump(exclude_none=True) == _without_none(body)


def test_stream_failure_is_an_error_event():
    translator = translate.StreamTranslator(client_model=ALIAS, request=REQUEST)
    chunks = chat_chunks(SCENARIOS["text"][0])
    sse = translator.feed(chunks[0]) + translator.feed(chunks[1]) + translator.fail("alight: upstream broke")
    name, data = parse_events(sse)[-1]
    assert data == {"type": "error", "error": {"type": "api_error", "message": "alight: upstream broke"}}
    assert translator.response_body["content"] == [{"type": "text", "text": chunks[1]["choices"][0]["delta"]["content"]}]
    assert translator.response_body["stop_reason"] is None
    with pytest.raises(anthropic.APIStatusError, match="upstream broke"):
        sdk_stream(sse)


def test_empty_stream_still_closes_properly():
    translator = translate.StreamTranslator(client_model=ALIAS, request=REQUEST)
    events = parse_events(translator.finish())
    assert [k for k, _ in events] == ["message_start", "message_delta", "message_stop"]
    assert translator.response_body["content"] == []


def test_sse_decoder_handles_any_split_and_crlf():
    stream = (b'data: {"a":1}\n\n: keepalive\n\nevent: x\ndata: {"b":\ndata: 2}\n\n'
              b'data: {"c":3}\r\n\r\ndata: [DONE]\n\n')
    expected = [(None, '{"a":1}'), ("x", '{"b":\n2}'), (None, '{"c":3}'), (None, "[DONE]")]
    for size in (1, 2, 5, len(stream)):
        decoder = SSEDecoder()
        events = []
        for i in range(0, len(stream), size):
            events += decoder.feed(stream[i:i + size])
        assert events == expected
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"tail":1}') == [] and decoder.flush() == [(None, '{"tail":1}')]
