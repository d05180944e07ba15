"""The episode filter typed into the browser: `status:failed outcome:timeout task:t1 round:2 reward>0.5 words`.

Terms are ANDed. `key:value` matches a field exactly (status, outcome, task, harness, round); `reward` takes
`>`, `>=`, `<`, `<=`, `=` and a number (`reward:none` for unscored episodes); any other word must appear in the
episode's id, task, harness, status, outcome or error (case-insensitive).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

from agentlightning_cli.store import EpisodeSummary

_FIELDS: dict[str, Callable[[EpisodeSummary], object]] = {
    "status": lambda s: s.episode.status, "outcome": lambda s: s.episode.outcome,
    "task": lambda s: s.episode.task_id, "harness": lambda s: s.episode.harness,
    "round": lambda s: None if s.round_index is None else str(s.round_index),
}
_COMPARE = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "=": operator.eq}
_REWARD = re.compile(r"^reward(>=|<=|>|<|=|:)(.+)$")

Predicate = Callable[[EpisodeSummary], bool]


def _term(term: str) -> Predicate:
    reward = _REWARD.match(term)
    if reward:
        op, value = reward.groups()
        if value.lower() == "none":
            return lambda s: s.episode.reward is None
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"reward needs a number: {term!r}") from None
        compare = _COMPARE["=" if op == ":" else op]
        return lambda s: s.episode.reward is not None and compare(s.episode.reward, number)
    key, sep, value = term.partition(":")
    if sep and key in _FIELDS:
        get = _FIELDS[key]
        if value.lower() == "none":
            return lambda s: get(s) is None
        return lambda s: get(s) == value
    needle = term.lower()

    def contains(s: EpisodeSummary) -> bool:
        e = s.episode
        return any(needle in (v or "").lower() for v in (e.id, e.task_id, e.harness, e.status, e.outcome, e.error))

    return contains


def parse_filter(query: str) -> Predicate:
    """A predicate for the query; ValueError naming the bad term."""
    terms = [_term(t) for t in query.split()]
    return lambda s: all(t(s) for t in terms)
