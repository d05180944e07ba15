"""Training rows from stored calls: merge rules, gap masks, break reasons, retries, error calls, over-long rows,
and rows from calls of all three protocols read back from a real store."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentlightning_cli.store import CallRecord, Store
from agentlightning_cli.train import row_tree
from agentlightning_cli.train.rows import RowContext, build_rows

# A toy vocabulary: ids -> text pieces. 1/2 are the turn markers, 3 the end of turn, like ChatML's.
VOCAB = {1: "<|im_start|>", 2: "\n", 3: "<|im_end|>", 10: "user", 11: "assistant", 12: "hi", 13: "ls",
         14: "out", 15: "put", 16: "output", 17: "<think>", 18: "hm", 19: "</think>", 20: "ok", 21: "more"}
SPECIAL = ("<|im_start|>", "<|im_end|>")
CTX = RowContext(decode=lambda ids: "".join(VOCAB[i] for i in ids), special_tokens=SPECIAL,
                 eot_ids=frozenset({3}))

SYS_USER = [1, 10, 2, 12, 3, 2]  # <|im_start|>user\nhi<|im_end|>\n
GEN = [1, 11, 2]  # <|im_start|>assistant\n
TOOL = [2, 1, 10, 2, 14, 15, 3, 2]  # \n<|im_start|>user\noutput<|im_end|>\n


@dataclass
class FakeCall:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] | None = None
    status: str = "ok"
    id: str = ""
    sampling: dict = field(default_factory=lambda: {"temperature": 1.0})

    def __post_init__(self):
        if self.completion_logprobs is None:
            self.completion_logprobs = [-0.5 - 0.1 * i for i in range(len(self.completion_token_ids))]


def chain(n: int) -> list[FakeCall]:
    """n calls where each prompt is the previous prompt + reply + a tool result + the next generation prompt."""
    calls, prompt = [], SYS_USER + GEN
    for i in range(n):
        reply = [13, 3]
        calls.append(FakeCall(prompt, reply, id=f"c{i}"))
        prompt = prompt + reply + TOOL + GEN
    return calls


def test_strict_merge_makes_one_row_with_gaps_masked_and_stored_logprobs():
    calls = chain(3)
    report = build_rows("ep", calls, CTX)
    assert len(report.rows) == 1 and report.calls == 3 and not report.breaks
    row = report.rows[0]
    assert row.prompt_ids == calls[0].prompt_token_ids and row.merge == "strict"
    gap = TOOL + GEN
    assert row.completion_ids == [13, 3] + gap + [13, 3] + gap + [13, 3]
    assert row.mask == [1, 1] + [0] * len(gap) + [1, 1] + [0] * len(gap) + [1, 1]
    assert row.logprobs[:2] == calls[0].completion_logprobs and row.logprobs[-2:] == calls[2].completion_logprobs
    assert all(lp == 0.0 for lp, m in zip(row.logprobs, row.mask) if m == 0)
    # the row is exactly the last call's prompt + its completion: what the model saw
    assert row.prompt_ids + row.completion_ids == calls[2].prompt_token_ids + calls[2].completion_token_ids
    assert row.call_ids == ["c0", "c1", "c2"] and row.trained_tokens == 6


def test_edited_break_when_a_reply_is_dropped_from_history():
    # mini-SWE-agent drops a reply without a tool call: the next prompt continues after the user turn
    first = FakeCall(SYS_USER + GEN, [20, 3], id="a")
    second = FakeCall(SYS_USER + [1, 10, 2, 21, 3, 2] + GEN, [13, 3], id="b")
    for merge in ("strict", "splice"):  # no rule may paper over it
        report = build_rows("ep", [first, second], CTX, merge)
        assert len(report.rows) == 2 and dict(report.breaks) == {"edited": 1}
        assert report.break_log == [{"episode_id": "ep", "call_id": "b", "reason": "edited"}]


def test_template_break_when_thinking_is_stripped_from_past_turns():
    first = FakeCall(SYS_USER + GEN, [17, 18, 19, 20, 3], id="a")  # <think>hm</think>ok<|im_end|>
    second = FakeCall(SYS_USER + GEN + [20, 3] + TOOL + GEN, [13, 3], id="b")
    report = build_rows("ep", [first, second], CTX)
    assert dict(report.breaks) == {"template": 1} and len(report.rows) == 2
    # splice keeps the sampled ids (with the thinking) and takes the gap after the end-of-turn token
    spliced = build_rows("ep", [first, second], CTX, "splice")
    assert not spliced.breaks and len(spliced.rows) == 1 and spliced.rows[0].merge == "splice"
    row = spliced.rows[0]
    assert row.completion_ids == [17, 18, 19, 20, 3] + TOOL + GEN + [13, 3]
    assert row.mask == [1] * 5 + [0] * len(TOOL + GEN) + [1, 1]


def test_retokenised_break_when_the_same_text_has_other_ids():
    first = FakeCall(SYS_USER + GEN, [14, 15, 3], id="a")  # "out" "put"
    second = FakeCall(SYS_USER + GEN + [16, 3] + TOOL + GEN, [13, 3], id="b")  # "output" as one id
    report = build_rows("ep", [first, second], CTX)
    assert dict(report.breaks) == {"retokenised": 1}


def test_other_break_without_a_tokenizer_to_compare_text():
    first = FakeCall(SYS_USER + GEN, [14, 15, 3])
    second = FakeCall(SYS_USER + GEN + [16, 3] + TOOL + GEN, [13, 3])
    assert dict(build_rows("ep", [first, second], RowContext()).breaks) == {"other": 1}


def test_retries_keep_the_last_and_error_calls_are_dropped():
    calls = chain(3)
    retry_first = FakeCall(calls[1].prompt_token_ids, [20, 3], id="retry-old")  # same prompt sent twice
    failed = FakeCall(calls[2].prompt_token_ids, [], status="upstream_error", id="err")
    no_ids = FakeCall([], [], id="noids")
    report = build_rows("ep", [calls[0], retry_first, calls[1], failed, no_ids, calls[2]], CTX)
    assert dict(report.dropped) == {"retried_prompts": 1, "error_calls": 1, "no_token_ids": 1}
    assert len(report.rows) == 1 and report.rows[0].call_ids == ["c0", "c1", "c2"]


def test_over_long_rows_are_dropped_and_counted_never_truncated():
    calls = chain(3)
    limit = len(calls[1].prompt_token_ids) + 2  # room for two calls merged, not three
    report = build_rows("ep", calls, RowContext(decode=CTX.decode, special_tokens=SPECIAL, max_tokens=limit))
    assert [r.call_ids for r in report.rows] == [["c0", "c1"]]  # c2 alone is still too long
    assert report.dropped["over_long_rows"] == 1 and report.dropped["length_splits"] == 1
    assert all(r.length <= limit for r in report.rows)
    tiny = build_rows("ep", calls, RowContext(max_tokens=3))
    assert tiny.rows == [] and tiny.dropped["over_long_rows"] == 3


def test_a_different_temperature_starts_a_new_row():
    calls = chain(2)
    calls[1].sampling = {"temperature": 0.7}
    report = build_rows("ep", calls, CTX)
    assert [r.temperature for r in report.rows] == [1.0, 0.7]


def test_unknown_merge_rule_is_refused():
    with pytest.raises(ValueError, match="unknown merge rule"):
        build_rows("ep", chain(1), CTX, "loose")


@pytest.mark.parametrize("protocol", ["openai-chat", "anthropic-messages", "openai-responses"])
def test_rows_from_stored_calls_of_every_protocol(tmp_path: Path, protocol: str):
    """The proxy stores the chat ids vLLM used whatever protocol the harness spoke; rows read them back."""
    with Store.open(tmp_path) as store:
        ep = store.create_episode(None, None, "t", 0, "h", "k")
        for call in chain(3):
            store.add_call(CallRecord(
                episode_id=ep.id, protocol=protocol, method="POST", path="/v1/x", status="ok", http_status=200,
                stream=True, client_request=b"{}", started_at=1.0, ended_at=2.0, sampling={"temperature": 1.0},
                prompt_token_ids=call.prompt_token_ids, completion_token_ids=call.completion_token_ids,
                completion_logprobs=call.completion_logprobs))
        stored = store.get_calls(ep.id)
        report = build_rows(ep.id, stored, CTX)
    assert len(report.rows) == 1 and report.rows[0].call_ids == [c.id for c in stored]
    assert report.rows[0].completion_ids[-2:] == [13, 3]


def test_greedy_calls_are_never_trained_and_stay_as_context():
    """A call at temperature 0 is the argmax, not a sample: dropped (greedy_calls), its reply kept in the row as
    context (mask 0) when the next call continues it; a call that sent no temperature samples at 1.0."""
    calls = chain(3)
    calls[1].sampling = {"temperature": 0.0}
    calls[2].sampling = {}  # the harness sent none
    report = build_rows("ep", calls, CTX)
    assert report.dropped["greedy_calls"] == 1 and not report.breaks and report.calls == 2
    (row,) = report.rows
    gap = TOOL + GEN
    assert row.call_ids == ["c0", "c2"] and row.temperature == 1.0
    assert row.completion_ids == [13, 3] + gap + [13, 3] + gap + [13, 3]
    assert row.mask == [1, 1] + [0] * (len(gap) + 2 + len(gap)) + [1, 1]  # the greedy reply is context
    calls[0].sampling = calls[2].sampling = {"temperature": 0.0}
    assert build_rows("ep", calls, CTX).rows == []  # all greedy: nothing trains at temperature 0


def _exact(call: FakeCall, kind: str, chain: str | None, reason: str | None = None, parent: str | None = None):
    call.continuation = {"mode": "exact", "kind": kind, "reason": reason, "chain": chain, "parent": parent}
    return call


def contexts(row) -> list[list[int]]:
    """The ids each call of a row is trained in: its last token's context along the row's tree (row_tree.path)."""
    ids, out, end = row.prompt_ids + row.completion_ids, [], 0
    for call_end in call_ends(row):
        out.append([ids[i] for i in row_tree.path(len(ids), row.branches, call_end)])
        end = call_end
    assert end == len(ids) - 1 or not row.call_ids
    return out


def call_ends(row) -> list[int]:
    """Flat index of the last token of each sampled run (one per call: every reply here ends with id 3)."""
    flat = [0] * len(row.prompt_ids) + row.mask
    return [i for i, m in enumerate(flat) if m and (i + 1 == len(flat) or not flat[i + 1])]


def test_exactly_continued_calls_join_their_own_conversations_row_and_forks_and_fallbacks_are_labelled():
    """Exact continuation: a continue joins its chain's row wherever another conversation's calls came between; a
    start opens a row without a break; a fork (break `fork/<reason>`) joins its parent's row as a branch
    (train.forks = pack), or opens its own (row); a fallback joins its parent's row when its prompt still continues
    it, else breaks as `fallback/<reason>`. Counted per kind. Packed, every call's context along the row's tree is
    exactly the ids it was sampled after and its reply; the shared prefix is in the row once."""
    other = [1, 10, 2, 21, 3, 2] + GEN  # another first user turn: a sub-agent
    a1 = _exact(FakeCall(SYS_USER + GEN, [13, 3], id="a1"), "start", "c1")
    b1 = _exact(FakeCall(other, [20, 3], id="b1"), "start", "c2")
    a2 = _exact(FakeCall(SYS_USER + GEN + [13, 3] + TOOL + GEN, [16, 3], id="a2"), "continue", "c1")
    b2 = _exact(FakeCall(other + [20, 3] + TOOL + GEN, [12, 3], id="b2"), "fallback", "c3", "unclosed", "c2")
    fork = _exact(FakeCall(SYS_USER + GEN + [13, 3] + [2, 1, 10, 2, 21, 3, 2] + GEN, [20, 3], id="f"),
                  "fork", "c4", "edited", "c1")
    skew = _exact(FakeCall(other + [12, 12, 3] + GEN, [13, 3], id="s"), "fallback", "c5", "skew", "c3")
    a3 = _exact(FakeCall(a2.prompt_token_ids + [16, 3] + TOOL + GEN, [13, 3], id="a3"), "continue", "c1")
    calls = [a1, b1, a2, b2, fork, skew, a3]
    by_id = {c.id: c for c in calls}
    packed = build_rows("ep", calls, CTX)
    assert [r.call_ids for r in packed.rows] == [["a1", "a2", "f", "a3"], ["b1", "b2"], ["s"]]
    assert [r.split for r in packed.rows] == [None, "start", "fallback/skew"]
    assert packed.breaks == {"fork/edited": 1, "fallback/skew": 1}
    host = packed.rows[0]
    # The fork shares a1's context and reply, then a3 continues a2 (no longer the row's last token): two branches.
    shared = len(SYS_USER + GEN + [13, 3]) + 4  # TOOL and the fork's user turn share "\n<|im_start|>user\n"
    assert host.branches == [(len(a2.prompt_token_ids) + 2, shared - 1),
                             (len(a2.prompt_token_ids) + 2 + 1 + len(fork.prompt_token_ids) - shared + 2,
                              len(a2.prompt_token_ids) + 1)]
    assert contexts(host) == [by_id[c].prompt_token_ids + by_id[c].completion_token_ids for c in host.call_ids]
    assert host.length == len(a3.prompt_token_ids) + 2 + 1 + (len(fork.prompt_token_ids) - shared + 2) + 1
    assert sum(host.mask) == 8  # four replies of two tokens, each once; the repeats are context
    assert packed.counts.to_dict() == build_rows("ep", calls, RowContext(**{**vars(CTX), "pack_forks": False})
                                                 ).counts.to_dict()
    report = build_rows("ep", calls, RowContext(**{**vars(CTX), "pack_forks": False}))
    assert [r.call_ids for r in report.rows] == [["a1", "a2", "a3"], ["b1", "b2"], ["f"], ["s"]]
    assert [r.split for r in report.rows] == [None, "start", "fork/edited", "fallback/skew"]
    assert report.breaks == {"fork/edited": 1, "fallback/skew": 1}
    assert all(not r.branches for r in report.rows)
    counts = report.counts.to_dict()
    assert (counts["mode"], counts["calls"], counts["conversations"]) == ("exact", 7, 2)
    assert counts["forks"] == {"edited": 1} and counts["fallbacks"] == {"unclosed": 1, "skew": 1}
    assert counts["breaks_per_100_calls"] == {"fallback/skew": 14.29, "fork/edited": 14.29}
    # The same ids as render traffic (no decisions): the prefix rule against the call before breaks at every switch.
    for call in (a1, b1, a2, b2, fork, skew, a3):
        call.continuation = None
    render = build_rows("ep", [a1, b1, a2, b2, fork, skew, a3], CTX)
    assert len(render.rows) == 7 and sum(render.breaks.values()) == 6
    counts = render.counts.to_dict()
    assert (counts["mode"], counts["conversations"], counts["forks"]) == ("render", 7, {})
    assert counts["breaks"] == dict(render.breaks) and counts["breaks_per_100_calls_total"] == round(600 / 7, 2)
