"""vLLM chat completions -> OpenAI Responses: vLLM-shaped replies (token ids and logprobs present, never
leaked) and the streamed event sequence Codex needs, checked against the official `openai` SDK's strict
Responses stream state (in-process transport, no sockets). The record of a stream must equal the JSON
translation."""

from __future__ import annotations

import json

import openai
import pytest
from openai.types.responses import Response
from translate_support import canned_http, capture, sse_events
from translate_support import run_stream as translated_stream
from vllm_shapes import (CHAT_ID, CREATED, PROMPT_IDS, VLLM_ONLY, Completion, call, chat_chunks, chat_json,
                         split, walk_keys)

from agentlightning_cli.proxy import responses as translate

ALIAS = "probe-model"
BASE = CHAT_ID.removeprefix("chatcmpl-")
LEAKS = set(VLLM_ONLY) - {"logprobs"}  # text events carry the Responses `logprobs` field (always empty here)




def sdk_stream(sse: bytes):
    with sdk_client(200, sse, "text/event-stream").responses.stream(model=ALIAS, input="x") as stream:
        events = list(stream)
        return events, stream.get_final_response()


def dump(response: Response) -> dict:
    return response.model_dump(mode="json", exclude_none=True)


# ---------------------------------------------------------------- replies

EXEC = call("chatcmpl-tool-5b1", "exec_command", {"cmd": "echo hello > out.txt"})
SCENARIOS = {
    "text": (Completion(text=split("Done: out.txt contains hello.")), "completed"),
    "tool_call": (Completion(text=split("Creating it."), calls=[EXEC], finish_reason="tool_calls"), "completed"),
    "tool_calls_only": (Completion(calls=[EXEC, call("chatcmpl-tool-9c", "view_image", {"path": "a.png"})],
                                   finish_reason="tool_calls"), "completed"),
    "length": (Completion(text=split("This is cut"), finish_reason="length", stop_reason=None), "incomplete"),
    "stop_sequence": (Completion(text=split("42"), stop_reason="END"), "completed"),
    "reasoning": (Completion(reasoning=split("Plan: run ls."), calls=[EXEC], finish_reason="tool_calls"),
                  "completed"),
}
REQUEST = capture("codex-request-2.json")


@pytest.mark.parametrize("name", SCENARIOS)
def test_response_from_chat(name):
    completion, status = SCENARIOS[name]
    body = translate.response_from_chat(chat_json(completion), client_model=ALIAS, request=REQUEST)
    assert (body["id"], body["object"], body["created_at"], body["status"], body["model"]) == (
        f"resp_{BASE}", "response", CREATED, status, ALIAS)
    assert body["incomplete_details"] == ({"reason": "max_output_tokens"} if status == "incomplete" else None)
    n = completion.token_count()
    assert body["usage"] == {"input_tokens": len(PROMPT_IDS), "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                             "output_tokens": n, "output_tokens_details": {"reasoning_tokens": 0},
                             "total_tokens": len(PROMPT_IDS) + n}
    messages = [item for item in body["output"] if item["type"] == "message"]
    if completion.text:
        assert messages == [{"type": "message", "id": f"msg_{BASE}", "role": "assistant", "status": "completed",
                             "content": [{"type": "output_text", "text": "".join(completion.text),
                                          "annotations": []}]}]
    else:
        assert messages == []
    calls = [item for item in body["output"] if item["type"] == "function_call"]
    assert calls == [{"type": "function_call", "id": f"fc_{BASE}_{i}", "call_id": cid, "name": fname,
                      "arguments": "".join(frags), "status": "completed"}
                     for i, (cid, fname, frags) in enumerate(completion.calls)]
    # Echoed request settings the SDK's Response type carries.
    assert (body["tools"], body["tool_choice"], body["parallel_tool_calls"]) == (REQUEST["tools"], "auto", True)
    assert not LEAKS & walk_keys(body) and "logprobs" not in walk_keys(body)
    assert dump(Response.model_validate(body)) == dump(Response.model_validate(dump(Response.model_validate(body))))
    parsed = sdk_client(200, json.dumps(body).encode(), "application/json").responses.create(model=ALIAS, input="x")
    assert parsed.output_text == "".join(completion.text)
    assert parsed.status == status


# ---------------------------------------------------------------- streams


def sdk_client(status: int, body: bytes, content_type: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0,
                         http_client=canned_http(status, body, content_type))


def run_stream(completion: Completion, usage: bool = True, request: dict = REQUEST):
    return translated_stream(translate, completion, request, usage, client_model=ALIAS)


def parse_events(sse: bytes) -> list[tuple[str, dict]]:
    events = sse_events(sse)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    for name, data in events:
        assert name == data["type"]
    return events


ITEM_EVENTS = {
    "message": ["response.output_item.added", "response.content_part.added", "response.output_text.delta*",
                "response.output_text.done", "response.content_part.done", "response.output_item.done"],
    "function_call": ["response.output_item.added", "response.function_call_arguments.delta*",
                      "response.function_call_arguments.done", "response.output_item.done"],
    "reasoning": ["response.output_item.added", "response.reasoning_text.delta*", "response.reasoning_text.done",
                  "response.output_item.done"],
}


def expected_types(output: list[dict], events: list[tuple[str, dict]]) -> list[str]:
    """The event grammar for these output items, with each `*` expanded to the deltas actually seen."""
    counts = {}
    for name, data in events:
        if name.endswith(".delta"):
            counts[(name, data["output_index"])] = counts.get((name, data["output_index"]), 0) + 1
    types = ["response.created", "response.in_progress"]
    for index, item in enumerate(output):
        for name in ITEM_EVENTS[item["type"]]:
            if name.endswith("*"):
                assert counts.get((name[:-1], index), 0) >= 1
                types += [name[:-1]] * counts[(name[:-1], index)]
            else:
                types.append(name)
    return types + ["response.completed"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_stream_events_deltas_and_record(name):
    completion, status = SCENARIOS[name]
    translator, pieces = run_stream(completion)
    sse = b"".join(pieces)
    events = parse_events(sse)
    expected = translate.response_from_chat(chat_json(completion), client_model=ALIAS, request=REQUEST)
    assert [n for n, _ in events] == expected_types(expected["output"], events)
    assert events[0][1]["response"]["status"] == "in_progress" and events[0][1]["response"]["output"] == []
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert text == "".join(completion.text)
    for n, d in events:
        if n == "response.output_item.added" and d["item"]["type"] == "function_call":
            assert d["item"]["arguments"] == "" and d["item"]["status"] == "in_progress"
    arguments = [d["arguments"] for n, d in events if n == "response.function_call_arguments.done"]
    assert arguments == ["".join(frags) for _, _, frags in completion.calls]
    for index, item in enumerate(expected["output"]):
        if item["type"] == "function_call":
            deltas = "".join(d["delta"] for n, d in events
                             if n == "response.function_call_arguments.delta" and d["output_index"] == index)
            assert deltas == item["arguments"]
    done_items = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert done_items == expected["output"]
    completed = events[-1][1]["response"]
    assert completed == expected == translator.response_body
    assert completed["status"] == status
    assert not LEAKS & walk_keys([d for _, d in events])
    assert all(d["logprobs"] == [] for _, d in events if "logprobs" in d)
    # The SDK's strict stream state machine accepts the sequence and rebuilds the same response.
    sdk_events, final = sdk_stream(sse)
    assert [e.type for e in sdk_events] == [n for n, _ in events]
    assert dump(final) == dump(Response.model_validate(expected))


def test_stream_is_incremental_and_counts_tokens_without_usage():
    completion = SCENARIOS["tool_call"][0]
    translator, pieces = run_stream(completion, usage=False)
    for chunk, piece in zip(chat_chunks(completion, usage=False), pieces):
        delta = chunk["choices"][0]["delta"]
        fragment = delta.get("content") or "".join(
            c["function"].get("arguments", "") for c in delta.get("tool_calls", ()))
        if fragment:
            assert json.dumps(fragment)[1:-1].encode() in piece
    assert pieces[0].startswith(b"event: response.created\n")
    assert translator.response_body["usage"]["output_tokens"] == completion.token_count()
    assert translator.response_body["usage"]["input_tokens"] == len(PROMPT_IDS)


def test_stream_failure_is_response_failed():
    translator = translate.StreamTranslator(client_model=ALIAS, request=REQUEST)
    chunks = chat_chunks(SCENARIOS["tool_call"][0])
    sse = b"".join(translator.feed(chunk) for chunk in chunks[:3]) + translator.fail("alight: upstream broke")
    name, data = parse_events(sse)[-1]
    assert name == "response.failed"
    response = data["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "alight: upstream broke"}
    assert response["output"][0]["status"] == "incomplete"
    assert translator.response_body == response
    Response.model_validate(response)
    with sdk_client(200, sse, "text/event-stream").responses.stream(model=ALIAS, input="x") as stream:
        assert [e.type for e in stream][-1] == "response.failed"


def test_empty_stream_and_echo_serialised_once():
    translator = translate.StreamTranslator(client_model=ALIAS, request=REQUEST)
    events = parse_events(translator.finish())
    assert [n for n, _ in events] == ["response.created", "response.in_progress", "response.completed"]
    assert events[0][1]["response"] == dict(events[1][1]["response"])
    assert events[-1][1]["response"]["output"] == []
