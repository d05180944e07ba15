"""Reward commands: exit-code form, final JSON line, bad values, and timeouts that kill the whole group."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentlightning_cli.reward import run_reward
from agentlightning_cli.tasks import load_tasks


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for init to reap it (orphans are reparented)."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        time.sleep(0.05)
    return True


def task_with(tmp_path: Path, reward: str):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "r1", "prompt": "p", "reward": reward}) + "\n")
    return load_tasks(f)[0]


def run(tmp_path: Path, reward: str, timeout_s: float = 30, sandbox: str | None = None):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return run_reward(task_with(tmp_path, reward), ws, timeout_s=timeout_s, sandbox=sandbox)


def running_with(arg: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains arg: PIDs inside a sandbox differ from ours."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and arg in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                found.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in found if alive(pid)]


@pytest.mark.parametrize(("command", "reward", "code"), [("true", 1.0, 0), ("exit 3", 0.0, 3), ("kill -9 $$", 0.0, -9)])
def test_exit_code_form(tmp_path: Path, command: str, reward: float, code: int) -> None:
    result = run(tmp_path, command)
    assert (result.reward, result.exit_code, result.error, result.timed_out) == (reward, code, None, False)
    assert result.detail == {}


def test_runs_in_the_workspace_with_task_variables(tmp_path: Path) -> None:
    result = run(tmp_path, 'echo "$TASK_ID $TASK_WORKSPACE $PWD"; echo oops >&2')
    ws = str(tmp_path / "ws")
    assert result.stdout_tail == f"r1 {ws} {ws}\n" and result.stderr_tail == "oops\n"
    assert result.duration_s >= 0


def test_final_json_line(tmp_path: Path) -> None:
    script = 'echo "running 4 checks"; echo \'{"reward": 0.75, "passed": 3, "failed": ["t4"]}\'; exit 1'
    result = run(tmp_path, script)
    # The JSON line wins over the exit code: test runners exit non-zero while reporting a partial score.
    assert result.reward == 0.75 and result.detail == {"passed": 3, "failed": ["t4"]} and result.exit_code == 1
    assert result.error is None


def test_json_must_be_the_final_line(tmp_path: Path) -> None:
    result = run(tmp_path, """echo '{"reward": 0.5}'; echo done""")
    assert result.reward == 1.0 and result.detail == {}
    assert run(tmp_path, """echo '{"score": 0.5}'; exit 2""").reward == 0.0  # no "reward" key: exit code decides


@pytest.mark.parametrize("value", ['"high"', "null", "true", "NaN", "Infinity", "[1]"])
def test_non_number_reward_is_an_error_result(tmp_path: Path, value: str) -> None:
    result = run(tmp_path, f"""echo '{{"reward": {value}, "note": "x"}}'""")
    assert result.reward == 0.0 and result.exit_code == 0
    assert "finite number" in result.error and result.detail["error"] == result.error
    assert result.detail["note"] == "x"


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_timeout_kills_the_process_group(tmp_path: Path, sandbox: str) -> None:
    marker = f"60.{time.monotonic_ns() % 10**9}"
    # A background grandchild that would outlive a naive kill of the shell alone.
    command = f"sleep {marker} & echo started; wait"
    started = time.monotonic()
    result = run(tmp_path, command, timeout_s=1, sandbox=sandbox)
    assert time.monotonic() - started < 10
    assert result.reward == 0.0 and result.timed_out and result.exit_code is None
    assert result.detail["timed_out"] is True and "1s limit" in result.error
    assert result.stdout_tail == "started\n"
    assert running_with(f"sleep {marker}") == []


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_background_leftovers_die_with_a_finished_command(tmp_path: Path, sandbox: str) -> None:
    marker = f"61.{time.monotonic_ns() % 10**9}"
    result = run(tmp_path, f"(sleep {marker} >/dev/null 2>&1 & echo $! > bg.pid); true", sandbox=sandbox)
    assert result.reward == 1.0 and (tmp_path / "ws" / "bg.pid").exists()
    assert running_with(f"sleep {marker}") == []


def test_missing_workspace_is_an_error_result(tmp_path: Path) -> None:
    result = run_reward(task_with(tmp_path, "true"), tmp_path / "gone", timeout_s=5)
    assert result.reward == 0.0 and "could not start" in result.error and str(tmp_path / "gone") in result.error
