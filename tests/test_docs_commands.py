"""Every `alight ...` command line in the README and the docs pages, code blocks and inline code alike, parses
against the Typer app (click's own parser): an unknown command, option or setting (an ALIGHT_* variable, or a
`section.key` in code) fails (issue 38)."""

from __future__ import annotations

from pathlib import Path

from agentlightning_cli.docgen.commands_check import candidate_lines, commands_in, count_commands, problems
from agentlightning_cli.docgen.pages import DOCS, ROOT

# The changelog is history: it names options and commands as they were when each entry landed, renamed ones too.
PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if p.name != "changelog.md"),
         ROOT / "examples" / "tasks" / "README.md"]


def test_every_command_line_in_the_readme_and_the_docs_parses():
    assert count_commands(PAGES) > 200  # the scan finds the commands; it cannot pass by finding none
    assert problems(PAGES, ROOT) == []


def test_the_readme_keeps_its_two_quickstart_commands_and_stays_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    block = text.split("## Quickstart", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["bash scripts/quickstart.sh", "bash .ci/run"]


def test_the_check_names_unknown_commands_options_and_settings(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "Run `alight run --task-set t.jsonl --harness codex --attempts 2` (fine), `alight -v CMD` (a placeholder),\n"
        "`alight inspect my-run` (the browser), `alight inspect show EP --patch | git apply` (a pipe).\n"
        "```bash\n"
        "ALIGHT_PROXY__PORT=8400 alight serve --model DIR   # fine\n"
        "alight run --task-set t.jsonl \\\n"
        "  --harness codex --atempts 2\n"
        "alight trian RUN\n"
        "ALIGHT_PROXY__PROT=1 alight config show\n"
        "```\n"
        "```text\nalight 0.1.0 is output, not a command\n$ alight inpsect list\n```\n"
        "In a table: `alight run --task-set FILE --harness NAME\\|RECIPE.yaml [--attempts G] [--bogus]`\n"
        "Settings: `serve.model: smollm2`, `harness.codex.python`, `train.max_row_tokens`; modules: `serve.gpu_plan`,\n"
        "`proxy.json`; wrong: `train.max_row_token` and `harness.codex.pyth`\n",
        encoding="utf-8")
    found = problems([page], tmp_path)
    assert [f.split(":", 2)[1] for f in found] == ["6", "7", "8", "12", "14", "16", "16"], found
    assert "No such option: --atempts" in found[0] and "no such command 'trian'" in found[1]
    assert "unknown setting ALIGHT_PROXY__PROT" in found[2] and "no such command 'inpsect'" in found[3]
    assert "No such option: --bogus" in found[4]
    assert found[5].endswith("unknown setting train.max_row_token")
    assert found[6].endswith("unknown setting harness.<name>.pyth")


def test_command_position_only():
    assert list(commands_in("cd x && .venv/bin/alight harness list")) == [["harness", "list"]]
    assert list(commands_in("see alight.yaml and the alight store")) == []
    lines = list(candidate_lines("    alight tasks check examples/tasks/tasks.jsonl\n"))
    assert lines == [(1, "alight tasks check examples/tasks/tasks.jsonl")]
