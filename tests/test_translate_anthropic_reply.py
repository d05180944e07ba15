"""vLLM chat completions -> Anthropic Messages: vLLM-shaped replies (token ids and logprobs present, never
leaked) and incremental SSE streams, checked against the official `anthropic` SDK's own parsing and stream
accumulator (in-process transport, no sockets). The record of a stream must equal the JSON translation."""

from __future__ import annotations

import json

import anthropic
import pytest
from translate_support import canned_http
from translate_support import sse_events as parse_events
from translate_support import run_stream as translated_stream
from vllm_shapes import (CHAT_ID, PROMPT_IDS, VLLM_ONLY, Completion, call, chat_chunks, chat_json, split,
                         walk_keys)

from agentlightning_cli.proxy import anthropic as translate
from agentlightning_cli.proxy.sse import SSEDecoder

LEAKS = set(VLLM_ONLY) - {"stop_reason"}  # Anthropic has its own `stop_reason`
MODEL = "claude-sonnet-4-5"
ALIAS = "alight-policy"  # the model name a client asked for, echoed back


def sdk_client(status: int, body: bytes, content_type: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9", max_retries=0,
                               http_client=canned_http(status, body, content_type))


def sdk_stream(sse: bytes):
    with sdk_client(200, sse, "text/event-stream").messages.stream(
            model="probe-model", max_tokens=10, messages=[{"role": "user", "content": "x"}]) as stream:
        events = list(stream)
        return events, stream.get_final_message()


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
    return translated_stream(translate, completion, request, usage, client_model=ALIAS)



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
