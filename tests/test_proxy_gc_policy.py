"""`alight proxy` runs with the serving GC policy: startup objects frozen, a high young-generation threshold."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from agentlightning_cli.proxy.gc_policy import GEN0_THRESHOLD


def test_alight_proxy_process_uses_the_serving_gc_policy(tmp_path):
    # The policy is process-wide, so it is checked in a real `alight proxy` process, not in the test process:
    # a probe module imported at startup (via PYTHONPATH's sitecustomize) reports the GC state on SIGUSR1.
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(
        "import gc, signal, sys\n"
        "def report(*_):\n"
        "    print('GC', gc.get_threshold()[0], gc.get_freeze_count(), file=sys.stderr, flush=True)\n"
        "signal.signal(signal.SIGUSR1, report)\n")
    env = {**os.environ, "PYTHONPATH": f"{probe}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "agentlightning_cli.cli", "proxy", "--upstream",
                             "http://127.0.0.1:9", "--port", "0", "--store", str(tmp_path / "store")],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        while "Ctrl-C stops." not in "".join(lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if line.startswith("GC "):
                threshold, frozen = map(int, line.split()[1:])
                assert threshold == GEN0_THRESHOLD and frozen > 10_000
                break
        else:
            raise AssertionError("no GC report")
    finally:
        proc.terminate()
        proc.wait(20)
