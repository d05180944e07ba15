"""Harbor trials in real podman containers (tasks/harbor_run.py), on the examples' images (built once, cached by
content hash): the oracle (solution/solve.sh) scores 1 on every example and an agent that does nothing scores 0;
the verifier runs in the agent's container after it, and what an agent could do to grade itself (a reward file of
its own, a background process racing test.sh) is a `reward_error` or undone; an empty reward file and a test.sh
past its timeout are `reward_error` with the verifier's log; `alight tasks check --oracle` reports all of it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.sandbox.container import runtime_args
from agentlightning_cli.tasks import check_task_file
from agentlightning_cli.tasks.harbor_image import task_images
from agentlightning_cli.tasks.harbor_reward import RewardFileError
from agentlightning_cli.tasks.harbor_run import TaskContainer, verify
from tests import container_support as cs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "harbor"


@pytest.fixture(scope="module")
def examples():
    exe = cs.podman()
    cs.image()
    tasks = {t.id: t for t in check_task_file(EXAMPLES).tasks}
    images = task_images(exe, (), list(tasks.values()), log=lambda line: None)
    return exe, runtime_args(exe, cs.IMAGE), tasks, images


def alight(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlightning_cli", *args], capture_output=True, text=True,
                          timeout=900)


def test_oracle_scores_1_on_every_example_through_tasks_check() -> None:
    out = alight("tasks", "check", str(EXAMPLES), "--oracle", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r["id"]: r for r in json.loads(out.stdout)["oracle"]}
    assert sorted(rows) == sorted(t.id for t in check_task_file(EXAMPLES).tasks)
    assert all(r["reward"] == 1 and r["error"] is None for r in rows.values()), rows
    assert rows["alight-examples/word-report"]["detail"]["rewards"] == {"reward": 1.0, "valid_json": 1.0}
    # hello-file asks for storage_mb = 2048: enforced only on XFS-backed overlay; anywhere else it is said.
    notes = rows["alight-examples/hello-file"]["notes"]
    backing = subprocess.run([cs.podman(), "info", "--format", "{{.Store.GraphStatus}}"], capture_output=True,
                             text=True).stdout
    assert notes == [] if "xfs" in backing.lower() else "storage_mb = 2048 not enforced" in notes[0], notes


def test_an_agent_that_does_nothing_scores_0(examples, tmp_path: Path) -> None:
    exe, flags, tasks, images = examples
    for task in tasks.values():
        with TaskContainer(exe, flags, task, images[task.id]) as box:
            verdict = verify(box, tmp_path / task.id.replace("/", "__"))
        assert verdict.reward == 0.0, task.id
        if task.id == "alight-examples/fix-median":  # pytest ran offline in the image and failed the bug
            assert "1 failed" in (tmp_path / "alight-examples__fix-median" / "test-stdout.txt").read_text()


def test_an_agent_that_writes_its_own_reward_is_a_reward_error(examples, tmp_path: Path) -> None:
    exe, flags, tasks, images = examples
    task = tasks["alight-examples/hello-file"]
    with TaskContainer(exe, flags, task, images[task.id]) as box:
        box.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt", timeout_s=60)
        with pytest.raises(RewardFileError, match=r"/logs/verifier held reward.txt before the verifier ran"):
            verify(box, tmp_path / "v")


def test_a_background_process_left_by_the_agent_cannot_race_the_verifier(examples, tmp_path: Path) -> None:
    """It would write the answer the moment /tests appears (after the agent ended, before test.sh reads it): the
    verifier kills everything the agent left first, so the answer is never written and the score is 0."""
    exe, flags, tasks, images = examples
    task = tasks["alight-examples/shout"]
    with TaskContainer(exe, flags, task, images[task.id]) as box:
        racer = "until [ -d /tests ]; do sleep 0.02; done; echo 'HARBOR TASKS RUN HERE' > /tmp/shout.txt"
        box.exec(f"nohup bash -c \"{racer}\" >/dev/null 2>&1 &", timeout_s=60)
        procs = "for p in /proc/[0-9]*; do { tr '\\0' ' ' < $p/cmdline; } 2>/dev/null; echo; done"  # no pgrep here
        assert int(box.exec(f"{procs} | grep -c 'until \\[ -d /tests'", timeout_s=60).output) >= 1  # it runs
        verdict = verify(box, tmp_path / "v")
        assert verdict.reward == 0.0
        assert box.exec("cat /tmp/shout.txt 2>/dev/null || echo none", timeout_s=60).output.strip() == "none"


def broken_set(root: Path) -> Path:
    """hello-file three times over: its test.sh writing an empty reward, one past its verifier timeout, and one
    without a solution."""
    for name, test, solution in (("empty", ": > /logs/verifier/reward.txt\necho checked hello.txt", True),
                                 ("slow", "echo started; sleep 60", True),
                                 ("unsolved", "echo 1 > /logs/verifier/reward.txt", False)):
        d = root / name
        shutil.copytree(EXAMPLES / "hello-file", d)
        toml = (d / "task.toml").read_text().replace("alight-examples/hello-file", f"org/{name}")
        (d / "task.toml").write_text(toml.replace("timeout_sec = 60.0", "timeout_sec = 3.0"))
        (d / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test}\n")
        if not solution:
            shutil.rmtree(d / "solution")
    return root


def test_empty_reward_and_verifier_timeout_are_reward_errors_with_the_log(tmp_path: Path) -> None:
    root = broken_set(tmp_path / "set")
    out = alight("tasks", "check", str(root), "--oracle", "--json")
    assert out.returncode == 1, out.stderr[-3000:]
    rows = {r["id"]: r for r in json.loads(out.stdout)["oracle"]}
    assert sorted(rows) == ["org/empty", "org/slow"]  # org/unsolved has no solution: not run
    assert rows["org/empty"]["reward"] is None and "reward file is empty" in rows["org/empty"]["error"]
    assert "checked hello.txt" in rows["org/empty"]["log"]
    assert "ran past [verifier].timeout_sec (3s)" in rows["org/slow"]["error"]
    assert "started" in rows["org/slow"]["log"]
    text = alight("tasks", "check", str(root), "--oracle").stdout
    assert "org/empty: reward_error: reward file is empty" in text
    assert "no solution/solve.sh, not checked: org/unsolved" in text
