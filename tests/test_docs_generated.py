"""The generated documentation pages (issue 38) are what their sources render now, and go stale when the code moves:
the CLI reference from the Typer app, the settings reference from config.Settings, the troubleshooting page from
the AlightErrors in the code, the benchmark tables from bench/results/*.json, the changelog, the store schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.config import Settings, _env_layer
from agentlightning_cli.docgen import bench_tables, cli_reference, errors_reference, settings_reference
from agentlightning_cli.docgen.__main__ import main as docgen_main
from agentlightning_cli.docgen.commands_check import problems
from agentlightning_cli.docgen.pages import DOCS, ROOT, generated, stale

CLI_PAGE = DOCS / "reference" / "cli.md"


def test_every_generated_page_is_current():
    assert stale() == [], "run `python -m agentlightning_cli.docgen --write` and commit the pages"


def test_check_exits_1_naming_a_stale_page(capsys, monkeypatch):
    monkeypatch.setattr("agentlightning_cli.docgen.__main__.stale", lambda: [CLI_PAGE])
    assert docgen_main(["--check"]) == 1
    assert "docs/reference/cli.md is out of date" in capsys.readouterr().err


def _rename_option(monkeypatch, command: str, old: str, new: str) -> None:
    """The Typer app with one option of one command renamed, as a code change would leave it."""
    root = cli_reference.root_command()
    param = next(p for p in root.commands[command].params if old in p.opts)
    monkeypatch.setattr(param, "opts", [new if o == old else o for o in param.opts])
    monkeypatch.setattr(cli_reference, "root_command", lambda: root)


def test_renaming_an_option_makes_the_cli_reference_stale_and_the_docs_fail_the_command_check(monkeypatch):
    assert CLI_PAGE in generated() and CLI_PAGE not in stale()
    _rename_option(monkeypatch, "run", "--attempts", "--tries")
    page = cli_reference.render()
    assert "`--tries` `<int>`" in page and "`--attempts`" not in page.split("## `alight run`")[1].split("## ")[0]
    assert stale({CLI_PAGE: cli_reference.render}) == [CLI_PAGE]
    # ... and every page that still says `alight run ... --attempts` is named by the command check
    found = problems([DOCS / "running.md", DOCS / "commands.md"], ROOT)
    assert any("No such option: --attempts" in p and p.startswith("docs/commands.md:") for p in found), found


def test_cli_reference_lists_every_visible_command_option_and_default():
    page = CLI_PAGE.read_text(encoding="utf-8")
    for path, command in cli_reference.walk(cli_reference.root_command()):
        assert f"## `{' '.join(path)}`" in page
        section = page.split(f"## `{' '.join(path)}`\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if param.hidden or param.name in ("install_completion", "show_completion"):
                continue
            for opt in param.opts if param.param_type_name == "option" else []:
                assert f"`{opt}`" in section, (path, opt)
    run = page.split("## `alight run`\n", 1)[1].split("\n## ", 1)[0]
    assert "| `--attempts` `<int>` | `4` | Episodes per task (the GRPO group size). |" in run
    assert "`--task-set` `<path>` |  | *required*" in run


def test_settings_reference_env_names_are_the_ones_config_reads():
    """Each key's documented variable, fed to config's own environment layer, sets exactly that key."""
    page = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    count = 0
    for path, field, doc, sub in settings_reference.rows(Settings):
        if sub is not None:
            continue
        env = settings_reference.env_name(path)
        assert f"| `{'.'.join(path)}` |" in page and f"`{env}`" in page
        real = tuple("codex" if part == "<name>" else part for part in path)
        layer = _env_layer({env.replace("<NAME>", "CODEX"): "1"})
        for part in real[:-1]:
            layer = layer[part]
        assert layer == {real[-1]: 1}, (path, env)
        count += 1
    assert count > 60  # every key, not a sample
    # the docstring under a field is its description; a default factory shows its value
    assert "| `train.outcomes` | `list[str]` | `['finished', 'budget_exceeded', 'timeout']` |" in page
    assert "`ALIGHT_HARNESS__<NAME>__PYTHON` | Interpreter for harnesses installed into a virtualenv" in page


def test_troubleshooting_lists_errors_with_their_hints_from_the_code():
    errors = errors_reference.find_errors()
    assert len(errors) > 100
    sandbox = next(e for e in errors if e["message"] == "unknown sandbox '{mode}'")
    assert sandbox["module"] == "sandbox.choice" and sandbox["hint"] == "use `bwrap`, `container` or `none`"
    page = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    assert "| `` unknown sandbox '{mode}' `` | `` use `bwrap`, `container` or `none` `` | `sandbox.choice`" in page


def test_bench_tables_show_what_their_shape_allows_and_name_what_they_skip(tmp_path: Path):
    (tmp_path / "x.json").write_text(json.dumps({
        "cpus": 2, "rows": [{"concurrency": 1, "per_min": 6.1, "rounds": [{"round": 0, "s": 9.5}]},
                            {"concurrency": 2, "per_min": 13.25, "cost": {"max_s": 0.2}}],
        "machine": {"load": 1.5}, "runs": {"fast": {"cpu": {"ms": 1.25, "n": 3}}}, "dropped": {},
        "wide": [{f"c{i}": i for i in range(13)}, {"c0": 7}],
        "samples": [{"ms": i} for i in range(41)], "grid": [[1, 2], [3, 4]]}))
    page = bench_tables.render(tmp_path)
    assert "| cpus | 2 |" in page and "| load | 1.5 |" in page and "`dropped`: (none)" in page
    # a list of objects: one row each, a nested object as dotted columns, a list of objects in a row apart
    assert "| concurrency | per_min | cost.max_s |\n|---|---|---|\n| 1 | 6.1 |  |\n| 2 | 13.25 | 0.2 |" in page
    assert "`rows[0].rounds`:\n\n| round | s |\n|---|---|\n| 0 | 9.5 |" in page
    assert "`runs`:\n\n|  | cpu.ms | cpu.n |\n|---|---|---|\n| fast | 1.25 | 3 |" in page  # an object of objects
    assert "| field | 0 | 1 |\n|---|---|---|\n| c0 | 0 | 7 |\n| c1 | 1 |  |" in page  # 13 columns: on its side
    assert "*Not shown* (nested): `samples` (a list of 41), `grid` (a list of 2)." in page


@pytest.mark.parametrize("page", ["cli.md", "settings.md"])
def test_reference_pages_say_they_are_generated(page: str):
    assert (DOCS / "reference" / page).read_text(encoding="utf-8").startswith("<!-- generated from")


def test_the_changelog_page_points_readme_links_at_the_pages(tmp_path: Path):
    from agentlightning_cli.docgen import changelog

    body = changelog.render_body()
    assert "](README.md" not in body and body.startswith("# Changelog")
    old = tmp_path / "CHANGELOG.md"
    old.write_text("- see [the README](README.md#past-one-machine) and [this](README.md#no-such-section)\n")
    with pytest.raises(ValueError, match="README.md#no-such-section"):
        changelog.render_body(old)
    old.write_text("- see [the README](README.md#past-one-machine)\n")
    assert changelog.render_body(old) == "- see [the README](past-one-machine.md)\n"


def test_marked_output_excerpts_are_rerun_and_a_stale_one_makes_its_page_stale(tmp_path: Path, monkeypatch):
    from agentlightning_cli.docgen import excerpts

    page = ("Intro.\n\n<!-- excerpt: tasks check docs/excerpts/bad.jsonl -->\n```text\n$ alight tasks check old\n"
            "what it printed last year\n```\n\n<!-- excerpt: config show keep=3 -->\n```text\n```\nEnd.\n")
    text = excerpts.render_page(page)
    assert text.startswith("Intro.\n\n<!-- excerpt: tasks check docs/excerpts/bad.jsonl -->\n```text\n"
                           "$ alight tasks check docs/excerpts/bad.jsonl\n"
                           "/path/to/alight/docs/excerpts/bad.jsonl: INVALID (2 problems)\n")
    assert "field 'reward': missing (required)" in text and "last year" not in text and text.endswith("```\nEnd.\n")
    shown = text.split("<!-- excerpt: config show keep=3 -->\n```text\n")[1].split("```")[0].splitlines()
    assert shown[0] == "$ alight config show" and shown[1].startswith("# user file:    ~/") and shown[-1] == "..."
    assert len(shown) == 5  # the command, 3 lines kept, the cut
    assert excerpts.render_page(text) == text  # nothing of this machine or this minute in it
    # on the real docs: a marked page is checked like any generated page, and goes stale when its output changes
    marked = DOCS / "task-formats.md"
    assert marked in generated() and marked not in stale()
    copy = tmp_path / "task-formats.md"
    copy.write_text(marked.read_text(encoding="utf-8").replace("tasks:        16", "tasks:        15"))
    monkeypatch.setattr(excerpts, "DOCS", tmp_path)
    assert stale({copy: excerpts.renderers()[copy]}) == [copy]
