"""SWE-bench reveal: the base test files come from a source the agent never had, not from the workspace's .git
(which the agent controlled: replace refs, rewritten object files)."""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

import pytest

from agentlightning_cli.tasks import load_tasks, prepare_workspace, reveal_hidden_files

EVIL = b"def test_nothing():\n    pass\n"


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=stdin, check=True, capture_output=True).stdout.decode().strip()


def tamper(ws: Path, base: str, how: str) -> None:
    """What an agent can do to the workspace's own git: swap the base test file's blob for another."""
    blob = git(ws, "rev-parse", f"{base}:tests/test_calc.py")
    if how in ("replace", "both"):
        evil = git(ws, "hash-object", "-w", "--stdin", stdin=EVIL)
        git(ws, "replace", blob, evil)
    loose = ws / ".git" / "objects" / blob[:2] / blob[2:]
    if how == "rewrite" or (how == "both" and loose.is_file()):  # a local repository's workspace has one pack
        assert loose.is_file(), "the base blob is packed; the test would prove nothing"
        loose.chmod(0o644)
        loose.write_bytes(zlib.compress(b"blob %d\0" % len(EVIL) + EVIL))
    # The attack is real: the workspace's git now serves the agent's file as the base version.
    assert git(ws, "cat-file", "blob", f"{base}:tests/test_calc.py").encode() + b"\n" == EVIL
    (ws / "tests" / "test_calc.py").write_bytes(EVIL)


def _mirror(tmp_path: Path):
    import test_tasks_swebench

    return test_tasks_swebench.mirror.__wrapped__(tmp_path)


@pytest.mark.parametrize("source, how", [("mirror", "both"), ("url", "replace"), ("url", "rewrite")])
def test_reveal_writes_the_true_base_test_file_whatever_the_agent_did_to_git(tmp_path: Path, source: str, how: str) -> None:
    from test_tasks_swebench import NEW_TEST, TESTS, write_set

    mirror_dir, line = _mirror(tmp_path)
    if source == "url":  # no mirror: the workspace was fetched from a URL
        line = {**line, "repo": f"file://{mirror_dir / 'acme__calc'}"}
        (task,) = load_tasks(write_set(tmp_path, line))
        assert task.repo_kind == "url"
    else:
        (task,) = load_tasks(write_set(tmp_path, line), swebench_mirror=mirror_dir)
        assert task.repo_kind == "git-dir"
    ws = prepare_workspace(task, tmp_path / "ws", sandbox="none")
    tamper(ws, task.base_commit, how)
    reveal_hidden_files(task, ws)
    assert (ws / "tests" / "test_calc.py").read_text() == TESTS + NEW_TEST  # true base + the test_patch
