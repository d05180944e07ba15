"""process.py: a child in its own group, a polite signal, SIGKILL after the grace, the leader reaped, and the
processes that ignored the polite signal reported (and gone)."""

from __future__ import annotations

import signal
import subprocess
import time

from agentlightning_cli import process


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_stop_escalates_reaps_and_reports_survivors(tmp_path) -> None:
    pid_file = tmp_path / "child.pid"
    # The leader exits on SIGTERM; its background child ignores SIGTERM and would outlive it.
    proc = process.start(["bash", "-c", f"(trap '' TERM; echo $BASHPID > {pid_file}; sleep 60) & wait"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not (pid_file.is_file() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child = int(pid_file.read_text())
    assert set(process.group_members(proc.pid)) >= {proc.pid, child}
    started = time.monotonic()
    survivors = process.stop(proc, grace_s=0.5)
    assert time.monotonic() - started < 5
    assert child in survivors  # it ignored SIGTERM and had to be killed
    assert proc.returncode == -signal.SIGTERM  # the leader was reaped
    time.sleep(0.1)
    assert not _alive(child) and process.group_members(proc.pid) == []
    assert process.stop(proc, grace_s=0.5) == []  # idempotent


def test_a_polite_group_leaves_no_survivors() -> None:
    proc = process.start(["sleep", "60"])
    assert process.stop(proc, grace_s=5) == []
    assert proc.returncode == -signal.SIGTERM
