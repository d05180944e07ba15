"""mitmdump for the HAR test: mitmproxy needs Python >= 3.12 and cannot share alight's 3.11 environment, so it
lives in its own virtualenv.

CI (`.ci/run`) creates that virtualenv and exports MITMDUMP_TEST_BIN; under CI a missing or broken one is a test
failure, never a skip. Elsewhere the test makes the same virtualenv on demand, once, file-locked, under
~/.cache/alight-test-mitmproxy (the same place `.ci/run` uses), from a python3.12+ on PATH or under pyenv.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

MITMPROXY = "mitmproxy==12.3.1"
CACHE = Path(os.environ.get("MITMPROXY_TEST_HOME", Path.home() / ".cache" / "alight-test-mitmproxy"))


def python312() -> str | None:
    """A Python >= 3.12 that runs: pyenv's versions first (a pyenv shim on PATH may refuse to run), then PATH."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [str(p) for p in sorted(root.glob("3.1[2-9]*/bin/python3"), reverse=True)]
    candidates += [found for name in ("python3.13", "python3.12") if (found := shutil.which(name))]
    for candidate in candidates:
        check = subprocess.run([candidate, "-c", "import sys; assert sys.version_info >= (3, 12)"],
                               capture_output=True)
        if check.returncode == 0:
            return candidate
    return None


def ensure_venv() -> str:
    """Create the mitmproxy virtualenv once (file-locked: parallel tests and CI share it); its mitmdump path."""
    venv = CACHE / "venv"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            python = python312()
            if python is None:
                raise RuntimeError("mitmproxy needs Python >= 3.12; none under pyenv or on PATH")
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([python, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", MITMPROXY], check=True)
            (venv / ".complete").write_text(MITMPROXY)
    return str(venv / "bin" / "mitmdump")


def mitmdump() -> str:
    """Path of a working mitmdump; raises (the test fails) when none can be had."""
    given = os.environ.get("MITMDUMP_TEST_BIN")
    if given:
        if not os.access(given, os.X_OK):
            raise RuntimeError(f"MITMDUMP_TEST_BIN={given} is not an executable")
        return given
    if os.environ.get("CI"):
        raise RuntimeError("MITMDUMP_TEST_BIN is not set: .ci/run must create the mitmproxy virtualenv")
    return ensure_venv()


if __name__ == "__main__":  # .ci/run: make the virtualenv, print mitmdump's path
    print(ensure_venv())
