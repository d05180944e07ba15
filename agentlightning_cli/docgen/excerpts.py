"""Output excerpts in the docs that a script can regenerate: the blocks marked

    <!-- excerpt: tasks check examples/easy/train.jsonl -->
    ```text
    $ alight tasks check examples/easy/train.jsonl
    ...what it printed...
    ```

are rerun (`alight` + the marker's arguments, from the repository root, in a clean environment: no ALIGHT_*
variables, HOME an empty folder, no settings files) and rewritten with what the command prints now, stdout then
stderr, machine paths replaced by `/path/to/alight` and `~`. `keep=N` after the arguments keeps the first N lines
and marks the cut with `...`. Only commands whose output depends on nothing but the repository are marked (not
ids, timings or install state): a stale excerpt fails the generated-pages test like any generated page.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from agentlightning_cli.docgen.paths import DOCS, ROOT

BLOCK = re.compile(r"(?P<marker><!-- excerpt: (?P<args>[^\n]*?) -->\n)```text\n.*?```\n", re.S)
KEEP = re.compile(r"\s+keep=(\d+)$")


def run_alight(args: list[str], home: Path) -> str:
    """What `alight ARGS` prints from the repository root with nothing of this machine's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIGHT_")}
    env.update(HOME=str(home), COLUMNS="120", NO_COLOR="1", TERM="dumb", XDG_CONFIG_HOME=str(home / ".config"))
    out = subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=120)
    text = out.stdout + out.stderr
    return text.replace(str(ROOT), "/path/to/alight").replace(str(home), "~")


def render_block(spec: str, home: Path) -> str:
    keep = KEEP.search(spec)
    args = shlex.split(spec[: keep.start()] if keep else spec)
    lines = run_alight(args, home).rstrip("\n").splitlines()
    if keep and len(lines) > int(keep.group(1)):
        lines = [*lines[: int(keep.group(1))], "..."]
    return "```text\n" + "\n".join([f"$ alight {shlex.join(args)}", *lines]) + "\n```\n"


def render_page(text: str) -> str:
    """The page with every marked excerpt rerun."""
    with tempfile.TemporaryDirectory(prefix="alight-excerpt-home-") as home:
        return BLOCK.sub(lambda m: m.group("marker") + render_block(m.group("args"), Path(home)), text)


def pages() -> list[Path]:
    """The docs pages that hold at least one marked excerpt."""
    return sorted(p for p in DOCS.rglob("*.md") if BLOCK.search(p.read_text(encoding="utf-8")))


def renderers() -> dict[Path, object]:
    """{page: a function rendering it now}, for docgen.pages.generated()."""
    return {page: (lambda page=page: render_page(page.read_text(encoding="utf-8"))) for page in pages()}
