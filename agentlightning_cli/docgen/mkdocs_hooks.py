"""MkDocs hooks (mkdocs.yml `hooks:`): the changelog page is CHANGELOG.md itself, read at build time with its README
links pointed at the pages that hold those sections now, so the page never needs regenerating when an entry lands."""

from __future__ import annotations

from typing import Any

from agentlightning_cli.docgen import changelog


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri == "changelog.md":
        return changelog.render_body()
    return markdown
