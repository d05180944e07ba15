"""Conversations, forks, fallbacks and row breaks of every kind in an episode's calls (issue 34): what `alight
train` and `alight inspect` count, per episode and per run.

Under exact continuation every call records the proxy's decision (store m009, `calls.continuation`): a `start`
opens a conversation (a sub-agent is one), a `fork` and a `fallback` carry the proxy's reason. Render traffic
(`continuation` NULL) has no decisions: its conversations are counted by the rows the trainer builds from it, and
its breaks are the trainer's labels (template / retokenised / edited / other), as before. Breaks are the trainer's
row splits (train/rows.py) by kind: those labels, plus `fork/<reason>` and `fallback/<reason>` for exactly
continued calls; per 100 calls counts every call that answered (status ok).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


def exact_decision(call: Any) -> dict[str, Any] | None:
    """The proxy's continuation decision for an exactly continued call (store m009); None for render traffic."""
    cont = getattr(call, "continuation", None)
    return cont if isinstance(cont, dict) and cont.get("mode") == "exact" and cont.get("kind") else None


@dataclass
class ConversationCounts:
    calls: int = 0  # calls that answered (status ok): the per-100 denominator
    exact_calls: int = 0  # ... of them continued exactly (a decision recorded)
    render_calls: int = 0  # ... rendered from the messages (render mode, or relayed: n > 1, prompt logprobs)
    conversations: int = 0  # exact `start`s + the rows whose first call is render traffic
    forks: Counter = field(default_factory=Counter)  # reason -> count (proxy/continuation/chains.FORK_REASONS)
    fallbacks: Counter = field(default_factory=Counter)  # reason -> count (unclosed, skew, prefill)
    breaks: Counter = field(default_factory=Counter)  # the trainer's row splits by kind (module docstring)

    @property
    def mode(self) -> str:
        """exact, render, mixed, or none (no call answered)."""
        if not self.calls:
            return "none"
        return "exact" if not self.render_calls else "render" if not self.exact_calls else "mixed"

    def add(self, other: ConversationCounts) -> None:
        self.calls += other.calls
        self.exact_calls += other.exact_calls
        self.render_calls += other.render_calls
        self.conversations += other.conversations
        self.forks.update(other.forks)
        self.fallbacks.update(other.fallbacks)
        self.breaks.update(other.breaks)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConversationCounts:
        """Back from to_dict (a stored train round's detail)."""
        return cls(calls=data.get("calls", 0), exact_calls=data.get("exact_calls", 0),
                   render_calls=data.get("render_calls", 0), conversations=data.get("conversations", 0),
                   forks=Counter(data.get("forks") or {}), fallbacks=Counter(data.get("fallbacks") or {}),
                   breaks=Counter(data.get("breaks") or {}))

    def per_100(self) -> dict[str, float]:
        return {k: round(100.0 * v / self.calls, 2) for k, v in sorted(self.breaks.items()) if v} if self.calls else {}

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "calls": self.calls, "exact_calls": self.exact_calls,
                "render_calls": self.render_calls, "conversations": self.conversations,
                "forks": dict(sorted(self.forks.items())), "fallbacks": dict(sorted(self.fallbacks.items())),
                "breaks": dict(sorted(self.breaks.items())), "breaks_per_100_calls": self.per_100(),
                "breaks_per_100_calls_total": round(100.0 * sum(self.breaks.values()) / self.calls, 2)
                if self.calls else None}

    def line(self) -> str:
        """One line for text output: `exact: 3 conversations in 9 calls; forks edited 1; ...`."""
        per = self.per_100()
        breaks = ", ".join(f"{k} {v:g}" for k, v in per.items()) or "none"
        parts = [f"{self.mode}: {self.conversations} conversations in {self.calls} calls"]
        if self.exact_calls:
            parts.append("forks " + (_counts(self.forks) or "none"))
            parts.append("fallbacks " + (_counts(self.fallbacks) or "none"))
        parts.append(f"breaks per 100 calls {breaks}")
        return "; ".join(parts)


def count_calls(calls: Sequence[Any], rows: Iterable[Any], breaks: Counter) -> ConversationCounts:
    """One episode's counts: `calls` as stored (seq order), `rows` the trainer built from them (every row, the
    over-long ones included: train/rows.RowReport.built), `breaks` its row splits by kind."""
    out = ConversationCounts(breaks=Counter(breaks))
    render_ids = set()
    for call in calls:
        if call.status != "ok":
            continue
        out.calls += 1
        decision = exact_decision(call)
        if decision is None:
            out.render_calls += 1
            render_ids.add(call.id)
            continue
        out.exact_calls += 1
        kind = decision["kind"]
        if kind == "start":
            out.conversations += 1
        elif kind == "fork":
            out.forks[decision.get("reason")] += 1
        elif kind == "fallback":
            out.fallbacks[decision.get("reason")] += 1
    out.conversations += sum(1 for row in rows if row.call_ids and row.call_ids[0] in render_ids)
    return out


def _counts(counter: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()) if v)
