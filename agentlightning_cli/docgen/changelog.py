"""The changelog page: CHANGELOG.md as it is, its links into the README pointed at the docs page that now holds
each section (the README's sections moved to the site, issue 38). mkdocs_hooks.py puts it in at build time, so
docs/changelog.md is only the page's place in the nav; a link to a README anchor no page holds fails the build."""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
# The old README's anchors, and where each section lives now.
README_ANCHORS = {
    "": "index.md", "status": "index.md", "quickstart": "getting-started.md", "on-gpus": "gpus.md",
    "commands": "commands.md", "harnesses": "harnesses/index.md", "running-a-task-set": "running.md",
    "past-one-machine": "past-one-machine.md", "sandbox": "sandboxes.md", "proxy-overhead": "benchmarks.md",
    "request-limits": "proxy.md", "configuration": "configuration.md", "task-sets": "task-formats.md",
    "training": "training.md", "exact-continuation-being-built": "training.md",
    "evaluating-an-adapter": "evaluation.md", "evaluating-while-training": "evaluation.md",
    "tracking-a-run": "evaluation.md", "inspecting-runs": "inspecting.md",
    "store-schema": "reference/store-schema.md", "modules": "development.md", "development": "development.md",
}


def _relink(match: re.Match[str]) -> str:
    anchor = match.group(1) or ""
    page = README_ANCHORS.get(anchor)
    if page is None:
        raise ValueError(f"CHANGELOG.md links to README.md#{anchor}, which no docs page holds: add it to"
                         " README_ANCHORS in agentlightning_cli/docgen/changelog.py")
    return f"]({page})"


def render_body(path: Path = CHANGELOG) -> str:
    text = path.read_text(encoding="utf-8")
    return re.sub(r"\]\(README\.md(?:#([a-z0-9-]*))?\)", _relink, text)
