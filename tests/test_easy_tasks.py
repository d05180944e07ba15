"""examples/easy/ (the learning benchmark's tasks): every task starts unsolved and its reference solution
(metadata.solution, never shown to the agent) scores 1.0 through the product's own workspace, reveal and reward
steps, sandboxed; partial work earns partial credit. The held-out set shares no id with the train set and holds
no template twin of a train task (the same prompt with other names or numbers)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from difflib import SequenceMatcher
from pathlib import Path

import pytest

from agentlightning_cli.reward import run_reward
from agentlightning_cli.tasks import load_tasks
from agentlightning_cli.tasks.workspace import prepare_workspace, reveal_hidden_files

EASY = Path(__file__).resolve().parents[1] / "examples" / "easy"
TASKS = [t for name in ("train.jsonl", "heldout.jsonl") for t in load_tasks(EASY / name)]


TRAIN, HELDOUT = (load_tasks(EASY / name) for name in ("train.jsonl", "heldout.jsonl"))
# Two prompts whose shapes (below) match this closely are one template. Measured: seven of the eight retired
# held-out tasks (create-note, rename-draft, ...: train tasks with other names) scored 0.91-1.0 against a train
# task; the eighth, fix-first-n (0.78), an off-by-one fix like fix-count-to in other words, is past what a word
# check sees. The current held-out tasks score at most 0.76.
TWIN_RATIO = 0.85


def test_the_suite_is_split_into_16_train_and_at_least_24_held_out_tasks_with_distinct_ids() -> None:
    assert len(TRAIN) == 16 and len(HELDOUT) >= 24
    assert len({t.id for t in TASKS}) == len(TASKS)
    assert not {t.id for t in HELDOUT} & {t.id for t in TRAIN}


def _names(task) -> set[str]:
    """The words a task's own names and values are made of: its checks' paths and contents, the string literals
    and imported names of its python checks, and the file names of its setup and solution."""
    checks = json.loads(shlex.split(task.reward)[2])  # python3 check.py '<spec>'
    found: list[str] = []
    for check in checks:
        for key, value in check.items():
            if key == "python":
                found += re.findall(r"'([^']*)'", value) + re.findall(r"\b(?:from|import)\s+(\w+)", value)
                found += re.findall(r"from\s+\w+\s+import\s+(\w+)", value)
            else:
                found.append(value)
    for line in [*task.setup, task.metadata["solution"]]:
        found += re.findall(r"[\w/-]+\.[a-z]+", line) + re.findall(r">\s*(\S+)", line)
        found += re.findall(r"mkdir\s+(\S+)", line)
    return {w for s in found for w in re.findall(r"[a-z0-9_]+", s.lower())}


def shape(task) -> list[str]:
    """The prompt with the task's own names and every number replaced by X: what is left is its template."""
    names = _names(task)
    tokens = re.findall(r"[a-z0-9_]+|[^\sa-z0-9_]", task.prompt.lower())
    return ["X" if t in names or any(c.isdigit() for c in t) else t for t in tokens]


def test_no_held_out_task_is_a_train_task_with_other_names_or_numbers() -> None:
    twins = {(h.id, t.id): round(ratio, 2) for h in HELDOUT for t in TRAIN
             if (ratio := SequenceMatcher(None, shape(h), shape(t)).ratio()) >= TWIN_RATIO}
    assert not twins, f"held-out tasks that are train tasks with other names (held-out, train): ratio {twins}"


def test_the_twin_check_catches_a_renamed_train_task() -> None:
    """The retired held-out task rename-draft: rename-old with other names, the same template."""
    rename = next(t for t in TRAIN if t.id == "rename-old")
    twin = rename.model_copy(update={
        "id": "rename-draft", "prompt": "Rename the file draft.md to final.md.",
        "setup": ["printf %s 'text\n' > draft.md"],
        "reward": rename.reward.replace("old.txt", "draft.md").replace("new.txt", "final.md"),
        "metadata": {"solution": "mv draft.md final.md"}})
    assert shape(twin) == shape(rename) == ["rename", "the", "file", "X", ".", "X", "to", "X", ".", "X", "."]


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
