"""`alight run` on a terminal: stderr is a real pseudo-terminal, so progress is the Rich live line (redrawn in
place, counting up to every episode done), not the plain per-episode lines; the summary still goes to stdout."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import threading

from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import run_support as rs

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_live_progress_on_a_terminal_counts_every_episode(tmp_path):
    rs.ensure_mini()
    tasks = rs.calc_task_set(tmp_path, [{"id": "one", "prompt": "fix add"}, {"id": "two", "prompt": "fix add"}])
    script = FakeScript(reply=rs.mini_script(lambda text: "sed -i 's/a - b/a + b/' calc.py"),
                        served_models=["policy-r0"])
    master, slave = pty.openpty()
    seen = bytearray()

    def pump() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO once the last writer closed the terminal
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    with FakeVLLM(script) as fake:
        out = tmp_path / "runs" / "t"
        env = rs.env_for_cli({"COLUMNS": "200", "TERM": "xterm-256color"})
        env.pop("NO_COLOR", None)
        proc = subprocess.run([*rs.ALIGHT, "run", "--task-set", str(tasks), "--harness", "mini-swe-agent",
                               "--attempts", "1", "--upstream", fake.url, "--out", str(out)],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=slave, text=True, timeout=600)
    os.close(slave)
    reader.join(10)
    os.close(master)
    screen = seen.decode("utf-8", "replace")
    assert proc.returncode == 0, screen
    assert ANSI.search(screen), "expected a live display (cursor control) on a terminal"
    text = ANSI.sub("", screen)
    assert "episodes 2/2 done, 0 running, 0 queued" in text and "mean reward 1.00" in text, text
    assert "[1/2]" not in text and "[2/2]" not in text, text  # no plain lines when live
    assert "one" in proc.stdout and "two" in proc.stdout  # the summary table on stdout
