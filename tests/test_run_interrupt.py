"""`alight run` stopped mid-way (Ctrl-C, and `kill -9` of alight itself), then run again: every episode
completes exactly once, nothing of the run is left running, no half-made workspace stays (d)."""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections import Counter

from agentlightning_cli.rollout import stale
from agentlightning_cli.rollout.plan import FINAL
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
from tests import run_support as rs


def _lines(proc) -> "queue.Queue[str]":
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stderr:
            q.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _wait_for(q: "queue.Queue[str]", needle: str, timeout: float = 240) -> list[str]:
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not seen in time; stderr so far:\n{''.join(seen)}")


def _reward_shells(out) -> list[int]:
    found = []
    for pid in stale.run_processes(out):
        try:
            if b"sleep\x00120" in open(f"/proc/{pid}/cmdline", "rb").read():
                found.append(pid)
        except OSError:
            continue
    return found


def _check_complete(out, slots: int) -> list:
    store, episodes = rs.read_store(out)
    try:
        final = [e for e in episodes if e.status in FINAL]
        per_slot = Counter((e.task_id, e.attempt) for e in final)
        assert len(per_slot) == slots and set(per_slot.values()) == {1}, per_slot
        assert all(e.status == "done" and e.reward == 1.0 for e in final)
        assert store.get_run(out.name).status == "done"
        return episodes
    finally:
        store.close()


def _run_args(tasks, fake, out):
    return ["run", "--task-set", str(tasks), "--harness", "mini-swe-agent", "--attempts", "2", "--concurrency", "2",
            "--upstream", fake.url, "--out", str(out)]


def _script():
    return FakeScript(reply=rs.mini_script(lambda text: "sleep 4; sed -i 's/a - b/a + b/' calc.py"),
                      served_models=["policy-r0"])


def test_ctrl_c_then_rerun_completes_every_episode_once(tmp_path):
    rs.ensure_mini()
    tasks = rs.calc_task_set(tmp_path, [{"id": "one", "prompt": "fix"}, {"id": "two", "prompt": "fix"}])
    out = tmp_path / "runs" / "d1"
    with FakeVLLM(_script()) as fake:
        proc = rs.start_alight(_run_args(tasks, fake, out), cwd=tmp_path)
        _wait_for(_lines(proc), "[1/4]")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
        assert stale.run_processes(out) == []  # harnesses and their tool commands are gone
        store, episodes = rs.read_store(out)
        try:
            statuses = Counter(e.status for e in episodes)
            assert statuses["done"] >= 1 and statuses["interrupted"] >= 1, statuses
            assert store.get_run("d1").status == "interrupted"
            interrupted = {e.id for e in episodes if e.status == "interrupted"}
        finally:
            store.close()
        assert not any((out / "workspaces" / ep).exists() for ep in interrupted)
        again = rs.alight(_run_args(tasks, fake, out), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert "resuming" in again.stderr
    episodes = _check_complete(out, 4)
    assert {e.id for e in episodes if e.status == "abandoned"} == interrupted  # kept, with their calls
    assert stale.run_processes(out) == []


def test_kill_9_then_rerun_cleans_up_and_completes_every_episode_once(tmp_path):
    rs.ensure_mini()
    # Sandboxed episodes and shells die with alight (bubblewrap --die-with-parent); without the sandbox a
    # slow reward's shell outlives a killed alight, and the next run must find and kill it.
    no_box = {"ALIGHT_SANDBOX": "none"}
    # Rewards started while the marker exists sleep far longer than the rerun could take to start, so the killed
    # run's reward shell is surely still there when the rerun looks (a short sleep raced a loaded machine).
    marker = tmp_path / "slow-rewards"
    slow = {"prompt": "fix", "reward": f"test ! -e {marker} || sleep 120; python3 -m unittest -q test_hidden_calc"}
    tasks = rs.calc_task_set(tmp_path, [{"id": "one", **slow}, {"id": "two", **slow}])
    out = tmp_path / "runs" / "d2"
    with FakeVLLM(_script()) as fake:
        proc = rs.start_alight(_run_args(tasks, fake, out), cwd=tmp_path, env=no_box)
        lines = _lines(proc)
        _wait_for(lines, "[1/4]")
        marker.touch()
        deadline = time.monotonic() + 90
        while not _reward_shells(out) and time.monotonic() < deadline:  # an episode is being scored
            time.sleep(0.1)
        proc.kill()
        proc.wait(30)
        left = stale.run_processes(out)
        assert left, "expected the killed run to leave its running episode's processes"
        assert _reward_shells(out), "expected the killed run's reward shell to be still running"
        marker.unlink()
        again = rs.alight(_run_args(tasks, fake, out), cwd=tmp_path, env=no_box)
        assert again.returncode == 0, again.stderr
        assert "left behind" in again.stderr
    _check_complete(out, 4)
    assert stale.run_processes(out) == []
    assert list((out / "workspaces").iterdir()) == []  # no half-made workspace stays
