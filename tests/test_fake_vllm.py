"""The scripted fake vLLM speaks vLLM's own wire format (checked against vLLM's protocol models) and keeps
the multi-turn prefix property that training rows rely on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import openai
import pytest
from pydantic import BaseModel

from agentlightning_cli.scripted import fake_tokens as tok
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM

HELLO = [{"role": "user", "content": "hello"}]
TOOL_TURN = {"content": "", "tool_calls": [{"name": "ls", "arguments": {"path": "."}}]}


def _raw(url: str, body: dict) -> bytes:
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        return resp.read()


def _no_extra_fields(model: BaseModel, where: str = "") -> None:
    assert not model.model_extra, f"{where}: fields vLLM does not have: {sorted(model.model_extra)}"
    for name in type(model).model_fields:
        value = getattr(model, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                _no_extra_fields(item, f"{where}.{name}")


def test_wire_format_matches_vllm_protocol_models():
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse, ChatCompletionStreamResponse

    body = {"model": "base", "messages": HELLO, "logprobs": True, "top_logprobs": 2, "return_token_ids": True,
            "stream_options": {"include_usage": True}}
    with FakeVLLM(FakeScript(turns=["Hi there", TOOL_TURN])) as fake:
        for turn_messages in (HELLO, HELLO + [{"role": "assistant", "content": "Hi there"}]):
            data = json.loads(_raw(fake.url, {**body, "messages": turn_messages}))
            model = ChatCompletionResponse.model_validate(data)
            _no_extra_fields(model, "response")
            assert model.model_dump() == data  # vLLM's JSONResponse(content=model_dump()) would send exactly this
            events = _raw(fake.url, {**body, "messages": turn_messages, "stream": True}).split(b"\n\n")
            assert events[-2:] == [b"data: [DONE]", b""]
            for event in events[:-2]:
                chunk = json.loads(event.removeprefix(b"data: "))
                parsed = ChatCompletionStreamResponse.model_validate(chunk)
                _no_extra_fields(parsed, "chunk")
                assert parsed.model_dump(exclude_unset=True) == chunk


def test_stream_and_json_carry_the_same_tokens_and_prompts_extend():
    with FakeVLLM(FakeScript(turns=["Hi there", TOOL_TURN, "done"])) as fake:
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="x", max_retries=0)
        extra = {"return_token_ids": True}
        first = client.chat.completions.create(model="base", messages=HELLO, extra_body=extra).model_dump()
        messages = HELLO + [{"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "go"}]
        prompt, ids, args = None, [], ""
        for chunk in client.chat.completions.create(model="base", messages=messages, stream=True, extra_body=extra):
            data = chunk.model_dump()
            prompt = data.get("prompt_token_ids") or prompt
            for choice in data["choices"]:
                ids += choice.get("token_ids") or []
                for call in choice["delta"].get("tool_calls") or []:
                    args += call["function"].get("arguments") or ""
        assert prompt[: len(first["prompt_token_ids"]) + len(first["choices"][0]["token_ids"])] == (
            first["prompt_token_ids"] + first["choices"][0]["token_ids"])
        assert json.loads(args) == {"path": "."} and ids[-1] == tok.IM_END
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
        third = client.chat.completions.create(model="base", messages=messages, extra_body=extra).model_dump()
        assert third["prompt_token_ids"][: len(prompt) + len(ids)] == prompt + ids
        assert third["choices"][0]["message"]["content"] == "done"


def test_failure_switches_and_lora_endpoints():
    with FakeVLLM(FakeScript(status=503)) as fake:
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="base", messages=HELLO)
        load = urllib.request.Request(fake.url + "/v1/load_lora_adapter", method="POST",
                                      data=json.dumps({"lora_name": "policy-r1", "lora_path": "/a"}).encode())
        assert b"added successfully" in urllib.request.urlopen(load).read()
        assert [m.id for m in client.models.list()] == ["base", "policy-r1"]


def test_runs_as_a_separate_process_with_a_script_file(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": ["from the file"]}))
    port = 18000 + (int(time.time() * 1000) % 2000)
    proc = subprocess.Popen([sys.executable, "-m", "agentlightning_cli.scripted.fake_vllm", "--port", str(port),
                             "--script", str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert "listening" in proc.stdout.readline()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        reply = client.chat.completions.create(model="base", messages=HELLO)
        assert reply.choices[0].message.content == "from the file"
    finally:
        proc.terminate()
        proc.wait(10)
