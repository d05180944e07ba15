"""Judge how a harness episode ended from what the harness itself reported (its JSON output or trajectory).

Exit codes lie (OpenHands exits 0 after an LLM error, Claude Code exits 0 on SIGINT), so each recipe says
which records mean an error, which mean the turn limit was reached, and which one proves success.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentlightning_cli.harness.recipe import Lenient, OutcomeRules, Recipe

Status = Literal["finished", "harness_error", "timeout", "budget_exceeded", "no_calls", "resource_limit"]


@dataclass
class EpisodeOutcome:
    """How one harness episode ended (the recipe's rules for judging it are recipe.OutcomeRules)."""

    status: Status
    reason: str | None = None
    exit_code: int | None = None
    calls: int | None = 0
    """None: the count could not be read (detail["calls_not_read"] says why)."""
    turn_limit_reached: bool = False
    wall_s: float = 0.0
    first_call_s: float | None = None
    """Seconds from launch to the first recorded LLM call (None when there was none)."""
    stdout_path: str | None = None
    stderr_path: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "finished"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def lookup(record: Any, dotted: str) -> Any:
    node = record
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


_MISSING = object()


def matches(record: Any, rule: dict[str, Any]) -> bool:
    return all(lookup(record, path) == value for path, value in rule.items())


def starts_with(record: Any, prefixes: dict[str, str]) -> bool:
    """Every path holds a string starting with its prefix (an ErrorRule's `prefix`)."""
    return all(isinstance(v := lookup(record, path), str) and v.startswith(text) for path, text in prefixes.items())


def read_records(rules: OutcomeRules, text: str | None) -> list[Any]:
    """Parse the harness's report: one JSON document, or every line of it that is a JSON object."""
    if not text:
        return []
    if rules.format == "json":
        try:
            return [json.loads(text)]
        except ValueError:
            pass  # stdout with log lines around the result: take the last line that parses
    records = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records[-1:] if rules.format == "json" else records


def load_report(recipe: Recipe, context: dict[str, Any], stdout_path: Path) -> list[Any]:
    source = recipe.outcome.source
    path = stdout_path if source == "stdout" else Path(recipe.render(source, context))
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return read_records(recipe.outcome, text)


def judge(recipe: Recipe, context: dict[str, Any], records: list[Any]) -> tuple[str | None, bool]:
    """(error reason or None, turn limit reached) from the parsed records."""
    rules = recipe.outcome
    render_ctx = {**context, "records": Lenient(records)}
    turn_limit = rules.turn_limit is not None and any(matches(r, rules.turn_limit) for r in records)
    if turn_limit:
        return None, True
    for rule in rules.errors:
        for record in records:
            if matches(record, rule.match) and starts_with(record, rule.prefix):
                return recipe.render(rule.reason, {**render_ctx, "record": Lenient(record)}).strip() or "harness error", False
    if rules.require is not None and not records:
        where = "stdout" if rules.source == "stdout" else recipe.render(rules.source, context)
        return f"the harness wrote no report to {where}", False
    wanted = [rules.require] if isinstance(rules.require, dict) else rules.require
    if wanted is not None and not any(matches(r, rule) for r in records for rule in wanted):
        return recipe.render(rules.require_reason, {**render_ctx, "record": Lenient(records[-1] if records else None)}).strip(), False
    return None, False
