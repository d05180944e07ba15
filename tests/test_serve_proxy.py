"""`alight serve`'s stack end to end: real clients -> the recording proxy -> the real vLLM serving the tiny model.

One vLLM server for the module. The last test kills it mid-stream, so it must stay last.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentlightning_cli.config import load_settings
from agentlightning_cli.serve.adapters import make_adapter
from agentlightning_cli.serve.policy import PolicyServer
from agentlightning_cli.commands.serve import open_run, run_proxy
from agentlightning_cli.serve.tiny_model import build_tiny_model

pytestmark = pytest.mark.vllm
# strict: vLLM 0.32 pins the argument schema only for strict tools; without it a forced call from the random
# model is a valid envelope around garbage arguments (an endless number). The enum (and no free whitespace,
# see Stack) leaves the random model nothing to get wrong: free strings may hold control characters.
BASH = {"name": "bash", "description": "run a shell command", "strict": True,
        "parameters": {"type": "object", "properties": {"command": {"type": "string", "enum": ["ls", "pwd"]}},
                       "required": ["command"], "additionalProperties": False}}
USER = "list the files"


class Stack:
    """PolicyServer + store + the proxy on its own event-loop thread, exactly as `alight serve` wires them."""

    def __init__(self, tmp: Path):
        model = build_tiny_model(tmp / "tiny")
        self.settings = load_settings(flags={"runs_dir": str(tmp / "runs"),
                                             "serve": {"max_model_len": 2048, "startup_timeout_s": 240,
                                                       "extra_args": ["--structured-outputs-config",
                                                                      '{"backend": "xgrammar", "disable_any_whitespace": true}']}})
        self.store, self.run, self.run_dir = open_run(self.settings, "t")
        self.policy = PolicyServer(self.settings, self.run_dir, model).start()
        ready = threading.Event()
        self.proxy = None

        def on_ready(proxy) -> None:
            self.proxy = proxy
            ready.set()

        async def main() -> None:
            self.loop, self.stop_event = asyncio.get_running_loop(), asyncio.Event()
            await run_proxy(self.settings, self.policy, self.store, self.run, self.run_dir, self.stop_event, on_ready)

        self.thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        self.thread.start()
        assert ready.wait(30), "proxy did not start"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(30)
        self.policy.stop()
        self.store.close()

    def url(self, episode: str, path: str) -> str:
        return f"{self.proxy.base_url}/e/{episode}{path}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("serve"))
    yield s
    s.close()


def post(url: str, body: dict, key: str = "secret", stream: bool = False):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "content-type": "application/json", "authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"})
    resp = urllib.request.urlopen(req, timeout=120)
    return resp if stream else json.load(resp)


def sse(resp) -> list[tuple[str | None, str]]:
    """(event name, data) pairs of a whole SSE stream."""
    events, name = [], None
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            events.append((name, line[5:].strip()))
            name = None
    return events


def tokenize(stack: Stack, messages: list, tools: list | None = None) -> list[int]:
    body = {"model": stack.policy.policy, "messages": messages, "add_generation_prompt": True}
    if tools:
        body["tools"] = tools
    req = urllib.request.Request(f"{stack.policy.base_url}/tokenize", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))["tokens"]


def only_call(stack: Stack, episode: str):
    # A stream is recorded just after its last byte goes out (the client can see EOF first): poll briefly.
    deadline = time.monotonic() + 10
    while not (calls := stack.store.get_calls(episode)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(calls) == 1
    call = calls[0]
    assert call.model == stack.proxy.policy and call.prompt_token_ids and call.completion_token_ids
    assert len(call.completion_logprobs) == len(call.completion_token_ids)
    return call


def test_chat_json_records_token_ids_and_hides_them(stack: Stack) -> None:
    messages = [{"role": "user", "content": USER}]
    reply = post(stack.url("chat-json", "/v1/chat/completions"),
                 {"model": "gpt-whatever", "messages": messages, "max_tokens": 8, "temperature": 0})
    assert reply["object"] == "chat.completion" and reply["model"] == "gpt-whatever"
    assert "prompt_token_ids" not in reply and "token_ids" not in reply["choices"][0]
    call = only_call(stack, "chat-json")
    assert call.status == "ok" and call.protocol == "openai-chat" and not call.stream
    assert call.prompt_token_ids == tokenize(stack, messages)
    assert len(call.completion_token_ids) == reply["usage"]["completion_tokens"]


def test_chat_stream_records_token_ids_and_hides_them(stack: Stack) -> None:
    messages = [{"role": "user", "content": USER}]
    events = sse(post(stack.url("chat-sse", "/v1/chat/completions"),
                      {"model": "m", "messages": messages, "max_tokens": 8, "stream": True}, stream=True))
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert all("prompt_token_ids" not in c and all("token_ids" not in ch for ch in c["choices"]) for c in chunks)
    text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
    call = only_call(stack, "chat-sse")
    assert call.status == "ok" and call.stream
    assert call.prompt_token_ids == tokenize(stack, messages)
    assert 0 < len(call.completion_token_ids) <= 8 and text


def test_anthropic_messages_forced_tool_call(stack: Stack) -> None:
    tool = {"name": "bash", "description": BASH["description"], "input_schema": BASH["parameters"], "strict": True}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 120, "messages": [{"role": "user", "content": USER}],
            "tools": [tool], "tool_choice": {"type": "tool", "name": "bash"}}
    reply = post(stack.url("anth-json", "/v1/messages"), body)
    uses = [b for b in reply["content"] if b["type"] == "tool_use"]
    assert reply["type"] == "message" and uses and uses[0]["name"] == "bash" and isinstance(uses[0]["input"], dict)
    call = only_call(stack, "anth-json")
    assert call.protocol == "anthropic-messages" and call.status == "ok"
    upstream = json.loads(call.upstream_request)
    assert upstream["tool_choice"]["function"]["name"] == "bash"
    assert call.prompt_token_ids == tokenize(stack, upstream["messages"], upstream["tools"])

    events = sse(post(stack.url("anth-sse", "/v1/messages"), {**body, "stream": True}, stream=True))
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    starts = [json.loads(d)["content_block"] for n, d in events if n == "content_block_start"]
    assert any(b["type"] == "tool_use" and b["name"] == "bash" for b in starts)
    assert only_call(stack, "anth-sse").stream


def test_responses_forced_tool_call(stack: Stack) -> None:
    tool = {"type": "function", **BASH}
    body = {"model": "policy", "input": USER, "tools": [tool], "max_output_tokens": 120,
            "tool_choice": {"type": "function", "name": "bash"}}
    reply = post(stack.url("resp-json", "/v1/responses"), body)
    calls = [o for o in reply["output"] if o["type"] == "function_call"]
    assert reply["object"] == "response" and calls and calls[0]["name"] == "bash"
    json.loads(calls[0]["arguments"])
    call = only_call(stack, "resp-json")
    assert call.protocol == "openai-responses" and call.status == "ok"
    upstream = json.loads(call.upstream_request)
    assert call.prompt_token_ids == tokenize(stack, upstream["messages"], upstream["tools"])

    events = sse(post(stack.url("resp-sse", "/v1/responses"), {**body, "stream": True}, stream=True))
    kinds = [json.loads(d)["type"] for _, d in events if d != "[DONE]"]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    done = json.loads(events[-1][1] if events[-1][1] != "[DONE]" else events[-2][1])["response"]
    assert any(o["type"] == "function_call" and o["name"] == "bash" for o in done["output"])
    assert only_call(stack, "resp-sse").stream


def test_gemini_sdk_against_alight_serve(stack: Stack) -> None:
    """Google's SDK (google-genai) against `alight serve`: a reply and a count, parsed by the SDK, recorded with ids.
    (No forced function call here: Gemini declarations have no `strict`, and vLLM guides a non-strict forced call's
    envelope only, so the random model writes garbage arguments; test_proxy_gemini covers calls, scripted.)"""
    from google import genai
    from google.genai import types

    client = genai.Client(api_key="secret", http_options=types.HttpOptions(
        base_url=stack.proxy.episode_base_url("gem-json", "gemini-generate-content"), api_version="v1beta",
        retry_options=types.HttpRetryOptions(attempts=1)))
    config = types.GenerateContentConfig(system_instruction="be brief", max_output_tokens=8)
    reply = client.models.generate_content(model="gemini-2.5-flash", contents=USER, config=config)
    assert reply.model_version == "gemini-2.5-flash" and reply.candidates[0].content.role == "model"
    call = only_call(stack, "gem-json")
    assert call.protocol == "gemini-generate-content" and call.status == "ok" and call.client_model == "gemini-2.5-flash"
    upstream = json.loads(call.upstream_request)
    assert upstream["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": USER}]
    assert call.prompt_token_ids == tokenize(stack, upstream["messages"])
    assert reply.usage_metadata.prompt_token_count == len(call.prompt_token_ids)
    assert reply.usage_metadata.candidates_token_count == len(call.completion_token_ids)
    count = client.models.count_tokens(model="gemini-2.5-flash", contents=USER)
    assert count.total_tokens == len(tokenize(stack, [{"role": "user", "content": USER}]))


def test_new_adapter_follows_the_policy_alias(stack: Stack) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": USER}], "max_tokens": 12, "temperature": 0}
    post(stack.url("pol-0", "/v1/chat/completions"), body)
    path = make_adapter(stack.policy.model, stack.policy.adapter_dir(1), rank=8, seed=1, random_b=True)
    name = stack.policy.load(1, path)
    stack.proxy.set_policy(name)
    post(stack.url("pol-1", "/v1/chat/completions"), body)
    r0, r1 = stack.store.get_calls("pol-0")[0], stack.store.get_calls("pol-1")[0]
    assert (r0.model, r1.model) == ("policy-r0", "policy-r1")
    assert r0.prompt_token_ids == r1.prompt_token_ids and r0.completion_token_ids != r1.completion_token_ids
    stack.proxy.set_policy("policy-r0")
    stack.policy.unload(name)
    with pytest.raises(urllib.error.HTTPError) as exc:
        post(f"{stack.policy.base_url}/v1/chat/completions", {**body, "model": name})
    assert exc.value.code == 404


def test_vllm_killed_mid_stream(stack: Stack) -> None:
    """Must run last: it kills the module's vLLM."""
    body = {"model": "m", "messages": [{"role": "user", "content": USER}], "max_tokens": 1500,
            "ignore_eos": True, "stream": True}
    resp = post(stack.url("killed", "/v1/chat/completions"), body, stream=True)
    first = [resp.readline() for _ in range(6)]
    assert any(line.startswith(b"data: {") for line in first)
    os.killpg(stack.policy.vllm.pid, signal.SIGKILL)
    rest = [json.loads(d) for _, d in sse(resp) if d != "[DONE]"]
    assert "error" in rest[-1] and "alight" in rest[-1]["error"]["message"]
    call = only_call(stack, "killed")
    assert call.status in ("upstream_error", "partial") and call.stream and call.error
    assert 0 < len(call.completion_token_ids) < 1500
