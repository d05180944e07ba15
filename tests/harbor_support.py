"""The real `harbor` package (0.25.0, Python >= 3.12) in its own virtualenv, made once per machine in the test
install cache (harness_home(), as the harness installs), so tests check alight's Harbor support against Harbor's own
task model and ATIF schema instead of a copy of them. alight itself runs on older Pythons and never imports it."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness_support import harness_home

HARBOR_VERSION = "0.25.0"


def python312() -> str:
    """A Python 3.12 interpreter: python3.12 on PATH, else pyenv's. Fails (never skips) when there is none."""
    found = shutil.which("python3.12")
    # pyenv's shim is on PATH even when 3.12 is not the selected version (it then exits 127): try it first.
    if found and subprocess.run([found, "-c", "pass"], capture_output=True).returncode == 0:
        return found
    roots = [os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        roots.insert(0, subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip())
    for root in filter(None, roots):
        for candidate in sorted(Path(root, "versions").glob("3.12*/bin/python3.12"), reverse=True):
            return str(candidate)
    raise AssertionError("the Harbor tests need Python 3.12 (harbor requires it): install python3.12 or `pyenv "
                         "install 3.12`")


def harbor_python() -> Path:
    """The virtualenv's interpreter with harbor installed; installs once (file-locked) when the cache lacks it."""
    venv = harness_home() / f"harbor-{HARBOR_VERSION}-py312"
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"harbor-{HARBOR_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = venv / ".installed"
        if not done.exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([python312(), "-m", "venv", str(venv)], check=True, capture_output=True)
            proc = subprocess.run([str(python), "-m", "pip", "install", "-q", f"harbor=={HARBOR_VERSION}"],
                                  capture_output=True, text=True)
            assert proc.returncode == 0, f"pip install harbor=={HARBOR_VERSION} failed:\n{proc.stderr[-3000:]}"
            done.write_text(HARBOR_VERSION)
    return python


def run_in_harbor(script: str, *args: str) -> dict:
    """Run `script` (Python source) in harbor's virtualenv; it prints one JSON object, returned here."""
    proc = subprocess.run([str(harbor_python()), "-c", script, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (f"harbor check failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                                  f"{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":  # .ci/run (and a developer) can pre-install it: python -m tests.harbor_support
    print(harbor_python(), file=sys.stderr)
