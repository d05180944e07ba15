"""`alight harness list/install/check` as a user runs them (real subprocesses of the installed CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness_support import HARNESSES, harness_home, installed


def alight(*args: str, home: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    full = {**os.environ, "ALIGHT_HOME": str(home), **(env or {})}
    return subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], capture_output=True, text=True,
                          env=full, timeout=timeout, stdin=subprocess.DEVNULL)


def test_list_json_shows_all_four_with_install_state(tmp_path: Path) -> None:
    out = alight("harness", "list", "--json", home=tmp_path / "empty-home")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert set(HARNESSES) <= set(rows)
    assert rows["codex"]["protocol"] == "openai-responses" and rows["codex"]["version"] == "0.171.0"
    assert not any(r["installed"] for r in rows.values() if r["kind"] != "external")
    # the oracle (Harbor tasks' own solutions) ships with alight and installs nothing
    assert rows["oracle"]["kind"] == "external" and rows["oracle"]["installed"]
    assert rows["openhands"]["install_dir"] == str(tmp_path / "empty-home" / "harnesses" / "openhands-1.16.0")


@pytest.mark.harness
def test_install_is_idempotent_and_reports_on_stderr(tmp_path: Path) -> None:
    installed("codex")
    out = alight("harness", "install", "codex", home=harness_home())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(harness_home() / "harnesses" / "codex-0.171.0")
    assert "already installed" in out.stderr
    listed = json.loads(alight("harness", "list", "--json", home=harness_home()).stdout)
    assert {r["name"]: r["installed"] for r in listed}["codex"] is True


def test_fresh_npm_install_into_an_isolated_folder(tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = alight("harness", "install", "claude-code", home=home)
    assert out.returncode == 0, out.stderr
    target = home / "harnesses" / "claude-code-2.1.197"
    marker = json.loads((target / ".alight-install.json").read_text())
    assert marker["version"] == "2.1.197" and "check: 2.1.197" in out.stderr
    assert (target / "node_modules" / ".bin" / "claude").exists()


@pytest.mark.parametrize("version", ["3.8.0", "3.13.0"])
def test_missing_prerequisite_is_a_clear_error(tmp_path: Path, version: str) -> None:
    # 3.13 is newer than OpenHands allows (its package says ==3.12.*): pip would find no distribution.
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\necho {version}\n")
    python.chmod(0o755)
    out = alight("harness", "install", "openhands", home=tmp_path / "home",
                 env={"ALIGHT_HARNESS__OPENHANDS__PYTHON": str(python)})
    assert out.returncode == 1
    assert "error: openhands needs Python ==3.12.*" in out.stderr
    assert "set harness.openhands.python" in out.stderr
    assert not (tmp_path / "home" / "harnesses" / "openhands-1.16.0" / ".alight-install.json").exists()


def test_unknown_harness_lists_what_exists(tmp_path: Path) -> None:
    out = alight("harness", "install", "vim", home=tmp_path)
    assert out.returncode == 1 and "unknown harness 'vim'" in out.stderr and "codex" in out.stderr


def test_check_before_install_says_how_to_install(tmp_path: Path) -> None:
    out = alight("harness", "check", "codex", home=tmp_path / "empty")
    assert out.returncode == 1 and "alight harness install codex" in out.stderr


@pytest.mark.harness
def test_check_runs_the_real_harness_and_reports(tmp_path: Path) -> None:
    installed("codex")
    out = alight("harness", "check", "codex", "--json", home=harness_home(), env={"TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr + out.stdout
    report = json.loads(out.stdout)
    assert report["ok"] and report["protocol"] == "openai-responses"
    assert report["calls"] == report["calls_with_token_ids"] == 2
    assert report["tool_executed"] and report["outcome"]["status"] == "finished"


@pytest.mark.harness
def test_check_of_the_text_mode_recipe_writes_its_command_as_text(tmp_path: Path) -> None:
    """mini-swe-agent-text reads its command from the reply's text (no tools advertised): the check's scripted
    model answers with a fenced block there, and the real harness runs it (it answered with a tool call before,
    which text mode ignores: the check of a shipped recipe always failed)."""
    installed("mini-swe-agent-text")
    out = alight("harness", "check", "mini-swe-agent-text", "--json", home=harness_home(),
                 env={"TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr + out.stdout
    report = json.loads(out.stdout)
    assert report["ok"] and report["tool_executed"] and report["out_txt"].strip() == "written by the scripted model"
    assert report["calls"] == report["calls_with_token_ids"] == 2 and report["outcome"]["status"] == "finished"
