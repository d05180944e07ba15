"""How an episode's calls join into training rows by exact token prefix, read from what the store recorded.

The store keeps, for every call, the earlier call whose prompt + completion its prompt starts with and how many
of those tokens match (`prompt_base_seq`, `prompt_prefix_len`). Call n continues the row of call n-1 exactly
when its prompt starts with ALL of call n-1's prompt + completion; otherwise a new row starts here and the
break says where the ids diverged. Calls that failed or carry no token ids train nothing and are listed apart.
This is the strict rule from summaries alone (cheap enough for every call list); row_breaks.py builds the rows the
trainer's way from the token ids, with where and why each break happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentlightning_cli.store import CallSummary


@dataclass
class Row:
    """Consecutive calls whose token ids extend one another; `break_reason` says why the row before it ended."""

    index: int
    calls: list[int] = field(default_factory=list)  # seqs
    tokens: int = 0  # prompt + completion of the last call: the row's length
    sampled: int = 0  # completion tokens of its calls: what the model generated in it
    break_reason: str | None = None  # None for the first row
    break_matched: int | None = None  # tokens of the previous call's prompt + completion this prompt keeps
    break_expected: int | None = None  # ... of how many
    merge: str = "strict"  # "splice" once a join in it needed the splice rule
    dropped: str | None = None  # why the trainer drops the whole row (longer than the run's row limit)
    branches: int = 0  # forks packed into it (train.forks = pack: train/row_tree.py)

    def to_json(self, detail: dict[str, Any] | None = None) -> dict[str, Any]:
        brk = None if self.break_reason is None else {
            "matched": self.break_matched, "expected": self.break_expected, "reason": self.break_reason,
            **(detail or {})}
        return {"object": "row", "index": self.index, "calls": self.calls, "tokens": self.tokens,
                "sampled": self.sampled, "merge": self.merge, "break": brk, "dropped": self.dropped,
                "branches": self.branches}


@dataclass
class Rows:
    rows: list[Row]
    skipped: dict[int, str]  # seq -> why the call trains nothing
    merge: str = "strict"  # the merge rule the rows were built by
    details: dict[int, dict[str, Any]] = field(default_factory=dict)  # row index -> its break (row_breaks.py)
    note: str | None = None  # what the view could not reproduce of the trainer's rows, if anything
    counts: dict[str, Any] | None = None
    """Conversations, forks, fallbacks, breaks per 100 calls by kind (train/conversations.py; row_breaks.py)."""

    def to_json(self) -> dict[str, Any]:
        return {"merge": self.merge, "note": self.note, "rows": [r.to_json(self.details.get(r.index)) for r in self.rows],
                "skipped": [{"call": seq, "reason": why} for seq, why in sorted(self.skipped.items())],
                "conversations": self.counts}

    def row_of(self, seq: int) -> Row | None:
        return next((r for r in self.rows if seq in r.calls), None)


def merge_rows(calls: list[CallSummary]) -> Rows:
    rows: list[Row] = []
    skipped: dict[int, str] = {}
    previous: CallSummary | None = None
    for call in calls:
        if call.status != "ok":
            skipped[call.seq] = f"status {call.status}"
            continue
        if call.prompt_len is None or call.completion_len is None:
            skipped[call.seq] = "no token ids recorded"
            continue
        if previous is None or not _continues(call, previous):
            row = Row(index=len(rows))
            if previous is not None:
                _explain(row, call, previous)
            rows.append(row)
        row = rows[-1]
        row.calls.append(call.seq)
        row.tokens = call.prompt_len + call.completion_len
        row.sampled += call.completion_len
        previous = call
    return Rows(rows, skipped)


def _expected(previous: CallSummary) -> int:
    return (previous.prompt_len or 0) + (previous.completion_len or 0)


def _continues(call: CallSummary, previous: CallSummary) -> bool:
    return call.prompt_base_seq == previous.seq and call.prompt_prefix_len == _expected(previous)


def _explain(row: Row, call: CallSummary, previous: CallSummary) -> None:
    row.break_expected = _expected(previous)
    if call.prompt_base_seq == previous.seq:
        row.break_matched = call.prompt_prefix_len
        row.break_reason = (f"call {call.seq}'s prompt diverges from call {previous.seq}'s prompt + completion at"
                            f" token {call.prompt_prefix_len} of {row.break_expected}")
    elif call.prompt_base_seq is None:
        row.break_reason = f"call {call.seq}'s prompt shares no prefix with any earlier call"
    else:
        # The store found a longer common prefix with an older call: the history was rewound or a turn
        # dropped (e.g. a harness that removes a reply without a tool call from its history).
        row.break_reason = (f"call {call.seq}'s prompt continues call {call.prompt_base_seq}'s ids"
                            f" ({call.prompt_prefix_len} tokens), not call {previous.seq}'s")
