"""docs/benchmarks-results.md from bench/results/*.json: each file's numbers as tables, as far as their shapes allow.

The files have no common schema (each bench/*.py writes its own), so the shapes a table can show are read
generically: top-level scalars; a list of flat objects (one row each); an object of scalars; an object of flat
objects (one row per key); any other object is opened a level further (`rows.chat`), to three levels. What is
still left is named under "not shown" with its shape, never dropped silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
HEADER = ("<!-- generated from bench/results/*.json by `python -m agentlightning_cli.docgen --write`;"
          " do not edit by hand -->\n")
MAX_ROWS = 40  # a longer list (per-sample timings) is named as skipped, with its length
MAX_DEPTH = 3  # `a.b.c`: deeper than that, a table would need the reader to know the file's own layout


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _flat(value: Any) -> bool:
    """A row: an object whose values are scalars or short lists of scalars."""
    return isinstance(value, dict) and all(
        _scalar(v) or (isinstance(v, list) and len(v) <= 8 and all(_scalar(x) for x in v)) for v in value.values())


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, list):
        text = ", ".join(_fmt(v) for v in value)
    elif value is None:
        text = ""
    else:
        text = str(value)
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows), ""]


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return type(value).__name__


def _render_value(key: str, value: Any, depth: int, out: list[str], skipped: list[str]) -> None:
    """One non-scalar value as a table where its shape allows; an object that is none of the table shapes is
    opened one level further (`rows.chat`), down to MAX_DEPTH; what is left is named in `skipped`."""
    if isinstance(value, list) and value and all(_flat(v) for v in value) and len(value) <= MAX_ROWS:
        columns = list(dict.fromkeys(c for row in value for c in row))
        out += [f"`{key}`:", "", *_table(columns, [[row.get(c) for c in columns] for row in value])]
    elif isinstance(value, list) and all(_scalar(v) for v in value) and len(value) <= MAX_ROWS:
        out += [f"`{key}`: {_fmt(value)}", ""]
    elif isinstance(value, dict) and value and all(_scalar(v) for v in value.values()):
        out += [f"`{key}`:", "", *_table(["field", "value"], [[k, v] for k, v in value.items()])]
    elif isinstance(value, dict) and value and all(_flat(v) for v in value.values()):
        columns = list(dict.fromkeys(c for row in value.values() for c in row))
        out += [f"`{key}`:", "", *_table(["", *columns], [[k, *(row.get(c) for c in columns)]
                                                          for k, row in value.items()])]
    elif isinstance(value, dict) and value and depth < MAX_DEPTH:
        scalars = [[k, v] for k, v in value.items() if _scalar(v)]
        if scalars:
            out += [f"`{key}`:", "", *_table(["field", "value"], scalars)]
        for sub, inner in value.items():
            if not _scalar(inner):
                _render_value(f"{key}.{sub}", inner, depth + 1, out, skipped)
    else:
        skipped.append(f"`{key}` ({_shape(value)})")


def render_file(path: Path) -> tuple[list[str], list[str]]:
    """(Markdown lines, the keys not shown with their shapes) for one results file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out: list[str] = []
    skipped: list[str] = []
    if not isinstance(data, dict):
        return out, [f"the whole file ({_shape(data)})"]
    scalars = [[k, v] for k, v in data.items() if _scalar(v)]
    if scalars:
        out += _table(["field", "value"], scalars)
    for key, value in data.items():
        if not _scalar(value):
            _render_value(key, value, 1, out, skipped)
    return out, skipped


def render(results: Path = RESULTS) -> str:
    out = [HEADER, "# Benchmark results", "",
           "The numbers each benchmark in `bench/` wrote to `bench/results/<name>.json`, as tables; the",
           "[Benchmarks](benchmarks.md) page says what each measures and how to read it. Nested parts a table",
           "cannot show are listed under *not shown*: read them in the JSON file.", ""]
    for path in sorted(results.glob("*.json")):
        lines, skipped = render_file(path)
        out += [f"## `{path.name}`", "", *lines]
        if skipped:
            out += ["*Not shown* (nested): " + ", ".join(skipped) + ".", ""]
    return "\n".join(out).rstrip() + "\n"
