"""Render the store schema as Markdown from the migrations themselves, and keep docs/reference/store-schema.md in
step (the section between its markers; `python -m agentlightning_cli.docgen --write` refreshes it with the other
generated pages).

    python -m agentlightning_cli.store.schema_doc            # print the Markdown
    python -m agentlightning_cli.store.schema_doc --write    # refresh the docs page between the markers
    python -m agentlightning_cli.store.schema_doc --check    # exit 1 if the docs page is out of date
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from agentlightning_cli.store.migrations import MIGRATIONS, apply_migrations

START, END = "<!-- schema:start -->", "<!-- schema:end -->"
# The page moved from README.md to the docs site with issue 38.
DEFAULT_DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "store-schema.md"


def render_schema() -> str:
    """Apply every migration to an in-memory database and render what SQLite holds, comments included."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        apply_migrations(conn)
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
            " ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    lines = [
        "<!-- generated from agentlightning_cli/store/migrations.py by"
        " `python -m agentlightning_cli.store.schema_doc --write`; do not edit by hand -->",
        "",
        "Migrations, applied in order when a store is opened (each recorded in `_alight_migrations`):",
        "",
        "| migration | what it adds |",
        "|---|---|",
        *(f"| `{name}` | {why} |" for name, why, _ in MIGRATIONS),
    ]
    for kind, name, table, sql in objects:
        if kind != "table":
            continue
        lines += ["", f"### `{name}`", "", "```sql", sql.strip() + ";"]
        lines += [idx.strip() + ";" for k, _, t, idx in objects if k == "index" and t == name]
        lines.append("```")
    return "\n".join(lines) + "\n"


def replace_section(page: str, section: str) -> str:
    if START not in page or END not in page:
        raise ValueError(f"the page has no {START} ... {END} markers")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{section}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the store schema from its migrations.")
    # --readme: the flag's name from when the schema lived in README.md, kept for scripts that pass it.
    parser.add_argument("--doc", "--readme", dest="doc", type=Path, default=DEFAULT_DOC)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="refresh the section between the markers")
    group.add_argument("--check", action="store_true", help="exit 1 if the section is out of date")
    args = parser.parse_args(argv)
    section = render_schema()
    if not (args.write or args.check):
        sys.stdout.write(section)
        return 0
    current = args.doc.read_text(encoding="utf-8")
    wanted = replace_section(current, section)
    if args.check:
        if current != wanted:
            print(f"{args.doc}: store schema is out of date; run"
                  " `python -m agentlightning_cli.store.schema_doc --write`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        args.doc.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
