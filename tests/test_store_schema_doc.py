"""The docs' store schema section (docs/reference/store-schema.md) is generated from the migrations and must be
current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentlightning_cli.store.migrations import MIGRATIONS
from agentlightning_cli.store.schema_doc import END, START, main, render_schema

DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "store-schema.md"


def test_docs_schema_section_is_up_to_date():
    text = DOC.read_text(encoding="utf-8")
    assert START in text and END in text, f"{DOC} needs the schema markers"
    section = text.split(START, 1)[1].split(END, 1)[0]
    assert section == "\n" + render_schema(), (
        "docs/reference/store-schema.md's store schema is out of date: run `python -m agentlightning_cli.store.schema_doc --write`"
    )


def test_rendered_schema_shows_every_table_migration_and_why_comment():
    doc = render_schema()
    for table in ("runs", "rounds", "episodes", "calls", "train_steps", "train_rounds", "_alight_migrations"):
        assert f"### `{table}`" in doc and f"CREATE TABLE {table} (" in doc
    for name, why, _ in MIGRATIONS:
        assert f"| `{name}` | {why} |" in doc
    # every table says why it exists
    assert doc.count("-- Why:") == doc.count("CREATE TABLE ") and "CREATE INDEX episodes_by_run" in doc
    assert "prompt_tail        BLOB,            -- little-endian uint32 token ids" in doc


def test_write_refreshes_and_check_detects_a_stale_page(tmp_path: Path):
    readme = tmp_path / "store-schema.md"
    readme.write_text(f"# x\n\n{START}\nold schema\n{END}\n\nafter\n", encoding="utf-8")
    assert main(["--doc", str(readme), "--check"]) == 1
    assert main(["--doc", str(readme), "--write"]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text == f"# x\n\n{START}\n{render_schema()}{END}\n\nafter\n"
    result = subprocess.run([sys.executable, "-m", "agentlightning_cli.store.schema_doc", "--doc", str(readme),
                             "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
