"""Google's Gemini API through the proxy: the translation (units), and Google's own SDK (google-genai) against the
proxy in front of the scripted upstream, which is deterministic where a model is not (function calls)."""

from __future__ import annotations

import json

import aiohttp
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from agentlightning_cli.inspect.conversation import reply_turns, request_turns, tool_names
from agentlightning_cli.proxy import gemini
from agentlightning_cli.proxy.continuation.normalise import canonical_request
from agentlightning_cli.proxy.errors import TranslationError, error_body
from agentlightning_cli.proxy.gemini_reply import StreamTranslator, response_from_chat
from agentlightning_cli.scripted import fake_tokens as tok
from agentlightning_cli.scripted.fake_vllm import FakeScript
from agentlightning_cli.testing.proxy_env import POLICY, post, start_env, stop_env

LS = types.FunctionDeclaration(name="ls", description="list files", parameters=types.Schema(
    type="OBJECT", properties={"path": types.Schema(type="STRING", description="where")}, required=["path"]))
TOOL_TURN = {"content": "Let me look.", "tool_calls": [{"name": "ls", "arguments": {"path": "."}}]}


def client_for(env, ep: str, key: str, api_version: str | None = None) -> genai.Client:
    """The SDK at the episode's URL; with a base URL of its own it speaks /v1/ unless told `api_version`."""
    return genai.Client(api_key=key, http_options=types.HttpOptions(
        base_url=env.proxy.episode_base_url(ep, gemini.PROTOCOL), api_version=api_version,
        retry_options=types.HttpRetryOptions(attempts=1)))


@pytest.fixture
async def env(tmp_path):
    env = await start_env(tmp_path, FakeScript(turns=[TOOL_TURN, "All done."]))
    yield env
    await stop_env(env)


# -- the translation ------------------------------------------------------------------------------------------

def test_schema_types_are_normalised_to_json_schema():
    schema = {"type": "OBJECT", "propertyOrdering": ["a", "b"], "required": ["a"], "properties": {
        "a": {"type": "STRING", "nullable": True, "enum": ["x", "y"], "example": "x"},
        "b": {"type": "ARRAY", "items": {"type": "INTEGER", "minimum": 0}},
        "c": {"anyOf": [{"type": "NUMBER"}, {"type": "BOOLEAN"}]}}}
    assert gemini.json_schema(schema) == {"type": "object", "required": ["a"], "properties": {
        "a": {"type": ["string", "null"], "enum": ["x", "y"], "examples": ["x"]},
        "b": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "c": {"anyOf": [{"type": "number"}, {"type": "boolean"}]}}}
    body = {"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"functionDeclarations": [
        {"name": "f", "parameters": schema}, {"name": "g", "parametersJsonSchema": {"type": "object", "x-k": 1}}]}]}
    chat, _ = gemini.request_to_chat(body)
    assert chat["tools"][0]["function"]["parameters"]["properties"]["b"]["type"] == "array"
    assert chat["tools"][1]["function"]["parameters"] == {"type": "object", "x-k": 1}  # JSON Schema as sent


def test_call_ids_are_deterministic_and_responses_pair_with_their_calls():
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"path": "."}}},
                                    {"functionCall": {"name": "cat", "args": {"file": "a"}}}]},
        # Gemini CLI's own ids for answers to calls that came without one; answered out of order
        {"role": "user", "parts": [{"functionResponse": {"id": "cat-1733-x", "name": "cat",
                                                         "response": {"output": "A"}}},
                                   {"functionResponse": {"name": "ls", "response": {"files": ["a"]}}}]},
        {"role": "model", "parts": [{"functionCall": {"id": "chatcmpl-tool-9", "name": "ls", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "chatcmpl-tool-9", "name": "ls", "response": {}}},
                                   {"text": "thanks"}]},
    ]
    one, _ = gemini.request_to_chat({"contents": contents})
    two, _ = gemini.request_to_chat({"contents": json.loads(json.dumps(contents))})
    assert one == two
    messages = one["messages"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_1_0", "call_1_1"]
    assert [(m["tool_call_id"], m["content"]) for m in messages[2:4]] == [("call_1_1", "A"),
                                                                         ("call_1_0", '{"files": ["a"]}')]
    assert messages[4]["tool_calls"][0]["id"] == "chatcmpl-tool-9"  # an id the client sent is kept
    assert messages[5] == {"role": "tool", "tool_call_id": "chatcmpl-tool-9", "content": "{}"}
    assert messages[6] == {"role": "user", "content": "thanks"}
    # the reply side gives vLLM's calls the ids the request side gives them next time, and the chain learns them
    chat = {"choices": [{"message": {"tool_calls": [
        {"id": "chatcmpl-tool-a", "function": {"name": "ls", "arguments": "{}"}},
        {"id": "chatcmpl-tool-b", "function": {"name": "cat", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}
    reply = response_from_chat(chat, client_model="m", request={"contents": contents})
    assert [p["functionCall"]["id"] for p in reply["candidates"][0]["content"]["parts"]] == ["call_5_0", "call_5_1"]
    gemini.positional_ids({"contents": contents})(chat)
    assert [c["id"] for c in chat["choices"][0]["message"]["tool_calls"]] == ["call_5_0", "call_5_1"]
    chunk = {"choices": [{"delta": {"tool_calls": [{"index": 1, "id": "chatcmpl-tool-c"}]}}]}
    gemini.positional_ids({"contents": contents})(chunk)
    assert chunk["choices"][0]["delta"]["tool_calls"][0]["id"] == "call_5_1"


def test_generation_config_tool_config_and_drops():
    body = {"contents": [{"role": "user", "parts": [{"text": "q"}, {"inlineData": {"mimeType": "image/png"}}]}],
            "tools": [{"functionDeclarations": [{"name": "f"}], "googleSearch": {}}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}},
            "generationConfig": {"temperature": 0.2, "topP": 0.9, "topK": 5, "maxOutputTokens": 7, "seed": 3,
                                 "stopSequences": ["END"], "candidateCount": 1, "thinkingConfig": {"thinkingBudget": 0},
                                 "responseMimeType": "application/json",
                                 "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "STRING"}}}},
            "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH"}]}
    chat, dropped = gemini.request_to_chat(body)
    assert {k: chat[k] for k in ("temperature", "top_p", "top_k", "max_tokens", "seed", "stop")} == {
        "temperature": 0.2, "top_p": 0.9, "top_k": 5, "max_tokens": 7, "seed": 3, "stop": ["END"]}
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": {
        "type": "object", "properties": {"a": {"type": "string"}}}}}
    assert dropped["thinking"] == {"thinkingBudget": 0} and "generation_config" not in dropped
    assert "safetySettings" in dropped and dropped["tools"] == {"tools.0.googleSearch": {}}
    assert dropped["parts"] == {"contents.0.parts.1": {"kinds": ["inlineData"]}}
    # a thought part is dropped as a thinking block: exact continuation counts it as the reasoning normalisation,
    # and the thinking setting keys the chain
    history = {"contents": [{"parts": [{"text": "q"}]}, {"role": "model", "parts": [
        {"text": "hmm", "thought": True}, {"text": "a"}]}, {"parts": [{"text": "next"}]}]}
    chat, dropped = gemini.request_to_chat(history)
    assert dropped["blocks"] == {"contents.1.parts.0": {"type": "thinking", "chars": 3}}
    assert canonical_request(chat, dropped).fired["reasoning"] == 1
    thinking = {**history, "generationConfig": {"thinkingConfig": {"thinkingBudget": 128}}}
    assert canonical_request(*gemini.request_to_chat(thinking)).key != canonical_request(chat, dropped).key
    with pytest.raises(TranslationError, match="candidateCount"):
        gemini.request_to_chat({"contents": [], "generationConfig": {"candidateCount": 2}})
    with pytest.raises(TranslationError, match="role"):
        gemini.request_to_chat({"contents": [{"role": "robot", "parts": []}]})


def test_errors_are_googles_shape():
    assert error_body(gemini.PROTOCOL, 400, "bad") == {"error": {"code": 400, "message": "bad",
                                                                 "status": "INVALID_ARGUMENT"}}
    assert error_body(gemini.PROTOCOL, 401, "no key")["error"]["status"] == "UNAUTHENTICATED"
    assert error_body(gemini.PROTOCOL, 503, "down")["error"]["status"] == "UNAVAILABLE"


def test_stream_sends_text_as_it_comes_and_a_call_whole_at_its_end():
    stream = StreamTranslator(client_model="gemini-x", request={"contents": [{"parts": [{"text": "q"}]}]})
    chunk = lambda delta, **kw: {"id": "chatcmpl-7", "choices": [{"index": 0, "delta": delta, **kw}]}  # noqa: E731
    first = stream.feed(chunk({"content": "Hel"}))
    second = stream.feed(chunk({"content": "lo"}))
    call = stream.feed(chunk({"tool_calls": [{"index": 0, "id": "t1",
                                              "function": {"name": "ls", "arguments": '{"pa'}}]}))
    more = stream.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "."}'}}]}))
    stream.feed(chunk({}, finish_reason="tool_calls"))
    stream.feed({"id": "chatcmpl-7", "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 6}})
    last = stream.finish()
    wire = first + second + call + more + last
    events = [json.loads(e.removeprefix(b"data: ")) for e in wire.split(b"\r\n\r\n") if e]
    parts = [e["candidates"][0]["content"]["parts"] for e in events]
    assert first == b"" and parts == [[{"text": "Hel"}], [{"text": "lo"}],  # vLLM's id replaced by the positional one
                                      [{"functionCall": {"id": "call_1_0", "name": "ls", "args": {"path": "."}}}]]
    assert events[-1]["candidates"][0]["finishReason"] == "STOP" and events[-1]["usageMetadata"] == {
        "promptTokenCount": 4, "candidatesTokenCount": 6, "totalTokenCount": 10}
    assert all(e["modelVersion"] == "gemini-x" and e["responseId"] == "7" for e in events)
    assert stream.response_body["candidates"][0]["content"]["parts"][0] == {"text": "Hello"}


# -- through the proxy with Google's SDK ------------------------------------------------------------------------

async def test_sdk_function_calling_round_trip_with_deterministic_ids(env):
    ep, key = env.episode()
    client = client_for(env, ep, key, "v1beta")
    config = types.GenerateContentConfig(system_instruction="be brief", tools=[types.Tool(function_declarations=[LS])],
                                         automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    history = [types.Content(role="user", parts=[types.Part(text="what is here?")])]
    first = await client.aio.models.generate_content(model="gemini-2.5-pro", contents=history, config=config)
    [call] = first.function_calls
    assert (call.name, call.args) == ("ls", {"path": "."}) and first.text == "Let me look."
    assert first.model_version == "gemini-2.5-pro" and first.candidates[0].finish_reason == types.FinishReason.STOP
    sent = env.fake.requests[-1]
    assert sent["model"] == POLICY and sent["messages"][0] == {"role": "system", "content": "be brief"}
    assert sent["tools"][0]["function"]["parameters"] == {"type": "object", "required": ["path"], "properties": {
        "path": {"type": "string", "description": "where"}}}
    # The client answers the call without its id (as a client that builds its own Parts does)
    history += [first.candidates[0].content,
                types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
                    name="ls", response={"output": "a.txt b.txt"}))])]
    second = await client.aio.models.generate_content(model="gemini-2.5-pro", contents=history, config=config)
    assert second.text == "All done."
    messages = env.fake.requests[-1]["messages"]
    assert messages[2]["tool_calls"][0]["id"] == call.id  # the id the SDK got back, sent back
    assert messages[3] == {"role": "tool", "tool_call_id": call.id, "content": "a.txt b.txt"}
    # A client that keeps no ids at all (it builds its own Parts): the call gets its positional id, and the answer
    # answers it, the same on every request of this history
    bare = [history[0], types.Content(role="model", parts=[types.Part(text="Let me look."), types.Part(
        function_call=types.FunctionCall(name="ls", args={"path": "."}))]), history[2]]
    for _ in range(2):
        await client.aio.models.generate_content(model="gemini-2.5-pro", contents=bare, config=config)
        messages = env.fake.requests[-1]["messages"]
        assert messages[2]["tool_calls"][0]["id"] == messages[3]["tool_call_id"] == "call_1_0"
    one, two = (await env.calls(ep, 4))[:2]
    assert one.protocol == two.protocol == gemini.PROTOCOL and one.client_model == "gemini-2.5-pro"
    assert one.path == "/v1beta/models/gemini-2.5-pro:generateContent" and one.status == two.status == "ok"
    assert one.completion_token_ids[-1] == tok.IM_END and one.prompt_token_ids == tok.render_prompt(
        env.fake.requests[0]["messages"], env.fake.requests[0].get("tools"))
    assert json.loads(one.response)["candidates"][0]["content"]["parts"][1]["functionCall"]["args"] == {"path": "."}
    assert "x-goog-api-key" not in {k.lower() for k in one.client_headers}
    # `alight inspect` reads the stored Gemini bodies
    asked = request_turns(two.protocol, two.client_request)
    assert [(t.role, t.kind) for t in asked] == [("system", "text"), ("user", "text"), ("assistant", "text"),
                                                 ("assistant", "tool_call"), ("tool", "tool_result")]
    assert asked[4].text == "a.txt b.txt" and tool_names(two.protocol, two.client_request) == ["ls"]
    assert [(t.kind, t.text) for t in reply_turns(two.protocol, two.response, False)] == [("text", "All done.")]


async def test_sdk_stream_function_call_arrives_whole(env):
    ep, key = env.episode()
    client = client_for(env, ep, key)
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[LS])],
                                         automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    chunks = [c async for c in await client.aio.models.generate_content_stream(
        model="gemini-flash", contents="what is here?", config=config)]
    calls = [fc for c in chunks for fc in (c.function_calls or ())]
    assert [(fc.name, fc.args) for fc in calls] == [("ls", {"path": "."})]
    assert "".join(c.text or "" for c in chunks) == "Let me look."
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.total_token_count > 0
    [call] = await env.calls(ep, 1)
    assert call.stream and call.status == "ok" and call.path == "/v1/models/gemini-flash:streamGenerateContent?alt=sse"
    seen = reply_turns(call.protocol, call.response, True)  # `alight inspect` reassembles the stream
    assert [(t.kind, t.text, t.name) for t in seen] == [("text", "Let me look.", None),
                                                        ("tool_call", '{"path": "."}', "ls")]


async def test_key_in_the_query_errors_in_googles_shape_and_no_json_array_streams(env):
    ep, key = env.episode()
    url = env.url(ep, "/v1beta/models/gemini-2.5-pro:generateContent")
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    status, out, _ = await post(f"{url}?key={key}", body, None)
    assert status == 200 and json.loads(out)["candidates"][0]["content"]["role"] == "model"
    status, out, _ = await post(f"{url}?key=wrong", body, None)
    assert status == 401 and json.loads(out)["error"]["status"] == "UNAUTHENTICATED"
    bad = json.dumps({"contents": [{"role": "robot", "parts": [{"text": "hi"}]}]})
    status, out, _ = await post(url, bad, None, {"x-goog-api-key": key})
    assert status == 400 and json.loads(out)["error"]["status"] == "INVALID_ARGUMENT"
    assert "contents.0.role" in json.loads(out)["error"]["message"]
    status, out, _ = await post(url.replace("generateContent", "streamGenerateContent"), body, None,
                                {"x-goog-api-key": key})
    assert status == 400 and "alt=sse" in json.loads(out)["error"]["message"]
    client = client_for(env, ep, key)
    with pytest.raises(genai_errors.ClientError) as raised:  # the SDK reads the error shape
        await client.aio.models.generate_content(model="m", contents="hi", config=types.GenerateContentConfig(
            candidate_count=2))
    assert raised.value.code == 400 and raised.value.status == "INVALID_ARGUMENT"
    async with aiohttp.ClientSession() as session:  # the model list, in Google's shape
        async with session.get(env.url(ep, "/v1beta/models"), headers={"x-goog-api-key": key}) as resp:
            listed = await resp.json()
    assert resp.status == 200 and listed["models"][0]["name"].startswith("models/")
    calls = await env.calls(ep, 4)
    assert calls[0].path == "/v1beta/models/gemini-2.5-pro:generateContent"  # the key is not recorded
    assert key not in json.dumps([c.path for c in calls])


# -- exact continuation's chains on Gemini tool calls (the tiny model's tokenizer, no server) ---------------------

@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoTokenizer

    from agentlightning_cli.serve.tiny_model import ensure_tiny_model
    from tests.harness_support import harness_home

    return AutoTokenizer.from_pretrained(str(ensure_tiny_model(harness_home())))


@pytest.mark.parametrize("echo", [True, False], ids=["ids-echoed", "ids-dropped"])
def test_a_gemini_tool_call_conversation_continues_whether_ids_come_back_or_not(tiny, echo):
    """The chain learns the reply with the positional ids the client got (positional_ids, as continued.py applies
    it); the client's next request, with those ids or without any, is a continuation."""
    from agentlightning_cli.proxy.continuation.chains import Chains
    from tests.test_continuation_chains import Model, call

    model = Model(tiny)
    chains = Chains(model.eot)
    tools = [{"functionDeclarations": [{"name": "ls", "parameters": {
        "type": "OBJECT", "properties": {"path": {"type": "STRING"}}}}]}]
    first = {"systemInstruction": {"parts": [{"text": "You help."}]}, "tools": tools,
             "contents": [{"role": "user", "parts": [{"text": "look around"}]}]}
    chat, dropped = gemini.request_to_chat(first)
    vllm_call = {"id": "chatcmpl-tool-9f2", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}}
    derendered = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [vllm_call]}}]}
    gemini.positional_ids(first)(derendered)  # what continued.exact_chat does before the chain learns the reply
    reply = response_from_chat(derendered, client_model="m", request=first)
    sampled = model.sample('<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n</tool_call>')
    d1, _ = call(chains, model, chat, derendered["choices"][0]["message"], sampled=sampled, finish="tool_calls",
                 dropped=dropped)
    model_turn = reply["candidates"][0]["content"]
    if not echo:
        model_turn = {"role": "model", "parts": [{"functionCall": {k: v for k, v in p["functionCall"].items()
                                                                    if k != "id"}} for p in model_turn["parts"]]}
    answer = {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a.txt"}}}]}
    second = {**first, "contents": [*first["contents"], model_turn, answer]}
    chat, dropped = gemini.request_to_chat(second)
    d2, _ = call(chains, model, chat, "done", dropped=dropped)
    assert d2.kind == "continue" and d2.prompt_ids[:len(d1.prompt_ids) + len(sampled)] == d1.prompt_ids + sampled
