"""Aider's own files stay out of the graded patch: only the agent's edit is in it.

The real Aider in a workspace that is a git repository, as `alight run` makes one (tasks/workspace.py), the patch
made as a graded episode's is (tasks/patch.py). Left to itself Aider appends `.aider*` to .gitignore, commits its
edits, writes its chat and input history into the repository and keeps its repo map's tags cache there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness_support import installed, scripted

from agentlightning_cli.testing.proxy_env import SmokeEnvironment
from agentlightning_cli.harness import recipe as recipes
from agentlightning_cli.harness.outcome import judge
from agentlightning_cli.scripted.harness_scripts import OUT_FILE, OUT_TEXT
from agentlightning_cli.tasks.patch import agent_patch, snapshot_base
from agentlightning_cli.tasks.workspace import GIT_IDENTITY

pytestmark = pytest.mark.harness


def _git(workspace: Path, *args: str) -> str:
    return subprocess.run(["git", *GIT_IDENTITY, *args], cwd=workspace, check=True, capture_output=True,
                          text=True).stdout


async def test_aider_patch_holds_only_the_agents_edit(tmp_path: Path) -> None:
    recipe, inst = installed("aider")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # A Python file Aider would map (the repo map's cache is made when there is something to map).
    (workspace / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    _git(workspace, "init", "-q")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-q", "-m", "start")
    head = _git(workspace, "rev-parse", "HEAD")
    base = tmp_path / "base.git"
    snapshot_base(workspace, base)
    async with SmokeEnvironment(tmp_path / "run", scripted(recipe)) as env:
        spec = env.new_episode(recipe, workspace, f"Create {OUT_FILE} containing: {OUT_TEXT}", timeout_s=240)
        outcome = await env.run(recipe, inst, spec)
    assert outcome.status == "finished", (outcome.reason, Path(outcome.stdout_path).read_text()[-2000:])
    patch = agent_patch(workspace, base)
    assert patch.error is None and patch.files == 1, patch.patch.decode(errors="replace")[:3000]
    assert patch.patch.startswith(f"diff --git a/{OUT_FILE} b/{OUT_FILE}\n".encode())
    assert f"+{OUT_TEXT}\n".encode() in patch.patch
    assert _git(workspace, "rev-parse", "HEAD") == head  # no commit of Aider's own
    status = _git(workspace, "status", "--porcelain", "--untracked-files=all", "--ignored").splitlines()
    assert [line[3:] for line in status] == [OUT_FILE], status  # Aider `git add`s what it creates: nothing else
    # Its histories and event log are in the episode's private folder instead.
    episode_dir = tmp_path / "run" / "harness" / spec.episode_id
    assert (episode_dir / "chat.history.md").is_file() and (episode_dir / "aider-events.jsonl").is_file()


def _event(name: str, **properties: object) -> dict:
    return {"event": name, "properties": properties, "user_id": "u", "time": 0}


def test_aider_outcome_is_read_from_its_event_log() -> None:
    """Aider exits 0 whatever happened: its event log's normal end is the finish, an exception while sending is a
    harness error, and a log that stops early (a crash, a kill) is one too."""
    recipe = recipes.load("aider")
    start = [_event("launched"), _event("message_send_starting")]
    done = _event("exit", reason="Completed --message-file")
    assert judge(recipe, {}, [*start, _event("message_send", prompt_tokens=10), done]) == (None, False)
    # A reply cut at max_tokens is discarded by Aider (no message_send), but the run ended normally: the policy's.
    assert judge(recipe, {}, [*start, done]) == (None, False)
    error, _ = judge(recipe, {}, [*start, _event("message_send_exception", exception="boom"), done])
    assert error == "aider: boom"
    error, _ = judge(recipe, {}, start)
    assert error is not None and "did not finish" in error and "message_send_starting" in error, error
