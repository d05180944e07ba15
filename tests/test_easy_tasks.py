"""examples/easy/ (the learning benchmark's tasks): every task starts unsolved and its reference solution
(metadata.solution, never shown to the agent) scores 1.0 through the product's own workspace, reveal and reward
steps, sandboxed; partial work earns partial credit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentlightning_cli.reward import run_reward
from agentlightning_cli.tasks import load_tasks
from agentlightning_cli.tasks.workspace import prepare_workspace, reveal_hidden_files

EASY = Path(__file__).resolve().parents[1] / "examples" / "easy"
TASKS = [t for name in ("train.jsonl", "heldout.jsonl") for t in load_tasks(EASY / name)]


def test_the_suite_is_split_into_16_train_and_8_held_out_tasks_with_distinct_ids() -> None:
    train, heldout = (load_tasks(EASY / name) for name in ("train.jsonl", "heldout.jsonl"))
    assert len(train) == 16 and len(heldout) == 8
    assert len({t.id for t in TASKS}) == 24


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_unsolved_scores_below_one_and_the_reference_solution_scores_one(task, tmp_path: Path) -> None:
    before = tmp_path / "before"
    prepare_workspace(task, before)
    reveal_hidden_files(task, before)
    assert run_reward(task, before).reward < 1.0
    after = tmp_path / "after"
    prepare_workspace(task, after)
    subprocess.run(["bash", "-c", task.metadata["solution"]], cwd=after, check=True)
    reveal_hidden_files(task, after)
    result = run_reward(task, after)
    assert result.reward == 1.0, result


def test_partial_work_earns_partial_credit(tmp_path: Path) -> None:
    task = next(t for t in TASKS if t.id == "create-greeting")
    ws = tmp_path / "ws"
    prepare_workspace(task, ws)
    (ws / "greeting.txt").write_text("hello\n")  # the file, but the wrong content
    reveal_hidden_files(task, ws)
    result = run_reward(task, ws)
    assert result.reward == 0.5 and result.detail["failed"] == ['{"file": "greeting.txt", "content": "hi"}'], result
