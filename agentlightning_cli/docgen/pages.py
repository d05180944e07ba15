"""The generated pages: which file each is and what renders it; write them, or name the stale ones."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from agentlightning_cli.docgen.paths import DOCS, ROOT  # noqa: F401 - ROOT is read from here by tests


def generated() -> dict[Path, Callable[[], str]]:
    """Whole pages, each rendered from its source (for pages with output excerpts: the page with them rerun). The
    store schema is a section of a hand-written page: its
    markers are kept by store/schema_doc.py, checked with the rest here."""
    from agentlightning_cli.docgen import bench_tables, cli_reference, errors_reference, excerpts, settings_reference

    return {
        DOCS / "reference" / "cli.md": cli_reference.render,
        DOCS / "reference" / "settings.md": settings_reference.render,
        DOCS / "troubleshooting.md": errors_reference.render,
        DOCS / "benchmarks-results.md": bench_tables.render,
        **excerpts.renderers(),  # hand-written pages whose marked output excerpts are rerun
    }


def stale(pages: dict[Path, Callable[[], str]] | None = None) -> list[Path]:
    """The pages whose file differs from what their source renders now (or is missing)."""
    from agentlightning_cli.store.schema_doc import DEFAULT_DOC, replace_section, render_schema

    out = [path for path, render in (pages or generated()).items()
           if not path.is_file() or path.read_text(encoding="utf-8") != render()]
    if pages is None:
        current = DEFAULT_DOC.read_text(encoding="utf-8")
        if current != replace_section(current, render_schema()):
            out.append(DEFAULT_DOC)
    return out


def write(pages: dict[Path, Callable[[], str]] | None = None) -> list[Path]:
    """Regenerate every page that is stale; the paths written."""
    from agentlightning_cli.store.schema_doc import main as schema_main

    written = []
    for path, render in (pages or generated()).items():
        text = render()
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    if pages is None and schema_main(["--check"]) != 0:
        schema_main(["--write"])
        from agentlightning_cli.store.schema_doc import DEFAULT_DOC

        written.append(DEFAULT_DOC)
    return written
