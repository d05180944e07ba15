"""docs/benchmarks-results.md from bench/results/*.json: each file's numbers as tables, as far as their shapes allow.

The files have no common schema (each bench/*.py writes its own), so the shapes a table can show are read
generically: top-level scalars; a list of objects (one row each, nested objects as dotted columns, a list of
objects inside a row as its own table under `key[row].field`); an object of scalars; an object of objects (one row
per key); any other object is opened a level further (`rows.chat`), to three levels. What is still left is named
under "not shown" with its shape, never dropped silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
HEADER = ("<!-- generated from bench/results/*.json by `python -m agentlightning_cli.docgen --write`;"
          " do not edit by hand -->\n")
MAX_ROWS = 40  # a longer list (per-sample timings) is named as skipped, with its length
MAX_DEPTH = 3  # `a.b.c`: deeper than that, a table would need the reader to know the file's own layout
MAX_COLUMNS = 12  # a wider table of few rows is shown on its side: a row per field


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


def _flatten(value: dict, prefix: str = "") -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """One row from a nested object: nested objects become dotted columns (`importance.mean`); lists of scalars stay
    cells; what a cell cannot hold (a list of objects, a long list) is returned apart as (dotted key, value)."""
    flat: dict[str, Any] = {}
    apart: list[tuple[str, Any]] = []
    for key, inner in value.items():
        name = f"{prefix}{key}"
        if _scalar(inner) or (isinstance(inner, list) and len(inner) <= 8 and all(_scalar(x) for x in inner)):
            flat[name] = inner
        elif isinstance(inner, dict) and inner:
            sub_flat, sub_apart = _flatten(inner, f"{name}.")
            flat.update(sub_flat)
            apart += sub_apart
        elif isinstance(inner, dict):
            flat[name] = "(none)"
        else:
            apart.append((name, inner))
    return flat, apart


def _rows_table(key: str, labels: list[str], items: list[dict], depth: int, out: list[str],
                skipped: list[str]) -> None:
    """Objects as one table, one row each (labelled by `labels` where given); a table wider than MAX_COLUMNS is
    turned on its side (a row per field, a column per object); what no cell holds follows under `key[label]`."""
    flats, aparts = zip(*(_flatten(item) for item in items))
    columns = list(dict.fromkeys(c for row in flats for c in row))
    names = labels or [str(i) for i in range(len(items))]
    if len(columns) > MAX_COLUMNS and len(items) <= MAX_COLUMNS:
        out += [f"`{key}`:", "", *_table(["field", *names], [[c, *(row.get(c) for row in flats)] for c in columns])]
    else:
        head = ["", *columns] if labels else columns
        out += [f"`{key}`:", "", *_table(head, [([name] if labels else []) + [row.get(c) for c in columns]
                                                for name, row in zip(names, flats)])]
    for name, apart in zip(names, aparts):
        for sub, inner in apart:
            _render_value(f"{key}[{name}].{sub}", inner, depth + 1, out, skipped)


def _render_value(key: str, value: Any, depth: int, out: list[str], skipped: list[str]) -> None:
    """One non-scalar value as a table where its shape allows: a list or object of objects one row each (nested
    objects as dotted columns), an object of scalars as fields; an object of mixed values is opened one level
    further (`rows.chat`), down to MAX_DEPTH; what is left is named in `skipped`."""
    if isinstance(value, (list, dict)) and not value:
        out += [f"`{key}`: (none)", ""]
    elif isinstance(value, list) and all(_scalar(v) for v in value) and len(value) <= MAX_ROWS:
        out += [f"`{key}`: {_fmt(value)}", ""]
    elif isinstance(value, list) and all(isinstance(v, dict) for v in value) and len(value) <= MAX_ROWS \
            and depth <= MAX_DEPTH:
        _rows_table(key, [], value, depth, out, skipped)
    elif isinstance(value, dict) and all(_scalar(v) or (isinstance(v, list) and all(_scalar(x) for x in v)
                                         and len(v) <= MAX_ROWS) for v in value.values()):
        out += [f"`{key}`:", "", *_table(["field", "value"], [[k, v] for k, v in value.items()])]
    elif isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()) and depth <= MAX_DEPTH:
        _rows_table(key, list(value), list(value.values()), depth, out, skipped)
    elif isinstance(value, dict) and depth < MAX_DEPTH:
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
