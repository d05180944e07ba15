"""The settings reference's "read by" (issue 38: "which command reads it"), found in the source by a call graph:
on a small package written here (every rule on its own) and on alight itself (facts a user relies on)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from agentlightning_cli.config import Settings
from agentlightning_cli.docgen.settings_readers import EVERY, SourceGraph, readers

KEYS = ("serve", "proxy", "reward", "container", "eval")


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_reads_are_followed_through_lazy_imports_module_paths_and_classes_but_records_do_not_count(tmp_path):
    root = _package(tmp_path, {
        "config.py": """
            class Settings:
                serve = proxy = reward = container = eval = None
            def load_settings():
                s = Settings(); s.serve; return s
        """,
        "cli.py": """
            def run():
                from pkg.engine import start
                start(load())
            def show():
                from pkg import config
                config.load_settings().model_dump()
            def check():
                from pkg.config import load_settings
                return load_settings().container
            def inspect(episode):
                return episode.reward, episode.eval  # a stored record's fields, not settings
            def load():
                return None
        """,
        "engine.py": """
            from pkg.config import Settings
            from pkg import server
            def start(settings: Settings):
                server.Server(settings.serve)
                return _limits(settings)
            def _limits(cfg: "Settings"):
                return cfg.proxy
        """,
        "server.py": """
            class Server:
                def __init__(self, serve):
                    self.serve = serve.port  # the section's own fields: read through its caller
        """,
    })
    graph = SourceGraph(root, KEYS, "pkg.config")
    assert graph.reach([("pkg.cli", "run")]) == {"serve", "proxy"}
    assert graph.reach([("pkg.cli", "show")]) == {EVERY}
    assert graph.reach([("pkg.cli", "check")]) == {"container"}
    assert graph.reach([("pkg.cli", "inspect")]) == set()
    assert graph.reach([("pkg.cli", "nothing-here")]) == set()


def test_alight_commands_read_what_they_use():
    read_by = readers(Settings.model_fields)
    assert {"alight run", "alight eval", "alight serve", "alight proxy", "alight train"} <= set(read_by["serve"])
    assert "alight inspect list" not in read_by["serve"] and "alight inspect list" in read_by["runs_dir"]
    assert "alight tasks check" in read_by["container"]  # load_settings().container
    assert "alight train" in read_by["reward"] and "alight proxy" not in read_by["reward"]
    for key in Settings.model_fields:  # `config show` prints everything; `run` reaches every section
        assert "alight config show" in read_by[key] and "alight run" in read_by[key], key
    # the app's callback reads log_level before any command: every command, even one that loads no settings
    assert "alight model tiny" in read_by["log_level"] and "alight model tiny" not in read_by["home"]
