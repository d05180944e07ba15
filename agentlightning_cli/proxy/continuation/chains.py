"""An episode's conversations (chains) and how each new request relates to them: continue, fork, start, fallback.

A chain is one conversation as the model saw it: for each call, the canonical request turns, the reply as returned,
and one growing id sequence (each call's prompt + its sampled ids), with the spans of sampled tokens. Chains are
keyed by what changes every render (system text, tools, chat_template_kwargs, reasoning effort): requests under
another key never share ids with it.

`classify` is pure (it reads the chains, changes nothing); `record` adds the call once the reply is in. Rules
(issue 34): a request whose turns are a chain's turns + the reply it got + new turns CONTINUES it (prompt = the
chain's ids + the new turns' ids from the plain render, under the skew guard of segments.py); one whose last shared
node is not the chain's tip FORKS (reuses the parent's ids up to that node and masks the parent's sampled tokens
there, so none is trained twice); one that shares no turn after the system text with any chain STARTS a new chain
(a sub-agent: several live side by side, each one row). Where ids cannot continue, the plain render is sent
(FALLBACK) with the reason: `unclosed` (the reply ended without an end-of-turn id — length, a stop string — and
the render does not show how its turn closes), `skew` (the render does not repeat the chain's non-sampled turns id
for id), `prefill` (a final assistant turn to continue: the render ends inside a turn).

A reply that ended without an end-of-turn id (cut at max_tokens, a stop string) is CLOSED rather than dropped: the
sampled ids are kept verbatim and followed by the end-of-turn id the template closes that reply's turn with, read
from a render of the history alone (up to and including the reply, no generation prompt: `closing_ids`) — what the
model would see of its cut reply under any render, without re-encoding the text. The proxy renders that history
only when a first classify asks for it (`Decision.history_messages`), then classifies again with it. The added id
is context (no sampled span covers it), recorded in the decision as `closed_reply`.

In flight: the proxy `begin`s a decision before it awaits generate and `release`s it on every ending (record does
too). A second request continuing a chain whose continuation is still in flight forks as `parallel`: recording
both as continuations would let the later record overwrite the tip with ids built on the older one.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Collection

from agentlightning_cli.proxy.continuation.normalise import Message, Request, canonical_message, shared_prefix
from agentlightning_cli.proxy.continuation.segments import Span, continue_prompt, split_turns

FORK_REASONS = {
    "retry": "the same request as an earlier call of the chain, sent again",
    "dropped_reply": "diverges exactly where the chain has a reply: an earlier request's turns + other turns than"
                     " the reply it got (a rejected reply dropped or replaced)",
    "edited": "diverges at another turn of the chain's history (a user or tool turn edited, dropped or inserted;"
              " a compaction)",
    "rewind": "a cut-back prefix of the chain's history that ends after a reply (no turn differs)",
    "parallel": "continues the chain's tip while another call continuing it is still in flight (a harness sending"
                " two requests at once): it cannot extend a tip that the other call is about to move, so it"
                " becomes its own chain on the same continued ids, with the parent's sampled tokens masked",
}
FALLBACK_REASONS = ("unclosed", "skew", "prefill")


@dataclass
class Node:
    """One call of a chain: its request turns, the prompt length it was sent with, the reply as returned."""

    messages: tuple[Message, ...]
    prompt_len: int
    reply: Message
    sampled_len: int
    closed: bool  # the sampled ids end with an end-of-turn id (finish "stop" on the eos/eot token)
    finish_reason: str | None
    closing_len: int = 0  # ids a later continuation added after an unclosed reply (closing_ids) in the chain's ids


@dataclass
class Chain:
    id: str
    key: str
    ids: list[int]  # the latest call's prompt ids + its sampled ids
    spans: list[Span]  # this chain's sampled tokens inside `ids` (its row trains them)
    masked: list[Span]  # a parent's sampled tokens inside `ids` (trained in the parent's row: masked here)
    nodes: list[Node]
    parent: str | None = None

    def history(self) -> tuple[Message, ...]:
        tip = self.nodes[-1]
        return (*tip.messages, tip.reply)


@dataclass
class Decision:
    """What to send for one request and why. Spans are (start, end) token indexes into prompt_ids."""

    kind: str  # continue | fork | start | fallback
    reason: str | None  # fork: FORK_REASONS; fallback: FALLBACK_REASONS; None otherwise
    chain: str | None  # the chain this call extends (continue) — a new one is made for the others by record()
    parent: str | None  # the chain a fork or fallback shares turns with
    prompt_ids: list[int]
    sampled_spans: list[Span]  # this chain's own sampled tokens in the prompt: trained in its row
    masked_spans: list[Span]  # the parent's sampled tokens in the prompt: not trained again
    normalisations: dict[str, int]
    shared_messages: int  # turns after the system text shared with the parent/chain
    mismatch: dict | None  # the first turn that differs from the parent ({index, fields}); None when none
    differs: list[dict]  # segments where prompt_ids differ from the plain render ({segment, prompt, plain})
    first_difference: int | None  # first token where prompt_ids differ from the plain render
    closed_reply: list[int] = field(default_factory=list)  # ids added after an unclosed reply (closing_ids)
    # An `unclosed` fallback that a render of the request's first N chat messages (the history up to the cut
    # reply, system messages included, no generation prompt) may resolve: classify again with it as history_ids.
    history_messages: int | None = None
    request: Request = field(repr=False, default=None)  # type: ignore[assignment]
    claimed: bool = field(repr=False, default=False)  # this decision holds its chain's in-flight mark (begin)

    def as_json(self) -> dict:
        """What the proxy records with the call (ids are recorded as the prompt already)."""
        return {k: getattr(self, k) for k in ("kind", "reason", "chain", "parent", "sampled_spans", "masked_spans",
                                              "normalisations", "shared_messages", "mismatch", "differs",
                                              "first_difference", "closed_reply")}


class Chains:
    """One episode's chains. `eot`: the model's end-of-turn ids (inspect/tokens.end_of_turn_ids)."""

    def __init__(self, eot: Collection[int]) -> None:
        self.eot = frozenset(eot)
        self.chains: list[Chain] = []
        self._ids = itertools.count(1)
        self.in_flight: set[str] = set()  # chains with a continuation classified, not yet recorded or released

    def begin(self, decision: Decision) -> None:
        """Mark a `continue` decision's chain in flight until record or release: a request continuing the same
        tip meanwhile forks as `parallel`. Call it right after classify, before any await."""
        if decision.kind == "continue" and decision.chain is not None:
            self.in_flight.add(decision.chain)
            decision.claimed = True

    def release(self, decision: Decision) -> None:
        """The call ended without a record (upstream error, client gone, exception): its chain is free again.
        Idempotent; record releases too."""
        if decision.claimed:
            self.in_flight.discard(decision.chain)  # type: ignore[arg-type]
            decision.claimed = False

    def classify(self, request: Request, plain_ids: list[int], history_ids: list[int] | None = None) -> Decision:
        """How `request` (normalise.canonical_request) relates to the chains, and the prompt ids to send;
        `plain_ids`: the plain render of the whole request (vLLM /v1/chat/completions/render)."""
        fired = Counter(request.fired)
        best: tuple[int, Counter, dict | None, Chain] | None = None
        for chain in reversed(self.chains):  # newest first: it wins ties (the live branch of a conversation)
            if chain.key != request.key:
                continue
            shared, equal_by, mismatch = shared_prefix(request.messages, chain.history())
            if shared > 0 and (best is None or shared > best[0]):
                best = (shared, equal_by, mismatch, chain)
        if best is None:
            return self._plain(request, plain_ids, "start", None, None, fired)
        shared, equal_by, mismatch, chain = best
        fired.update(equal_by)
        history = chain.history()
        if request.prefill:
            return self._plain(request, plain_ids, "fallback", "prefill", chain, fired, shared, mismatch)
        node, is_reply = _last_node(chain, shared)
        if is_reply and node == len(chain.nodes) - 1 and shared == len(history) < len(request.messages):
            kind, reason = ("fork", "parallel") if chain.id in self.in_flight else ("continue", None)
        elif node is None:  # shares turns but no whole call: no sampled token is shared, the render is exact
            return self._plain(request, plain_ids, "fork", "edited", chain, fired, shared, mismatch)
        else:
            kind, reason = "fork", _fork_reason(chain, node, is_reply, shared, len(request.messages), mismatch)
        base, spans = self._base(chain, node, is_reply)
        closing: list[int] = []
        if is_reply and not chain.nodes[node].closed and not chain.nodes[node].closing_len:
            closing = closing_ids(base, history_ids, self.eot) if history_ids is not None else None
            if not closing:
                fallback = self._plain(request, plain_ids, "fallback", "unclosed", chain, fired, shared, mismatch)
                if history_ids is None:
                    fallback.history_messages = len(request.system) + shared
                return fallback
            base = [*base, *closing]
        done = continue_prompt(base, spans, plain_ids, self.eot, history_ids)
        if isinstance(done, str):
            return self._plain(request, plain_ids, "fallback", done, chain, fired, shared, mismatch)
        own = [s for s in chain.spans if s[1] <= len(base)] if kind == "continue" else []
        masked = [s for s in chain.masked if s[1] <= len(base)] if kind == "continue" else spans
        return Decision(kind=kind, reason=reason, chain=chain.id if kind == "continue" else None,
                        parent=chain.id if kind != "continue" else chain.parent, prompt_ids=done.prompt_ids,
                        sampled_spans=own, masked_spans=masked, normalisations=_counts(fired),
                        shared_messages=shared, mismatch=mismatch, differs=done.differs,
                        first_difference=done.first_difference, closed_reply=closing, request=request)

    def record(self, decision: Decision, reply: dict, sampled_ids: list[int], finish_reason: str | None) -> Chain:
        """Add the call once its reply is in: `reply` is the assistant message as returned to the client, in the
        canonical chat form (the ids the client saw, minted ones included); `sampled_ids` as vLLM sampled them."""
        self.release(decision)
        closed = bool(sampled_ids) and sampled_ids[-1] in self.eot and finish_reason in (None, "stop", "tool_calls")
        node = Node(messages=decision.request.messages, prompt_len=len(decision.prompt_ids),
                    reply=canonical_message({**reply, "role": "assistant"}, Counter()),
                    sampled_len=len(sampled_ids), closed=closed, finish_reason=finish_reason)
        span = (len(decision.prompt_ids), len(decision.prompt_ids) + len(sampled_ids))
        ids = [*decision.prompt_ids, *sampled_ids]
        if decision.kind == "continue":
            chain = next(c for c in self.chains if c.id == decision.chain)
            if decision.closed_reply:
                chain.nodes[-1].closing_len = len(decision.closed_reply)
            chain.ids, chain.spans = ids, [*decision.sampled_spans, span]
            chain.masked = list(decision.masked_spans)
            chain.nodes.append(node)
            self.chains.remove(chain)
            self.chains.append(chain)  # most recently used last: classify prefers it on ties
            return chain
        chain = Chain(id=f"c{next(self._ids)}", key=decision.request.key, ids=ids, spans=[span],
                      masked=list(decision.masked_spans), nodes=[node], parent=decision.parent)
        self.chains.append(chain)
        return chain

    def _base(self, chain: Chain, node: int, is_reply: bool) -> tuple[list[int], list[Span]]:
        """The chain's ids up to a node (after its reply, or the closed part of its prompt) and every sampled
        span inside them (own and inherited)."""
        n = chain.nodes[node]
        if is_reply:  # after the reply, and the closing ids a continuation added after it where one did
            end = n.prompt_len + n.sampled_len + n.closing_len
        else:  # the prompt without its generation prompt: up to its last closed turn
            closed = [e for s, e in split_turns(chain.ids[:n.prompt_len], self.eot)
                      if chain.ids[e - 1] in self.eot]
            end = closed[-1] if closed else 0
        spans = sorted(s for s in [*chain.spans, *chain.masked] if s[1] <= end)
        return chain.ids[:end], spans

    def _plain(self, request: Request, plain_ids: list[int], kind: str, reason: str | None, chain: Chain | None,
               fired: Counter, shared: int = 0, mismatch: dict | None = None) -> Decision:
        return Decision(kind=kind, reason=reason, chain=None, parent=chain.id if chain else None,
                        prompt_ids=list(plain_ids), sampled_spans=[], masked_spans=[], normalisations=_counts(fired),
                        shared_messages=shared, mismatch=mismatch, differs=[], first_difference=None, request=request)


def closing_ids(base: list[int], history: list[int], eot: Collection[int]) -> list[int] | None:
    """The id that closes an unclosed reply's turn. `base` ends with the reply's sampled ids (no end-of-turn id)
    after k closed segments; `history` is the render of the conversation up to and including that reply with no
    generation prompt, so its closed segment k+1 is the reply's turn as the template closes it, and its last id is
    the end-of-turn id (a model may have several; the render says which). What the template puts after that id
    belongs to the next segment: the new turns, taken from the plain render as for any continuation. None when the
    history renders another number of closed turns (a template that does not close an assistant turn with an
    end-of-turn id): nothing to close the reply with."""
    if not base or base[-1] in eot:
        return None
    k = sum(1 for _, e in split_turns(base, eot) if base[e - 1] in eot)
    closed = [e for _, e in split_turns(history, eot) if history[e - 1] in eot]
    return [history[closed[k] - 1]] if len(closed) == k + 1 else None


def _last_node(chain: Chain, shared: int) -> tuple[int | None, bool]:
    """The chain's last node covered by the `shared` leading turns: (call index, True when after its reply)."""
    for i in range(len(chain.nodes) - 1, -1, -1):
        n = len(chain.nodes[i].messages)
        if n + 1 <= shared:
            return i, True
        if n <= shared:
            return i, False
    return None, False


def _fork_reason(chain: Chain, node: int, is_reply: bool, shared: int, request_len: int,
                 mismatch: dict | None) -> str:
    """Why a request that shares turns with `chain` does not continue its tip (FORK_REASONS)."""
    if not is_reply and request_len == len(chain.nodes[node].messages) == shared:
        return "retry"
    if mismatch is None:
        return "rewind"  # a prefix of the history: cut back to an earlier point
    if any(len(n.messages) == shared for n in chain.nodes):
        return "dropped_reply"  # it diverges exactly where the chain has a reply
    return "edited"


def _counts(fired: Counter) -> dict[str, int]:
    return {k: v for k, v in sorted(fired.items()) if v}
