"""The agent's patch (tasks/patch.py) with real git: what it holds, what it leaves out, and that nothing the agent
left in the workspace's .git runs on the host or changes it.

Every patch is checked the way a grader uses it: applied with `git apply` to a fresh copy of the starting point,
it must reproduce the agent's workspace.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from agentlightning_cli.tasks import Task, agent_patch, prepare_workspace, snapshot_base
from agentlightning_cli.tasks.load import load_tasks


def _task(tmp_path: Path, setup: list[str]) -> Task:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "data.bin").write_bytes(bytes(range(256)))
    (repo / "old_name.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("*.log\n")
    line = {"id": "t", "prompt": "p", "repo": str(repo), "setup": setup, "reward": "true"}
    (tmp_path / "tasks.jsonl").write_text(__import__("json").dumps(line) + "\n")
    return load_tasks(tmp_path / "tasks.jsonl")[0]


def _prepared(tmp_path: Path, setup: list[str] = ()) -> tuple[Task, Path, Path]:
    task = _task(tmp_path, list(setup))
    ws = prepare_workspace(task, tmp_path / "ws", sandbox="none")
    base = tmp_path / "bases" / "ep.git"
    snapshot_base(ws, base)
    return task, ws, base


def _applied(task: Task, tmp_path: Path, patch: bytes, name: str = "check") -> Path:
    """A fresh copy of the starting point (setup included) with the patch applied by plain `git apply`."""
    fresh = prepare_workspace(task, tmp_path / name, sandbox="none")
    proc = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], input=patch, cwd=fresh, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return fresh


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(folder).parts and p.suffix != ".log"}


def test_patch_holds_edits_new_deleted_renamed_and_binary_files_and_applies_to_the_start(tmp_path: Path) -> None:
    task, ws, base = _prepared(tmp_path, setup=["echo made-by-setup > setup_file.txt"])
    (ws / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (ws / "data.bin").write_bytes(bytes(reversed(range(256))))
    (ws / "old_name.py").rename(ws / "new_name.py")
    (ws / "sub").mkdir()
    (ws / "sub" / "new.txt").write_text("new\n")
    (ws / "noise.log").write_text("ignored by the workspace's .gitignore\n")
    made = agent_patch(ws, base)
    assert made.error is None and made.files == 5 and made.size == len(made.patch)
    text = made.patch.decode()
    assert "setup_file.txt" not in text  # setup's work is part of the starting point, not the agent's
    assert "noise.log" not in text and "GIT binary patch" in text
    assert "+    return a + b" in text and "deleted file mode" in text
    assert _tree(_applied(task, tmp_path, made.patch)) == _tree(ws)


def test_no_change_is_an_empty_patch(tmp_path: Path) -> None:
    _, ws, base = _prepared(tmp_path, setup=["echo x > setup_file.txt"])
    made = agent_patch(ws, base)
    assert (made.patch, made.files, made.size, made.error) == (b"", 0, 0, None)


def test_nothing_in_the_agents_git_folder_runs_or_counts(tmp_path: Path) -> None:
    task, ws, base = _prepared(tmp_path)
    marker = tmp_path / "ran"
    # A filter driver, an external diff, a textconv and hooks, all of which would run programs on the host if
    # the workspace's .git were read; a staged file and a commit that would hide the agent's change from
    # `git diff HEAD` in the workspace's own repository.
    with (ws / ".git" / "config").open("a") as cfg:
        cfg.write(f'[filter "x"]\n\tclean = touch {marker}\n\tsmudge = touch {marker}\n'
                  f'[diff]\n\texternal = touch {marker}\n[diff "t"]\n\ttextconv = touch {marker}\n')
    (ws / ".gitattributes").write_text("* filter=x diff=t\n")
    hook = ws / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (ws / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "filter.x.clean=cat", "add", "-A"], cwd=ws, check=True)
    subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "filter.x.clean=cat", "commit", "-qm", "hide"],
                   cwd=ws, check=True)
    made = agent_patch(ws, base)
    assert not marker.exists()
    assert made.error is None and "+    return a + b" in made.patch.decode() and ".gitattributes" in made.patch.decode()
    _applied(task, tmp_path, made.patch)


def test_a_deleted_git_folder_or_an_oversized_patch_is_reported_not_kept(tmp_path: Path) -> None:
    _, ws, base = _prepared(tmp_path)
    (ws / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    big = agent_patch(ws, base, max_bytes=100)
    assert big.patch is None and big.files == 1 and big.size > 100 and "over the 100-byte limit" in big.error
    shutil.rmtree(ws / ".git")  # the base's objects went with it: the agent spoilt its own patch, nothing else
    gone = agent_patch(ws, base)
    assert gone.patch is None and "could not be made" in gone.error


@pytest.mark.parametrize("setup", [[], ["rm calc.py"]])
def test_snapshot_is_taken_before_the_agent_and_is_outside_the_workspace(tmp_path: Path, setup: list[str]) -> None:
    _, ws, base = _prepared(tmp_path, setup)
    assert not base.is_relative_to(ws) and (base / "alight-base").is_file()
    assert not (ws / ".git" / "alight-base").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ws, capture_output=True, text=True, check=True)
    assert status.stdout == (" D calc.py\n" if setup else "")  # the agent's own `git status` is as before
