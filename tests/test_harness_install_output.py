"""`alight harness install` shows one line per step and keeps pip's own output in a file: a real venv install of a
real (tiny, locally built) wheel, and a real pip failure. pip asks no index (PIP_NO_INDEX; the machine's pip
settings are left out with PIP_CONFIG_FILE), so nothing leaves the machine."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE, VERSION = "alight-test-agent", "0.1.0"
RECIPE = """\
name: test-agent
description: a tiny harness installed from a local wheel
protocol: openai-chat
install: {{kind: venv, package: {package}, version: "{version}", bin: alight-test-agent}}
check: ["{{{{ executable }}}}", "--version"]
command: ["{{{{ executable }}}}"]
"""
# What pip prints while installing; none of it belongs between alight's own lines.
PIP_LINES = ("Collecting", "Processing", "Looking in", "Installing collected packages", "Successfully installed",
             "Requirement already satisfied", "Downloading", "ERROR:")


def agent_wheel(folder: Path) -> Path:
    """A real wheel with one module and a console script printing its version."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"alight_test_agent-{VERSION}.dist-info"
    files = {"alight_test_agent.py": f"def main():\n    print('alight-test-agent {VERSION}')\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/entry_points.txt": "[console_scripts]\nalight-test-agent = alight_test_agent:main\n",
             f"{info}/RECORD": ""}
    path = folder / f"alight_test_agent-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def install(tmp_path: Path, version: str = VERSION, **env: str) -> subprocess.CompletedProcess:
    recipe = tmp_path / "test-agent.yaml"
    recipe.write_text(RECIPE.format(package=PACKAGE, version=version))
    full = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    full.update({"ALIGHT_HOME": str(tmp_path / "home"), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
                 "PIP_NO_CACHE_DIR": "1", **env})
    return subprocess.run([sys.executable, "-m", "agentlightning_cli", "harness", "install", str(recipe)],
                          capture_output=True, text=True, env=full, timeout=300, stdin=subprocess.DEVNULL)


def test_a_successful_install_prints_its_steps_and_no_pip_output(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    agent_wheel(wheels)
    out = install(tmp_path, PIP_FIND_LINKS=str(wheels))
    assert out.returncode == 0, out.stderr
    target = tmp_path / "home" / "harnesses" / f"test-agent-{VERSION}"
    assert out.stdout.strip() == str(target)
    lines = out.stderr.splitlines()
    assert not [ln for ln in lines if ln.lstrip().startswith(PIP_LINES)], out.stderr
    log = target / "install.log"
    assert lines[0].endswith(f"; pip's output: {log}")
    assert [ln.split()[0] for ln in lines] == ["installing", "$", "$", "check:", "installed"], out.stderr
    assert f"check: alight-test-agent {VERSION}" in lines
    assert f"Successfully installed {PACKAGE}-{VERSION}" in log.read_text()  # pip's output is kept


def test_a_failing_install_names_its_log_and_shows_its_last_lines(tmp_path: Path) -> None:
    out = install(tmp_path, version="9.9.9")  # no such version anywhere pip may look
    log = tmp_path / "home" / "harnesses" / "test-agent-9.9.9" / "install.log"
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    at = lines.index(f"the last lines of {log}:")
    assert f"  | ERROR: No matching distribution found for {PACKAGE}==9.9.9" in lines[at + 1:]
    assert lines[-2].startswith("error: install step failed (exit 1): ") and lines[-2].endswith(f"{PACKAGE}==9.9.9")
    assert lines[-1] == f"hint: its whole output is in {log}; fix what it says, then install again"
    assert f"ERROR: No matching distribution found for {PACKAGE}==9.9.9" in log.read_text()
    assert not (log.parent / ".alight-install.json").exists()
