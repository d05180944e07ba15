"""Setup and reward commands run in the sandbox over the workspace; hidden files replace the agent's leftovers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.reward import run_reward
from agentlightning_cli.tasks import load_tasks, prepare_workspace, reveal_hidden_files
from agentlightning_cli.tasks.load import check_task_file
from agentlightning_cli.testing.loopback import LoopbackServer


def tasks_file(tmp_path: Path, **fields) -> Path:
    f = tmp_path / "tasks" / "t.jsonl"
    f.parent.mkdir(exist_ok=True)
    f.write_text(json.dumps({"id": "t1", "prompt": "p", "reward": "true", **fields}) + "\n")
    return f


@pytest.mark.parametrize("network", [False, True])
def test_setup_gets_the_network_only_when_the_task_says_so(tmp_path: Path, network: bool) -> None:
    listener = LoopbackServer()
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{listener.port} && echo reached > reached.txt || true"
    task = load_tasks(tasks_file(tmp_path, setup=[probe], setup_network=network))[0]
    ws = prepare_workspace(task, tmp_path / "ws", sandbox="bwrap")
    assert (ws / "reached.txt").exists() is network
    assert len(listener.seen) == (1 if network else 0)
    listener.close()


def test_setup_network_must_be_a_boolean(tmp_path: Path) -> None:
    report = check_task_file(tasks_file(tmp_path, setup=["true"], setup_network="yes"))
    assert any(p.field == "setup_network" for p in report.problems), report.problems


def test_reward_sees_the_workspace_but_not_the_task_folder_or_the_network(tmp_path: Path) -> None:
    secret = tmp_path / "tasks" / "reference_answer.txt"
    listener = LoopbackServer()
    reward = (f"test -f marker.txt && ! cat {secret} && ! (exec 3<>/dev/tcp/127.0.0.1/{listener.port}) "
              "&& echo > written_by_reward.txt")
    task = load_tasks(tasks_file(tmp_path, reward=reward))[0]
    secret.write_text("42")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "marker.txt").write_text("agent work")
    assert run_reward(task, ws, timeout_s=30, sandbox="bwrap").reward == 1.0
    assert (ws / "written_by_reward.txt").exists() and not listener.seen
    # The same command on the host (`none`, an explicit choice) can read the secret: the sandbox is what hid it.
    assert run_reward(task, ws, timeout_s=30, sandbox="none").reward == 0.0
    listener.close()


def test_hidden_files_overwrite_the_agents_edits_and_never_follow_its_symlinks(tmp_path: Path) -> None:
    hidden = tmp_path / "tasks" / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_it.py").write_text("REAL TEST")
    (hidden / "conf").mkdir()
    (hidden / "conf" / "settings.ini").write_text("REAL SETTINGS")
    task = load_tasks(tasks_file(tmp_path, hidden_files="hidden"))[0]
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "tests" / "test_it.py").write_text("assert True  # the agent's own version")
    outside = tmp_path / "host-folder"
    outside.mkdir()
    (ws / "conf").symlink_to(outside)  # an attempt to make the copy write on the host
    reveal_hidden_files(task, ws)
    assert (ws / "tests" / "test_it.py").read_text() == "REAL TEST"
    assert not (ws / "conf").is_symlink() and (ws / "conf" / "settings.ini").read_text() == "REAL SETTINGS"
    assert list(outside.iterdir()) == []


def test_swebench_reveal_runs_none_of_the_agents_git_config_on_the_host(tmp_path: Path) -> None:
    from test_tasks_swebench import VENV_SETUP, git, write_set

    mirror_dir, line = _mirror(tmp_path)
    (task,) = load_tasks(write_set(tmp_path, {**line, "setup": [VENV_SETUP]}), swebench_mirror=mirror_dir)
    ws = prepare_workspace(task, tmp_path / "ws", sandbox="bwrap")
    ran = tmp_path / "ran-on-host"
    # What an agent could plant: a hook, an fsmonitor command, a smudge filter for every file, and the tests
    # folder swapped for a symlink to a host folder.
    hook = ws / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {ran}-hook\n")
    hook.chmod(0o755)
    git(ws, "config", "core.fsmonitor", f"touch {ran}-fsmonitor; false")
    git(ws, "config", "filter.evil.smudge", f"sh -c 'touch {ran}-filter; cat'")
    (ws / ".gitattributes").write_text("* filter=evil\n")
    outside = tmp_path / "host-tests"
    outside.mkdir()
    import shutil

    shutil.rmtree(ws / "tests")
    (ws / "tests").symlink_to(outside)
    reveal_hidden_files(task, ws)
    assert not list(tmp_path.glob("ran-on-host*"))
    assert list(outside.iterdir()) == []
    assert not (ws / "tests").is_symlink() and "test_add_negative" in (ws / "tests" / "test_calc.py").read_text()


def _mirror(tmp_path: Path):
    """The SWE-bench tests' mirror fixture (a repo with a base and a fix commit), called directly."""
    import test_tasks_swebench

    return test_tasks_swebench.mirror.__wrapped__(tmp_path)
