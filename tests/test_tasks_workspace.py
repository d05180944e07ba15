"""Workspaces: plain folders, local git repos at a commit, setup commands, and hidden files revealed late."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks import load_tasks, prepare_workspace, reveal_hidden_files

EXAMPLES = Path(__file__).parent.parent / "examples" / "tasks" / "tasks.jsonl"


def git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def one_task(tmp_path: Path, **fields: object):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "t1", "prompt": "Do it.", "reward": "true", **fields}) + "\n")
    (task,) = load_tasks(f)
    return task


def test_plain_folder_is_copied_and_committed(tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    task = one_task(tmp_path, repo="proj", setup=["echo built > BUILD.txt"])
    ws = prepare_workspace(task, tmp_path / "ws")
    assert (ws / "pkg" / "a.py").read_text() == "x = 1\n"
    assert (ws / "BUILD.txt").read_text() == "built\n"
    # Committed, so the agent's diff is `git diff HEAD`; setup's output is not part of the starting commit.
    assert git(ws, "ls-files").splitlines() == ["pkg/a.py"]
    (ws / "pkg" / "a.py").write_text("x = 2\n")
    assert "+x = 2" in git(ws, "diff", "HEAD")
    assert not (src / "BUILD.txt").exists(), "the source folder must never change"


def test_local_git_repo_at_base_commit(tmp_path: Path) -> None:
    src = tmp_path / "repo"
    src.mkdir()
    git(src, "init", "-q")
    (src / "f.txt").write_text("one\n")
    git(src, "add", "f.txt")
    git(src, "commit", "-qm", "one")
    first = git(src, "rev-parse", "HEAD")
    (src / "f.txt").write_text("two\n")
    git(src, "commit", "-qam", "two")
    (src / "f.txt").write_text("uncommitted\n")
    task = one_task(tmp_path, repo="repo", base_commit=first[:10])
    ws = prepare_workspace(task, tmp_path / "ws")
    assert (ws / "f.txt").read_text() == "one\n"
    assert git(ws, "rev-parse", "HEAD") == first
    assert git(ws, "log", "--all", "--format=%s").splitlines() == ["one"]
    assert git(ws, "remote") == ""

    head = prepare_workspace(one_task(tmp_path, repo="repo"), tmp_path / "ws-head")
    assert (head / "f.txt").read_text() == "two\n"
    assert git(head, "rev-list", "--count", "HEAD") == "2"
    shallow = prepare_workspace(one_task(tmp_path, repo="repo"), tmp_path / "ws-shallow", fetch_depth=1)
    assert git(shallow, "rev-list", "--count", "HEAD") == "1" and (shallow / "f.txt").read_text() == "two\n"


def test_empty_workspace_without_repo(tmp_path: Path) -> None:
    ws = prepare_workspace(one_task(tmp_path), tmp_path / "ws")
    assert git(ws, "log", "--format=%s") == "alight: empty workspace"


def test_non_empty_destination_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "x").write_text("")
    with pytest.raises(AlightError, match="not empty"):
        prepare_workspace(one_task(tmp_path), tmp_path / "ws")


def test_setup_failure_names_task_command_and_output(tmp_path: Path) -> None:
    task = one_task(tmp_path, setup=["echo fine", "echo preparing; echo 'no such package: foo' >&2; exit 3"])
    with pytest.raises(AlightError) as info:
        prepare_workspace(task, tmp_path / "ws")
    msg = info.value.message
    assert "task t1" in msg and f"{tmp_path / 't.jsonl'}:1" in msg
    assert "setup command 2 of 2 exited with 3" in msg and "exit 3" in msg
    assert "preparing" in msg and "no such package: foo" in msg


def test_setup_timeout_kills_and_says_so(tmp_path: Path) -> None:
    task = one_task(tmp_path, setup=["sleep 30"])
    with pytest.raises(AlightError, match=r"setup command 1 of 1 ran past 0.5s: sleep 30"):
        prepare_workspace(task, tmp_path / "ws", setup_timeout_s=0.5)


def test_hidden_files_appear_only_after_reveal(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "code.py").write_text("")
    hidden = tmp_path / "hidden" / "tests"
    hidden.mkdir(parents=True)
    (hidden / "test_secret.py").write_text("SECRET = 1\n")
    task = one_task(tmp_path, repo="proj", hidden_files="hidden")
    ws = prepare_workspace(task, tmp_path / "ws")
    assert not (ws / "tests").exists()
    assert "SECRET" not in subprocess.run(["grep", "-r", "SECRET", "."], cwd=ws, capture_output=True, text=True).stdout
    (ws / "tests").mkdir()
    (ws / "tests" / "test_secret.py").write_text("tampered by the agent\n")
    reveal_hidden_files(task, ws)
    assert (ws / "tests" / "test_secret.py").read_text() == "SECRET = 1\n"


def test_example_task_set_end_to_end(tmp_path: Path) -> None:
    from agentlightning_cli.reward import run_reward

    tasks = {t.id: t for t in load_tasks(EXAMPLES)}
    ws = prepare_workspace(tasks["calc-add"], tmp_path / "add")
    reveal_hidden_files(tasks["calc-add"], ws)
    assert run_reward(tasks["calc-add"], ws, timeout_s=60).reward == 0.0
    (ws / "calc.py").write_text((ws / "calc.py").read_text().replace("a - b", "a + b"))
    assert run_reward(tasks["calc-add"], ws, timeout_s=60).reward == 1.0

    ws = prepare_workspace(tasks["calc-score"], tmp_path / "score")
    (ws / "calc.py").write_text((ws / "calc.py").read_text().replace("a - b", "a + b"))
    reveal_hidden_files(tasks["calc-score"], ws)
    result = run_reward(tasks["calc-score"], ws, timeout_s=60)
    assert result.reward == 0.5 and result.detail == {"passed": ["add"], "total": 2}

    ws = prepare_workspace(tasks["hello"], tmp_path / "hello")
    assert (ws / "NOTES.md").exists()
    (ws / "hello.py").write_text("print('hello')\n")
    assert run_reward(tasks["hello"], ws, timeout_s=60).reward == 1.0

    ws = prepare_workspace(tasks["words-reverse"], tmp_path / "words")
    assert not (ws / "test_hidden_words.py").exists()
    reveal_hidden_files(tasks["words-reverse"], ws)
    assert run_reward(tasks["words-reverse"], ws, timeout_s=60).reward == 0.0
    (ws / "textutils.py").write_text((ws / "textutils.py").read_text().replace("[::1]", "[::-1]"))
    assert run_reward(tasks["words-reverse"], ws, timeout_s=60).reward == 1.0
