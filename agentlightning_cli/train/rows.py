"""Training rows from an episode's stored calls: exact token ids only, consecutive calls merged into one row.

Why merge: an agent's call n+1 usually resends call n's prompt + reply + a tool result. One row holding the
whole chain forwards the shared prefix once instead of once per call. The reply tokens are trained (mask 1,
with the logprob vLLM reported when it sampled them); the glue between replies (tool output, template
tokens) is context (mask 0). Nothing here tokenises text: ids come from the store as vLLM used them.

Two merge rules (`train.merge`):
- strict: call n+1 merges when its prompt ids start with call n's prompt + completion ids. The row is exactly
  what the model saw at every call.
- splice: call n+1 merges when its prompt ids start with call n's PROMPT ids; call n's sampled ids stay as the
  assistant span and the gap is call n+1's prompt after that turn's end-of-turn token. More merges, but the
  row is a context the model did not literally see at call n+1 (e.g. re-serialised tool-call JSON).
When neither applies a new row starts and the break is classified (classify_break) so its cause is visible.

Calls the proxy continued exactly (`continuation` recorded, issue 34) are grouped by conversation first: a
`continue` joins the row of its chain's last call (its prompt is that call's prompt + sampled ids by construction),
wherever other conversations' calls came between (sub-agents interleave); a `start` opens a row (split "start", a
new conversation, not a break); a `fork` (break "fork/<reason>") joins its parent's row as a branch (`pack_forks`,
train.forks = pack: its tokens after the ids it shares with its parent's context are appended, and the trainer lets
each branch see only its own context: train/row_tree.py), so the shared prefix is forwarded once; with train.forks =
row, or when it shares no id, other sampling or the row limit, it opens a row whose prompt holds the parent's
sampled tokens as context, so none is trained twice either way; a `fallback` joins its parent's row when its plain
render still continues it, else opens a row (break "fallback/<reason>"). A call that continues a chain whose last
token is no longer its row's last (a branch came after it) joins as a branch too. Render traffic (no continuation)
merges with the call before it, as above.

Pure: no torch, no store. `decode` (ids -> text, special tokens kept) comes from the caller's tokenizer.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlightning_cli.train import row_tree
from agentlightning_cli.train.conversations import ConversationCounts, count_calls, exact_decision
from agentlightning_cli.train.helper_calls import is_helper
from agentlightning_cli.train.sampling import call_constraints, effective_sampling, filters_of, is_penalised

BREAK_REASONS = ("template", "retokenised", "edited", "other")
MERGE_RULES = ("strict", "splice")
# Why a row starts instead of continuing the one before (Row.split): a broken prefix (one of BREAK_REASONS), or
# a call that joins by its ids but cannot share the row.
SPLIT_REASONS = (*BREAK_REASONS, "temperature", "sampling", "length")
# ... and for exactly continued calls: "start" (another conversation: not a break), "fork/<reason>",
# "fallback/<reason>" (the proxy's reasons: proxy/continuation/chains.py).
CONTINUATION_SPLITS = ("start", "fork", "fallback")
# The usual end-of-turn tokens (besides the model's eos) the splice rule cuts after (round_step.row_context).
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")
# Thinking blocks that chat templates drop from past assistant turns.
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)
_SPACE = re.compile(r"\s+")


@dataclass
class RowContext:
    """What row building needs to know about the model's tokenizer."""

    decode: Callable[[Sequence[int]], str] | None = None  # ids -> text with special tokens kept
    special_tokens: Sequence[str] = ()  # their text, removed before comparing rendered histories
    eot_ids: frozenset[int] = frozenset()  # end-of-turn ids (the splice rule cuts the gap after one)
    max_tokens: int | None = None  # rows longer than this are dropped (merging stops before reaching it)
    # What vLLM applied to keys a call did not send: generation_config.json under --generation-config auto or a
    # folder (sampling.generation_defaults); {} under "vllm", alight's default.
    sampling_defaults: dict[str, Any] = field(default_factory=dict)
    # The model name the harness's own calls ask for (the run's snapshot, train/helper_calls.py): a call asking for
    # another is a helper call, left out unless train_helpers. None: no call is a helper.
    harness_model: str | None = None
    train_helpers: bool = False
    # train.forks = pack: a fork joins its parent's row as a branch instead of opening a row (train/row_tree.py).
    pack_forks: bool = True


@dataclass
class Row:
    """One training sequence: the first call's prompt, then sampled spans (mask 1) and the gaps between (mask 0)."""

    episode_id: str
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # stored sampling logprobs; 0.0 under mask 0
    call_ids: list[str] = field(default_factory=list)
    merge: str = "strict"  # the rule that merged it: "splice" once any join needed the splice rule
    temperature: float = 1.0
    top_p: float = 1.0  # the filters vLLM applied after the temperature; the trainer applies the same
    top_k: int = 0
    min_p: float = 0.0
    advantage: float = 0.0  # filled in by advantages.apply
    reward: float = 0.0  # its episode's reward (for logging), filled in by advantages.apply
    weight: float = 1.0  # its loss weight (advantages.apply): splitting an episode into rows changes nothing
    split: str | None = None
    """Why this row started instead of continuing the episode's row before it (SPLIT_REASONS): the prompt broke
    the prefix (a BREAK_REASONS label), another temperature or other filters, or the row limit; for exactly
    continued calls "start" (another conversation, not a break), "fork/<reason>" or "fallback/<reason>"
    (CONTINUATION_SPLITS). None for an episode's first row."""
    branches: list[tuple[int, int]] = field(default_factory=list)
    """Packed forks: (start, attach) flat indices over prompt + completion; the token at `start` repeats the one at
    `attach` and what follows continues that token's context (train/row_tree.py). Empty: one linear context."""

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.mask)

    @property
    def sampling(self) -> tuple[float, float, int, float]:
        """(temperature, top_p, top_k, min_p): one row, one distribution to score its tokens under."""
        return self.temperature, self.top_p, self.top_k, self.min_p


@dataclass
class RowReport:
    """What happened to an episode's (or a round's) calls on the way to rows."""

    rows: list[Row] = field(default_factory=list)
    calls: int = 0  # calls that went into kept rows
    breaks: Counter = field(default_factory=Counter)  # reason -> count
    dropped: Counter = field(default_factory=Counter)  # error_calls, no_token_ids, retried_prompts, over_long_rows, ...
    break_log: list[dict[str, Any]] = field(default_factory=list)  # {episode_id, call_id, reason}
    built: list[Row] = field(default_factory=list)
    """Every row built, in order, the over-long ones `rows` leaves out included (what inspect shows)."""
    counts: ConversationCounts = field(default_factory=ConversationCounts)
    """Conversations, forks, fallbacks and breaks of every kind (train/conversations.py)."""

    def extend(self, other: RowReport) -> None:
        self.counts.add(other.counts)
        self.rows += other.rows
        self.built += other.built
        self.calls += other.calls
        self.breaks.update(other.breaks)
        self.dropped.update(other.dropped)
        self.break_log += other.break_log


def usable_calls(calls: Sequence[Any], dropped: Counter, defaults: dict[str, Any] | None = None,
                 harness_model: str | None = None) -> list[Any]:
    """The calls that can become rows, in order: error calls and calls without ids are dropped (and counted);
    of consecutive calls with the same prompt ids (a client retry) only the last is kept, since that is the
    one the harness continued from. Calls sampled at temperature 0 (greedy) are never trained (`greedy_calls`):
    their reply is the argmax, not a sample of the policy, so the policy gradient and the importance weights do not
    apply, and the trainer would divide logits by 0. Their tokens stay in the row as context when the next call
    continues them. Calls sampled with a presence, frequency or repetition penalty are not trained either
    (`penalised_calls`): vLLM's processed logprobs then depend on every earlier token's count, which the trainer
    does not reproduce. Nor calls sampled under a constraint (`constrained_calls`: tool_choice required or named,
    structured outputs, logit bias, min_tokens, ...; sampling.call_constraints): vLLM masked or forced tokens
    before the logprobs it reported, and the trainer would score them as free samples.
    `defaults`: the generation_config.json values vLLM used for unsent keys. `harness_model`: calls asking for
    another model name are the harness's helper calls (next-speaker checks, loop detection, compression, ...;
    train/helper_calls.py), dropped as `helper_calls` before any other check of a served call; None keeps them."""
    kept: list[Any] = []
    for call in calls:
        if call.status != "ok":
            dropped["error_calls"] += 1
            continue
        if is_helper(call, harness_model):
            dropped["helper_calls"] += 1
            continue
        if not call.prompt_token_ids or not call.completion_token_ids:
            dropped["no_token_ids"] += 1
            continue
        if call.completion_logprobs is None or len(call.completion_logprobs) != len(call.completion_token_ids):
            dropped["no_logprobs"] += 1
            continue
        if kept and list(kept[-1].prompt_token_ids) == list(call.prompt_token_ids):
            dropped["retried_prompts"] += 1
            kept[-1] = call
            continue
        kept.append(call)
    greedy = [c for c in kept if is_greedy(c, defaults)]
    if greedy:
        dropped["greedy_calls"] += len(greedy)
        kept = [c for c in kept if not is_greedy(c, defaults)]
    penalised = [c for c in kept if is_penalised(call_sampling(c, defaults))]
    if penalised:
        dropped["penalised_calls"] += len(penalised)
        kept = [c for c in kept if not is_penalised(call_sampling(c, defaults))]
    constrained = {id(c) for c in kept if call_constraints(c)}
    if constrained:
        dropped["constrained_calls"] += len(constrained)
        kept = [c for c in kept if id(c) not in constrained]
    return kept


def call_sampling(call: Any, defaults: dict[str, Any] | None = None) -> dict[str, float]:
    return effective_sampling(call.sampling, defaults)


def is_greedy(call: Any, defaults: dict[str, Any] | None = None) -> bool:
    return call_temperature(call, defaults) <= 0.0


def call_temperature(call: Any, defaults: dict[str, Any] | None = None) -> float:
    return call_sampling(call, defaults)["temperature"]  # vLLM samples at 1.0 when none is sent (and no default)


def sampling_key(call: Any, defaults: dict[str, Any] | None = None) -> tuple[float, float, int, float]:
    settings = call_sampling(call, defaults)
    return (settings["temperature"], *filters_of(settings))


def build_rows(episode_id: str, calls: Sequence[Any], ctx: RowContext, merge: str = "strict") -> RowReport:
    """Rows of one episode from its calls (seq order). See the module docstring for the rules."""
    if merge not in MERGE_RULES:
        raise ValueError(f"unknown merge rule {merge!r}; expected one of {', '.join(MERGE_RULES)}")
    report = RowReport()
    row: Row | None = None
    rows: list[Row] = []
    prev = None
    defaults = ctx.sampling_defaults
    # exact continuation: chain id -> (its row, its last call, the flat index its last token sits at)
    by_chain: dict[str, tuple[Row, Any, int]] = {}
    helpers_of = None if ctx.train_helpers else ctx.harness_model
    for call in usable_calls(calls, report.dropped, defaults, helpers_of):
        prompt, comp = list(call.prompt_token_ids), list(call.completion_token_ids)
        joined, split, tip, fork = None, None, None, None
        cont = exact_decision(call)
        if cont is not None:
            row, prev, tip, split = _chain_target(cont, by_chain, row, prev, ctx.pack_forks)
            if split is None and cont["kind"] == "fork":  # packing: `row` holds its parent's chain
                fork = f"fork/{cont.get('reason')}"
        if row is not None and split is None:
            if fork is not None:
                joined, tip = _branch(row, tip, prompt)
                split = fork if joined is None else None
            else:
                joined = join(prev, prompt, merge, ctx)
            if joined is None and split is None:
                split = classify_break(list(prev.prompt_token_ids) + list(prev.completion_token_ids), prompt,
                                       ctx, len(prev.prompt_token_ids))
                if cont is not None and cont["kind"] == "fallback":  # the proxy knows why it broke
                    split = f"fallback/{cont.get('reason')}"
        broke = split or fork
        if broke is not None and broke != "start" and rows:
            report.breaks[broke] += 1
            report.break_log.append({"episode_id": episode_id, "call_id": call.id, "reason": broke})
        if joined is not None:
            repeat = int(tip is not None and tip != row.length - 1)  # a branch starts with its attach token again
            if sampling_key(call, defaults) != row.sampling:
                joined = None  # one row is scored under one distribution
                split = "sampling" if call_temperature(call, defaults) == row.temperature else "temperature"
            elif ctx.max_tokens is not None and row.length + repeat + len(joined[0]) + len(comp) > ctx.max_tokens:
                joined = None  # start afresh rather than grow a row past the limit
                split = "length"
            if joined is None:
                if fork is not None:
                    split = fork  # as unpacked: the fork opens its row
                else:
                    report.dropped[f"{split}_splits"] += 1
        if joined is None:
            t, top_p, top_k, min_p = sampling_key(call, defaults)
            row = Row(episode_id=episode_id, prompt_ids=prompt, temperature=t, top_p=top_p, top_k=top_k, min_p=min_p,
                      split=split if rows else None)
            rows.append(row)
        else:
            gap, rule = joined
            if repeat:
                row.branches.append((row.length, tip))
                gap = [_token(row, tip), *gap]
            row.completion_ids += gap
            row.mask += [0] * len(gap)
            row.logprobs += [0.0] * len(gap)
            if rule == "splice":
                row.merge = "splice"
        row.completion_ids += comp
        row.mask += [1] * len(comp)
        row.logprobs += [float(x) for x in call.completion_logprobs]
        row.call_ids.append(call.id)
        prev = call
        if cont is not None and cont.get("chain"):
            by_chain[cont["chain"]] = (row, call, row.length - 1)
    report.built = rows
    report.counts = count_calls(calls, rows, report.breaks)
    for r in rows:
        if ctx.max_tokens is not None and r.length > ctx.max_tokens:
            report.dropped["over_long_rows"] += 1
            report.dropped["over_long_calls"] += len(r.call_ids)
            continue
        report.rows.append(r)
        report.calls += len(r.call_ids)
    return report


def _chain_target(cont: dict[str, Any], by_chain: dict[str, tuple[Row, Any, int]], row: Row | None, prev: Any,
                  pack_forks: bool) -> tuple[Row | None, Any, int | None, str | None]:
    """Which row an exactly continued call may join (row, its chain's last call, that call's last flat index) or
    why it opens one (split): a continue joins its chain's row, a fallback its parent's, a fork (packing) its
    parent's as a branch; a start, and a fork without packing, open their own. A chain whose calls trained nothing
    (or a record without chain ids) leaves the call to the prefix rule against the call before."""
    kind = cont["kind"]
    if kind == "start":
        return None, None, None, "start"
    if kind == "fork":
        target = by_chain.get(cont.get("parent") or "") if pack_forks else None
        if target is None:
            return None, None, None, f"fork/{cont.get('reason')}"
        return target[0], target[1], target[2], None
    target = by_chain.get(cont.get("chain") if kind == "continue" else cont.get("parent") or "")
    if target is not None:
        return target[0], target[1], target[2], None
    if kind == "fallback" and row is None:
        return None, None, None, f"fallback/{cont.get('reason')}"
    return row, prev, None, None


def _token(row: Row, index: int) -> int:
    return row.prompt_ids[index] if index < len(row.prompt_ids) else row.completion_ids[index - len(row.prompt_ids)]


def _branch(row: Row, tip: int, prompt: list[int]) -> tuple[tuple[list[int], str] | None, int | None]:
    """A fork packed into `row`: ((the ids to append after its attach token, "strict"), the attach index: the last
    token of the parent chain's context (ending at `tip`) that the fork's prompt shares), or (None, None) when
    it shares none."""
    context = row_tree.path(row.length, row.branches, tip)
    shared = 0
    for index, token in zip(context, prompt):
        if _token(row, index) != token:
            break
        shared += 1
    if not shared:
        return None, None
    return (prompt[shared:], "strict"), context[shared - 1]


def join(prev: Any, prompt: list[int], merge: str, ctx: RowContext) -> tuple[list[int], str] | None:
    """The gap to append so a row ending with call `prev` continues with `prompt`'s reply, and the rule used
    (strict or splice); None = no merge."""
    seen = list(prev.prompt_token_ids) + list(prev.completion_token_ids)
    if prompt[: len(seen)] == seen:
        return prompt[len(seen):], "strict"
    if merge != "splice":
        return None
    p = list(prev.prompt_token_ids)
    if prompt[: len(p)] != p or not ctx.eot_ids:
        return None
    if not prev.completion_token_ids or prev.completion_token_ids[-1] not in ctx.eot_ids:
        return None  # the reply did not end its turn (cut by length): no turn boundary to splice at
    for i in range(len(p), len(prompt)):
        if prompt[i] in ctx.eot_ids:
            return prompt[i + 1:], "splice"
    return None


def classify_break(seen: list[int], prompt: list[int], ctx: RowContext, prompt_len: int) -> str:
    """Why call n+1's prompt does not continue call n's prompt + completion (`seen`).

    retokenised: the same text, different ids (e.g. a reply decoded and encoded again).
    template:    the text differs only in special tokens, whitespace or thinking blocks the template drops.
    edited:      the content changed: a message dropped (a reply without a tool call removed from history),
                 compaction, an injected reminder.
    other:       the ids cannot be compared as text (no tokenizer at hand).
    """
    if ctx.decode is None:
        return "other"
    text_seen, text_next = ctx.decode(seen), ctx.decode(prompt)
    if text_next.startswith(text_seen):
        return "retokenised"
    if _normalise(text_next, ctx).startswith(_normalise(text_seen, ctx)):
        return "template"
    return "edited"


def _normalise(text: str, ctx: RowContext) -> str:
    text = _THINKING.sub("", text)
    for special in ctx.special_tokens:
        text = text.replace(special, " ")
    return _SPACE.sub("", text)
