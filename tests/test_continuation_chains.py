"""Exact continuation's chain logic (proxy/continuation) with the real tokenizers of the tiny model and SmolLM2.

No vLLM server: the plain render is transformers' `apply_chat_template(tokenize=True)` after the message
preprocessing vLLM's renderer does first (tool-call `arguments` strings parsed to objects), which is what vLLM's
`/v1/chat/completions/render` returns for these templates (vllm/renderers/hf.py: render_messages ->
safe_apply_chat_template -> tokenizer.apply_chat_template; chat prompts are tokenised without special tokens
added). Sampled ids are what a model emits: a reply's ids + the end-of-turn id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.inspect.tokens import end_of_turn_ids
from agentlightning_cli.proxy import anthropic
from agentlightning_cli.proxy.continuation.chains import Chains
from agentlightning_cli.proxy.continuation.normalise import NORMALISATIONS, canonical_request
from agentlightning_cli.proxy.continuation.segments import split_turns
from tests.harness_support import harness_home

REWRITE = (Path(__file__).parent / "templates" / "rewrite_history.jinja").read_text()
# A ChatML template whose system turn counts the messages (as templates that print today's date or a turn
# number do): a render of a longer conversation changes a turn that was never sampled.
COUNTING = ("{{- '<|im_start|>system\\nturn ' + (messages|length)|string + '<|im_end|>\\n' }}"
            "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
SYSTEM = {"role": "system", "content": "You help."}


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoTokenizer

    from agentlightning_cli.serve.tiny_model import ensure_tiny_model

    return AutoTokenizer.from_pretrained(str(ensure_tiny_model(harness_home())))


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoTokenizer

    from agentlightning_cli.serve import smollm2 as model

    path = model.smollm2_dir(harness_home())
    if not (path / "tokenizer.json").is_file():  # built as `alight model smollm2` builds it (tests/test_smollm2.py)
        out = subprocess.run([sys.executable, "-m", "agentlightning_cli", "model", "smollm2"], capture_output=True,
                             text=True, timeout=900, env={**os.environ, "ALIGHT_HOME": str(harness_home())})
        assert out.returncode == 0, out.stderr
    return AutoTokenizer.from_pretrained(str(path))


class Model:
    """A tokenizer + template: the plain render vLLM does, and sampled ids as a model emits them."""

    def __init__(self, tok, template: str | None = None):
        self.tok, self.template = tok, template
        self.eot = end_of_turn_ids(Path(tok.name_or_path) / "tokenizer.json")
        self.im_end = tok.convert_tokens_to_ids("<|im_end|>")

    def render(self, body: dict, add_generation_prompt: bool = True, messages: int | None = None) -> list[int]:
        """`messages`: render only the first N (with add_generation_prompt=False: a history render)."""
        rendered = []
        for m in body["messages"][:messages]:  # vLLM's parse_chat_messages: tool-call arguments become objects
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.loads(
                    c["function"]["arguments"])}} for c in m["tool_calls"]]
            rendered.append(m)
        return self.tok.apply_chat_template(rendered, tools=body.get("tools"), chat_template=self.template,
                                            add_generation_prompt=add_generation_prompt, tokenize=True,
                                            return_dict=False)

    def sample(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False) + [self.im_end]


def call(chains: Chains, model: Model, body: dict, reply: str | dict, sampled: list[int] | None = None,
         finish: str = "stop", dropped: dict | None = None):
    """One proxied call: classify, 'generate' (the given reply), record. Returns (decision, sampled ids)."""
    request = canonical_request(body, dropped)
    decision = chains.classify(request, model.render(body))
    if decision.history_messages:  # as the proxy does (continued.py): render the history up to the cut reply
        history = model.render(body, add_generation_prompt=False, messages=decision.history_messages)
        decision = chains.classify(request, model.render(body), history_ids=history)
    message = {"role": "assistant", "content": reply} if isinstance(reply, str) else reply
    if sampled is None:
        sampled = model.sample(message.get("content") or "")
    chains.record(decision, message, sampled, finish)
    return decision, sampled


def conversation(*turns: str) -> dict:
    """A chat body: the system turn, then user/assistant turns alternating."""
    roles = ("user", "assistant")
    return {"messages": [SYSTEM, *({"role": roles[i % 2], "content": t} for i, t in enumerate(turns))]}


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_continuation_is_prompt_plus_sampled_plus_new_turns_and_equals_the_plain_render(which, request):
    model = Model(request.getfixturevalue(which))
    chains = Chains(model.eot)
    first, s1 = call(chains, model, conversation("list the files"), "the first file is done")
    assert first.kind == "start" and first.prompt_ids == model.render(conversation("list the files"))
    body2 = conversation("list the files", "the first file is done", "now fix the bug")
    second, s2 = call(chains, model, body2, "I will now fix it")
    assert second.kind == "continue" and second.reason is None
    assert second.prompt_ids[:len(first.prompt_ids) + len(s1)] == first.prompt_ids + s1
    assert second.sampled_spans == [(len(first.prompt_ids), len(first.prompt_ids) + len(s1))]
    # A template that keeps history and ids that re-encode alike: the continued prompt IS the plain render.
    assert second.prompt_ids == model.render(body2) and second.differs == [] and second.first_difference is None
    body3 = conversation("list the files", "the first file is done", "now fix the bug", "I will now fix it", "done?")
    third, _ = call(chains, model, body3, "yes")
    assert third.kind == "continue" and third.prompt_ids[:len(second.prompt_ids) + len(s2)] == second.prompt_ids + s2
    assert third.sampled_spans == [second.sampled_spans[0], (len(second.prompt_ids), len(second.prompt_ids) + len(s2))]
    assert third.prompt_ids == model.render(body3) and len(chains.chains) == 1


def test_a_template_that_rewrites_history_keeps_the_sampled_ids_verbatim(tiny):
    model = Model(tiny, REWRITE)
    chains = Chains(model.eot)
    first, s1 = call(chains, model, conversation("list the files"), "the first file is done")
    body2 = conversation("list the files", "the first file is done", "now fix the bug")
    second, _ = call(chains, model, body2, "ok")
    plain = model.render(body2)
    assert second.kind == "continue"
    start = len(first.prompt_ids)
    assert second.prompt_ids[start:start + len(s1)] == s1  # what the model sampled, not the template's "done"
    assert tiny.decode(plain[start:]).startswith("done<|im_end|>")  # the plain render rewrote the reply
    assert second.prompt_ids != plain and second.first_difference == start
    assert [d["segment"] for d in second.differs] == [2]  # only the reply's turn differs from the render
    new = second.prompt_ids[start + len(s1):]  # the new turns are the render after the reply's turn
    assert new == plain[len(plain) - len(new):] and tiny.decode(new).startswith("\n<|im_start|>user\nnow fix")


def test_sampled_ids_that_do_not_round_trip_through_text_are_kept(tiny):
    model = Model(tiny)
    text = "hello world"
    canonical = tiny.encode(text, add_special_tokens=False)
    split = [tid for ch in text for tid in tiny.encode(ch, add_special_tokens=False)]  # one id per character
    assert tiny.decode(split) == text and split != canonical  # same text, a split BPE never produces
    sampled = split + [model.im_end]
    chains = Chains(model.eot)
    first, _ = call(chains, model, conversation("say hi"), text, sampled=sampled)
    body2 = conversation("say hi", text, "again")
    second, _ = call(chains, model, body2, "hi")
    start = len(first.prompt_ids)
    assert second.kind == "continue" and second.prompt_ids[start:start + len(sampled)] == sampled
    assert model.render(body2)[start:start + len(canonical)] == canonical  # the plain render re-tokenised it
    assert second.prompt_ids != model.render(body2) and [d["segment"] for d in second.differs] == [2]


def test_a_render_that_changes_an_unsampled_turn_falls_back_as_skew(tiny):
    model = Model(tiny, COUNTING)
    chains = Chains(model.eot)
    call(chains, model, conversation("list the files"), "the first file is done")
    body2 = conversation("list the files", "the first file is done", "now fix the bug")
    second, _ = call(chains, model, body2, "ok")
    assert (second.kind, second.reason) == ("fallback", "skew")
    assert second.prompt_ids == model.render(body2) and second.sampled_spans == [] and second.parent == "c1"
    # The next call continues the chain the fallback started (its render is the prompt that was sent).
    third, _ = call(chains, model, conversation("list the files", "the first file is done", "now fix the bug", "ok",
                                                "go"), "fine")
    assert (third.kind, third.reason) == ("fallback", "skew")  # the counting system turn changes every call


def test_the_guard_also_checks_the_segment_count_of_the_history_render(tiny):
    model = Model(tiny)
    chains = Chains(model.eot)
    first, s1 = call(chains, model, conversation("list the files"), "the first file is done")
    body2 = conversation("list the files", "the first file is done", "now fix the bug")
    request = canonical_request(body2)
    history = tiny.apply_chat_template(conversation("list the files", "the first file is done")["messages"],
                                       add_generation_prompt=False, tokenize=True, return_dict=False)
    assert chains.classify(request, model.render(body2), history_ids=history).kind == "continue"
    short = model.render(conversation("list the files"))  # one closed turn fewer than the chain holds
    assert chains.classify(request, model.render(body2), history_ids=short).reason == "skew"


def test_a_reply_cut_at_max_tokens_is_closed_with_the_renders_end_of_turn_id_and_continued(tiny):
    model = Model(tiny)
    chains = Chains(model.eot)
    first, _ = call(chains, model, conversation("list the files"), "the first file", finish="length",
                    sampled=tiny.encode("the first file", add_special_tokens=False))  # no <|im_end|>
    cut = tiny.encode("the first file", add_special_tokens=False)
    body2 = conversation("list the files", "the first file", "go on")
    second, s2 = call(chains, model, body2, "ok")
    assert (second.kind, second.reason, second.closed_reply) == ("continue", None, [model.im_end])
    # The sampled ids verbatim, then the id the template closes the turn with (context: no span covers it).
    assert second.prompt_ids[:len(first.prompt_ids) + len(cut) + 1] == [*first.prompt_ids, *cut, model.im_end]
    assert second.sampled_spans == [(len(first.prompt_ids), len(first.prompt_ids) + len(cut))]
    assert second.prompt_ids == model.render(body2)  # ChatML closes a turn with <|im_end|> alone: the same ids
    # The closing id stays in the chain: the next call continues after it, and a retry of the second call forks
    # from the closed reply (its ids up to the closing id, the first reply's span masked).
    body3 = conversation("list the files", "the first file", "go on", "ok", "more")
    third, _ = call(chains, model, body3, "done")
    assert third.kind == "continue" and third.closed_reply == [] and third.prompt_ids == model.render(body3)
    assert third.prompt_ids[:len(second.prompt_ids) + len(s2)] == second.prompt_ids + s2
    retry, _ = call(chains, model, body2, "other")
    assert (retry.kind, retry.reason) == ("fork", "retry") and retry.prompt_ids == second.prompt_ids
    assert retry.masked_spans == second.sampled_spans and retry.closed_reply == []


def test_a_reply_cut_by_a_stop_string_keeps_the_sampled_stop_ids(tiny):
    """The client saw the text without the stop string; the model sampled its ids: the continued prompt holds what
    was sampled (closed), where the plain render would re-encode the shortened text."""
    model = Model(tiny)
    chains = Chains(model.eot)
    sampled = tiny.encode("run ls\nEND", add_special_tokens=False)
    first, _ = call(chains, model, conversation("list the files"), "run ls\n", sampled=sampled, finish="stop")
    body2 = conversation("list the files", "run ls\n", "go on")
    second, _ = call(chains, model, body2, "ok")
    assert (second.kind, second.closed_reply) == ("continue", [model.im_end])
    assert second.prompt_ids[len(first.prompt_ids):len(first.prompt_ids) + len(sampled) + 1] == [*sampled, model.im_end]
    assert second.prompt_ids != model.render(body2) and [d["segment"] for d in second.differs] == [2]


def test_an_unclosed_reply_whose_turn_the_render_never_closes_falls_back_as_unclosed(tiny):
    """A template that renders no end-of-turn id after an assistant turn gives no id to close a cut reply with."""
    model = Model(tiny, "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content }}"
                        "{%- if m.role != 'assistant' %}{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
                        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    chains = Chains(model.eot)
    call(chains, model, conversation("list the files"), "the first file", finish="length",
         sampled=tiny.encode("the first file", add_special_tokens=False))
    body2 = conversation("list the files", "the first file", "go on")
    second, _ = call(chains, model, body2, "ok")
    assert (second.kind, second.reason) == ("fallback", "unclosed") and second.prompt_ids == model.render(body2)


def _three_calls(model: Model):
    chains = Chains(model.eot)
    d1, s1 = call(chains, model, conversation("list the files"), "the first file is done")
    d2, s2 = call(chains, model, conversation("list the files", "the first file is done", "fix it"), "I will fix it")
    return chains, (d1, s1), (d2, s2)


def test_a_retry_forks_and_masks_the_parents_sampled_tokens(tiny):
    model = Model(tiny, REWRITE)
    chains, (d1, s1), (d2, s2) = _three_calls(model)
    retry, s3 = call(chains, model, conversation("list the files", "the first file is done", "fix it"), "other")
    assert (retry.kind, retry.reason, retry.parent) == ("fork", "retry", "c1")
    assert retry.prompt_ids == d2.prompt_ids  # the parent's ids up to the shared node, not a re-render
    span = (len(d1.prompt_ids), len(d1.prompt_ids) + len(s1))
    assert retry.masked_spans == [span] and retry.sampled_spans == []
    assert retry.prompt_ids[span[0]:span[1]] == s1
    fork = chains.chains[-1]
    assert fork.parent == "c1" and fork.spans == [(len(retry.prompt_ids), len(retry.prompt_ids) + len(s3))]
    # No sampled token is trained twice: the fork's own spans never overlap what it masks from its parent.
    assert all(e <= fork.spans[0][0] for _, e in fork.masked)


def test_dropping_a_rejected_reply_forks_at_the_request_before_it(tiny):
    model = Model(tiny, REWRITE)
    chains, (d1, s1), (d2, s2) = _three_calls(model)
    body = conversation("list the files", "the first file is done", "fix it")
    body["messages"].append({"role": "user", "content": "your reply had no command"})  # "I will fix it" dropped
    dropped, _ = call(chains, model, body, "ls")
    assert (dropped.kind, dropped.reason) == ("fork", "dropped_reply")
    end = len(d2.prompt_ids) - len(tiny.encode("\n<|im_start|>assistant\n", add_special_tokens=False))
    assert dropped.prompt_ids[:end] == d2.prompt_ids[:end]  # call 2's closed turns, sampled reply 1 included
    assert dropped.masked_spans == [(len(d1.prompt_ids), len(d1.prompt_ids) + len(s1))]
    assert dropped.mismatch == {"index": 3, "fields": ["role", "text"]}


def test_an_edit_of_an_earlier_message_is_a_fork_not_a_continuation(tiny):
    model = Model(tiny)
    chains, (d1, s1), (d2, s2) = _three_calls(model)
    body = conversation("list ALL the files", "the first file is done", "fix it", "I will fix it", "next")
    edited, _ = call(chains, model, body, "ok")
    assert edited.kind == "start"  # the only shared turn was the edited one: nothing after system is shared
    body = conversation("list the files", "the first file is done", "fix it NOW", "I will fix it", "next")
    edited, _ = call(chains, model, body, "ok")
    assert (edited.kind, edited.reason) == ("fork", "edited")
    assert edited.mismatch == {"index": 2, "fields": ["text"]}
    assert edited.prompt_ids == model.render(body) and edited.masked_spans == [
        (len(d1.prompt_ids), len(d1.prompt_ids) + len(s1))]


def test_two_interleaved_sub_agents_make_two_chains(tiny):
    model = Model(tiny)
    chains = Chains(model.eot)
    a1, _ = call(chains, model, conversation("main task"), "the first file")
    b1, _ = call(chains, model, conversation("sub task: read the file"), "read it")
    a2, _ = call(chains, model, conversation("main task", "the first file", "go on"), "done")
    b2, _ = call(chains, model, conversation("sub task: read the file", "read it", "and"), "ok")
    assert [d.kind for d in (a1, b1, a2, b2)] == ["start", "start", "continue", "continue"]
    assert (a2.chain, b2.chain) == ("c1", "c2") and len(chains.chains) == 2
    # Another system text or tool set is another key: it never joins a chain, even with the same turns.
    other = conversation("main task", "the first file", "go on")
    other["tools"] = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    assert chains.classify(canonical_request(other), model.render(other)).kind == "start"
    for effort in ({"reasoning_effort": "high"}, {"chat_template_kwargs": {"enable_thinking": True}}):
        other = {**conversation("main task", "the first file", "go on"), **effort}
        assert chains.classify(canonical_request(other), model.render(other)).kind == "start"
    # A Responses client's reasoning.effort reaches the key through what the translator dropped.
    assert canonical_request(other, {"reasoning": {"effort": "low"}}).key != canonical_request(other).key


def _continues_with(model: Model, sent_back: dict, reply: dict | None = None, dropped_body: dict | None = None):
    """Call 1 answered with `reply`; call 2 sends `sent_back` in its place: the decision for call 2."""
    chains = Chains(model.eot)
    reply = reply or {"role": "assistant", "content": "the first file is done"}
    call(chains, model, conversation("list the files"), reply, sampled=model.sample("the first file is done"))
    body = conversation("list the files", "x", "go on")
    body["messages"][2] = sent_back
    plain = {"role": "assistant", "content": "the first file is done"}  # how the render sees the reply
    rendered = {"messages": [m if m is not sent_back else plain for m in body["messages"]]}
    return chains.classify(canonical_request(body), model.render(rendered))


CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}}
CASES = {
    "reasoning": ({"role": "assistant", "content": "the first file is done", "reasoning_content": "hm"}, None),
    "content_parts": ({"role": "assistant", "content": [{"type": "text", "text": "the first file is done"}]}, None),
    "unknown_keys": ({"role": "assistant", "content": "the first file is done", "id": "msg_1"}, None),
    "assistant_strip": ({"role": "assistant", "content": "the first file is done"},
                        {"role": "assistant", "content": "\nthe first file is done "}),
    "null_empty": ({"role": "assistant", "content": "", "tool_calls": [CALL]},
                   {"role": "assistant", "content": None, "tool_calls": [CALL]}),
    "tool_call_arguments": ({"role": "assistant", "content": None, "tool_calls": [
        {**CALL, "function": {"name": "ls", "arguments": '{"path":"."}'}}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]}),
    "cache_control": ({"role": "assistant", "content": [
        {"type": "text", "text": "the first file is done", "cache_control": {"type": "ephemeral"}}]}, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_normalisation_fires_is_counted_and_a_real_difference_is_not_forgiven(tiny, name):
    model = Model(tiny)
    sent, reply = CASES[name]
    decision = _continues_with(model, sent, reply)
    assert decision.kind == "continue" and decision.normalisations.get(name, 0) >= 1, decision.normalisations
    if reply and reply.get("tool_calls"):  # another tool-call id is another call
        other = {**sent, "tool_calls": [{**sent["tool_calls"][0], "id": "call_2"}]}
        assert _continues_with(model, other, reply).kind == "fork"
    else:
        assert _continues_with(model, {"role": "assistant", "content": "the first file is DONE"}, reply).kind == "fork"


def test_what_the_anthropic_translator_drops_counts_as_its_normalisation(tiny):
    """cache_control, the billing header and thinking blocks, through the real Messages translator."""
    model = Model(tiny)
    chains = Chains(model.eot)
    system = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=abc"},
              {"type": "text", "text": "You help."}]
    first = {"model": "m", "max_tokens": 9, "system": system,
             "messages": [{"role": "user", "content": [{"type": "text", "text": "list the files",
                                                         "cache_control": {"type": "ephemeral"}}]}]}
    chat, dropped = anthropic.request_to_chat(first)
    call(chains, model, chat, "the first file is done", dropped=dropped)
    second = {**first, "messages": [*first["messages"], {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "the first file is done"}]},
        {"role": "user", "content": "go on"}]}
    chat, dropped = anthropic.request_to_chat(second)
    decision, _ = call(chains, model, chat, "ok", dropped=dropped)
    assert decision.kind == "continue"
    fired = decision.normalisations
    assert fired["cache_control"] == 1 and fired["billing_header"] == 1 and fired["reasoning"] == 1, fired
    assert set(NORMALISATIONS) >= set(fired)


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_end_of_turn_ids_close_every_rendered_turn(which, request):
    tok = request.getfixturevalue(which)
    model = Model(tok)
    assert model.im_end in model.eot
    body = conversation("a", "b", "c")
    ids = model.render(body)
    segments = split_turns(ids, model.eot)
    # system + 3 turns closed by <|im_end|>, then the open generation prompt
    assert len(segments) == 5 and all(ids[e - 1] == model.im_end for _, e in segments[:-1])
    assert tok.decode(ids[segments[-1][0]:]) == "\n<|im_start|>assistant\n"


def test_tool_calls_and_grouped_tool_results_continue_through_the_anthropic_translator(tiny):
    """Claude Code's shape: the reply's tool_use ids come back with their results; the tiny template groups
    consecutive tool results into one user turn. The ids the proxy returned are the key that matches."""
    model = Model(tiny)
    chains = Chains(model.eot)
    tools = [{"name": n, "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
             for n in ("ls", "cat")]
    first = {"model": "m", "max_tokens": 50, "system": "You help.", "tools": tools,
             "messages": [{"role": "user", "content": "look around"}]}
    chat, dropped = anthropic.request_to_chat(first)
    calls = [{"id": "chatcmpl-tool-1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}},
             {"id": "chatcmpl-tool-2", "type": "function", "function": {"name": "cat", "arguments": '{"path": "a"}'}}]
    sampled = model.sample('<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n</tool_call>\n'
                           '<tool_call>\n{"name": "cat", "arguments": {"path": "a"}}\n</tool_call>')
    d1, _ = call(chains, model, chat, {"role": "assistant", "content": None, "tool_calls": calls}, sampled=sampled,
                 finish="tool_calls", dropped=dropped)
    uses = [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
             "input": json.loads(c["function"]["arguments"])} for c in calls]
    results = [{"type": "tool_result", "tool_use_id": c["id"], "content": f"out {i}"} for i, c in enumerate(calls)]
    second = {**first, "messages": [*first["messages"], {"role": "assistant", "content": uses},
                                     {"role": "user", "content": results}]}
    # A call under an id the proxy never returned is not the reply it got, whatever its text.
    other = json.loads(json.dumps(second))
    other["messages"][1]["content"][1]["id"] = "toolu_other"
    chat, dropped = anthropic.request_to_chat(other)
    assert chains.classify(canonical_request(chat, dropped), model.render(chat)).kind == "fork"
    chat, dropped = anthropic.request_to_chat(second)
    d2, _ = call(chains, model, chat, "done", dropped=dropped)
    assert d2.kind == "continue" and d2.prompt_ids[:len(d1.prompt_ids) + len(sampled)] == d1.prompt_ids + sampled
    assert d2.prompt_ids == model.render(chat)  # the template re-renders these calls to the same ids
    assert "<tool_response>\nout 1" in tiny.decode(d2.prompt_ids[len(d1.prompt_ids) + len(sampled):])


def test_a_fork_keeps_masking_its_parents_tokens_as_it_continues(tiny):
    model = Model(tiny, REWRITE)
    chains, (d1, s1), (d2, s2) = _three_calls(model)
    retry, s3 = call(chains, model, conversation("list the files", "the first file is done", "fix it"), "other way")
    later, _ = call(chains, model, conversation("list the files", "the first file is done", "fix it", "other way",
                                                "and?"), "yes")
    parent_span = (len(d1.prompt_ids), len(d1.prompt_ids) + len(s1))
    assert later.kind == "continue" and later.chain == chains.chains[-1].id == "c2"
    assert later.masked_spans == [parent_span]
    assert later.sampled_spans == [(len(retry.prompt_ids), len(retry.prompt_ids) + len(s3))]
    # The parent chain still holds its own reply 2, which the fork never trains.
    assert chains.chains[0].spans == [parent_span, (len(d2.prompt_ids), len(d2.prompt_ids) + len(s2))]


def test_a_continuation_of_a_tip_already_in_flight_forks_as_parallel(tiny):
    """Two requests continuing one tip at once: the second cannot extend a tip the first is about to move (its
    record would overwrite the tip with ids built on the older one), so it forks `parallel` on the same continued
    ids, masking the parent's sampled tokens. Once the first is recorded (or released) the chain continues again."""
    model = Model(tiny, REWRITE)
    chains, (d1, s1), (d2, s2) = _three_calls(model)
    base = ["list the files", "the first file is done", "fix it", "I will fix it"]
    body_a, body_b = conversation(*base, "run the tests"), conversation(*base, "show the diff")
    a = chains.classify(canonical_request(body_a), model.render(body_a))
    chains.begin(a)  # A is in flight: generate awaited, not yet recorded
    assert a.kind == "continue" and chains.in_flight == {"c1"}
    b = chains.classify(canonical_request(body_b), model.render(body_b))
    assert (b.kind, b.reason, b.parent, b.chain) == ("fork", "parallel", "c1", None)
    plain_continue = Chains(model.eot)  # what B's prompt would be as a continuation: the same continued ids
    for body, text in ((conversation("list the files"), "the first file is done"),
                       (conversation(*base[:3]), "I will fix it")):
        call(plain_continue, model, body, text)
    assert b.prompt_ids == plain_continue.classify(canonical_request(body_b), model.render(body_b)).prompt_ids
    assert b.masked_spans == [(len(d1.prompt_ids), len(d1.prompt_ids) + len(s1)),
                              (len(d2.prompt_ids), len(d2.prompt_ids) + len(s2))] and b.sampled_spans == []
    sb = model.sample("the diff")
    fork = chains.record(b, {"role": "assistant", "content": "the diff"}, sb, "stop")
    assert fork.id == "c2" and fork.parent == "c1" and chains.in_flight == {"c1"}  # B's record frees nothing of A
    sa = model.sample("tests pass")
    tip = chains.record(a, {"role": "assistant", "content": "tests pass"}, sa, "stop")
    assert tip.id == "c1" and chains.in_flight == set() and tip.ids == a.prompt_ids + sa
    after = conversation(*base, "run the tests", "tests pass", "commit it")
    c = chains.classify(canonical_request(after), model.render(after))
    assert (c.kind, c.chain) == ("continue", "c1") and c.prompt_ids[:len(tip.ids)] == tip.ids
    # A call that ends without a record (upstream error, client gone) releases its chain: no spurious fork.
    chains.begin(c)
    chains.release(c)
    chains.release(c)  # idempotent: every ending path may release
    again = chains.classify(canonical_request(after), model.render(after))
    assert again.kind == "continue" and chains.in_flight == set()
