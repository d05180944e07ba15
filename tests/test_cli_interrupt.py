"""Ctrl-C on a long-running command exits 130 after a clean stop (real subprocess, real SIGINT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def test_ctrl_c_on_proxy_exits_130_and_leaves_the_store_readable(tmp_path: Path) -> None:
    store_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentlightning_cli", "proxy", "--upstream", "http://127.0.0.1:9", "--store", str(store_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.time() + 60
        seen = ""
        # "recording" is printed once the proxy listens and the store is open (a warning about the unreachable
        # upstream, which also names a URL, comes before it).
        while "store:" not in seen:
            assert time.time() < deadline and proc.poll() is None, f"proxy did not start: {seen}"
            seen += proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 130
    assert (store_dir / "alight.db").is_file()
