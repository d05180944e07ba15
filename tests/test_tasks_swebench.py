"""SWE-bench lines as published: parsing, a local mirror, hidden test_patch, and the FAIL_TO_PASS/PASS_TO_PASS reward."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.reward import run_reward
from agentlightning_cli.tasks import check_task_file, load_tasks, prepare_workspace, reveal_hidden_files

DATA = Path(__file__).parent / "data" / "tasks"

BUGGY = "def add(a, b):\n    if b < 0:\n        return a\n    return a + b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = (
    "import pytest\n\nfrom calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "@pytest.mark.parametrize('a,b', [(1, 2), (3, 4)])\ndef test_param(a, b):\n    assert add(a, b) == a + b\n"
)
NEW_TEST = "\n\ndef test_add_negative():\n    assert add(5, -2) == 3\n"
# Setup the way a real line would adapt SWE-bench: give the workspace an interpreter that has pytest.
VENV_SETUP = f"mkdir -p .venv/bin && printf '#!/bin/sh\\nexec {sys.executable} \"$@\"\\n' > .venv/bin/python && chmod +x .venv/bin/python"


def git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def mirror(tmp_path: Path) -> tuple[Path, dict]:
    return make_mirror(tmp_path)


def make_mirror(tmp_path: Path) -> tuple[Path, dict]:
    """A mirror folder holding acme__calc: base commit (bug), then the future fix commit with the new test."""
    repo = tmp_path / "mirror" / "acme__calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    git(repo, "init", "-q")
    (repo / "calc" / "__init__.py").write_text(BUGGY)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "calc" / "__init__.py").write_text(FIXED)
    (repo / "tests" / "test_calc.py").write_text(TESTS + NEW_TEST)
    git(repo, "commit", "-qam", "fix negative numbers")
    git(repo, "tag", "v1.1")
    fix = git(repo, "rev-parse", "HEAD")
    line = json.loads((DATA / "swebench_line.json").read_text())
    line.update(
        base_commit=base,
        environment_setup_commit=base,
        patch=git(repo, "diff", base, fix, "--", "calc") + "\n",
        test_patch=git(repo, "diff", base, fix, "--", "tests") + "\n",
    )
    return tmp_path / "mirror", {**line, "_fix": fix}


def write_set(tmp_path: Path, *lines: dict) -> Path:
    f = tmp_path / "swe.jsonl"
    f.write_text("".join(json.dumps({k: v for k, v in x.items() if not k.startswith("_")}) + "\n" for x in lines))
    return f


def test_published_line_parses(tmp_path: Path, mirror: tuple[Path, dict]) -> None:
    mirror_dir, line = mirror
    (task,) = load_tasks(write_set(tmp_path, line), swebench_mirror=mirror_dir)
    assert task.kind == "swebench" and task.id == "acme__calc-42"
    assert task.prompt == line["problem_statement"]
    assert task.repo == str(mirror_dir / "acme__calc") and task.repo_kind == "git-dir"
    assert task.swebench.fail_to_pass == ["tests/test_calc.py::test_add_negative"]
    assert task.swebench.pass_to_pass[1] == "tests/test_calc.py::test_param[1-2]"
    assert task.reward_kind == "swebench-tests" and task.has_hidden
    # The gold patch is kept for analysis but never shown: not in the prompt, a dump or a repr.
    assert task.swebench.gold_patch == line["patch"]
    for shown in (task.prompt, json.dumps(task.model_dump(mode="json")), repr(task)):
        assert line["patch"] not in shown and line["test_patch"] not in shown


def test_lists_instead_of_json_text_are_accepted(tmp_path: Path, mirror: tuple[Path, dict]) -> None:
    mirror_dir, line = mirror
    line = {**line, "FAIL_TO_PASS": ["tests/test_calc.py::test_add_negative"], "PASS_TO_PASS": []}
    (task,) = load_tasks(write_set(tmp_path, line), swebench_mirror=mirror_dir)
    assert task.swebench.pass_to_pass == []


def test_without_a_mirror_the_repo_is_github(tmp_path: Path, mirror: tuple[Path, dict]) -> None:
    _, line = mirror
    (task,) = load_tasks(write_set(tmp_path, line))
    assert task.repo == "https://github.com/acme/calc.git" and task.repo_kind == "url"


def test_swebench_problems_name_line_and_field(tmp_path: Path, mirror: tuple[Path, dict]) -> None:
    mirror_dir, line = mirror
    f = write_set(
        tmp_path,
        {**line, "FAIL_TO_PASS": "[not json", "prompt": "x"},
        {**line, "instance_id": "acme__calc-43", "repo": "other/project"},
        {**line, "instance_id": "acme__calc-44", "problem_statement": ""},
        {**line, "instance_id": "acme__calc-45", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": []},
        {**line, "instance_id": "acme__calc-46", "base_commit": "0" * 40},
    )
    report = check_task_file(f, swebench_mirror=mirror_dir)
    got = {(p.line, p.field): str(p) for p in report.problems}
    assert "not a JSON-encoded list of test ids" in got[(1, "FAIL_TO_PASS")]
    assert "unknown field for a SWE-bench line" in got[(1, "prompt")]
    assert f"no git repository for other/project in the mirror; looked for {mirror_dir / 'other__project'}" in got[(2, "repo")]
    assert "must not be empty" in got[(3, "problem_statement")]
    assert "both empty" in got[(4, "FAIL_TO_PASS")]
    assert "missing in" in got[(5, "base_commit")]
    for (lineno, field), text in got.items():
        assert text.startswith(f"{f}:{lineno}: field '{field}': ")
    assert len(report.tasks) == 0


def test_workspace_has_no_future_commits_and_reward_follows_the_tests(tmp_path: Path, mirror: tuple[Path, dict]) -> None:
    mirror_dir, line = mirror
    (task,) = load_tasks(write_set(tmp_path, {**line, "setup": [VENV_SETUP]}), swebench_mirror=mirror_dir)
    ws = prepare_workspace(task, tmp_path / "ws")
    assert git(ws, "rev-parse", "HEAD") == line["base_commit"]
    # The fix commit and the tag pointing at it must not be reachable from the workspace.
    assert subprocess.run(["git", "cat-file", "-e", line["_fix"]], cwd=ws).returncode != 0
    assert git(ws, "tag") == ""
    assert "test_add_negative" not in (ws / "tests" / "test_calc.py").read_text()

    # An agent that does not fix the bug, and tries to delete the test it might fail.
    (ws / "tests" / "test_calc.py").write_text("")
    reveal_hidden_files(task, ws)
    assert "test_add_negative" in (ws / "tests" / "test_calc.py").read_text()
    result = run_reward(task, ws, timeout_s=120)
    assert result.reward == 0.0, result
    assert result.detail["fail_to_pass"]["failed"] == [{"test": "tests/test_calc.py::test_add_negative", "outcome": "failed"}]
    assert result.detail["pass_to_pass"] == {"total": 3, "passed": 3, "failed": [], "failed_not_listed": 0}


def test_fixed_workspace_scores_one(tmp_path: Path, mirror: tuple[Path, dict]) -> None:
    mirror_dir, line = mirror
    line = {**line, "PASS_TO_PASS": json.loads(line["PASS_TO_PASS"]) + ["tests/test_gone.py::test_x"]}
    (task,) = load_tasks(write_set(tmp_path, {**line, "setup": [VENV_SETUP]}), swebench_mirror=mirror_dir)
    ws = prepare_workspace(task, tmp_path / "ws")
    (ws / "calc" / "__init__.py").write_text(FIXED)
    reveal_hidden_files(task, ws)
    result = run_reward(task, ws, timeout_s=120)
    # One listed test does not exist: it never ran, so it counts as failed.
    assert result.reward == 0.0
    assert result.detail["pass_to_pass"]["failed"] == [{"test": "tests/test_gone.py::test_x", "outcome": "not run"}]
    assert result.detail["fail_to_pass"]["passed"] == 1

    (task,) = load_tasks(write_set(tmp_path, {**mirror[1], "setup": [VENV_SETUP]}), swebench_mirror=mirror_dir)
    ws2 = prepare_workspace(task, tmp_path / "ws2")
    (ws2 / "calc" / "__init__.py").write_text(FIXED)
    reveal_hidden_files(task, ws2)
    result = run_reward(task, ws2, timeout_s=120)
    assert result.reward == 1.0, result
    assert result.detail["fail_to_pass"]["passed"] == 1 and result.detail["pytest_exit_code"] == 0


def test_unreachable_url_is_a_clear_error(tmp_path: Path, mirror: tuple[Path, dict]) -> None:
    _, line = mirror
    line = {**line, "repo": f"file://{tmp_path}/no-such-repo.git"}
    (task,) = load_tasks(write_set(tmp_path, line))
    with pytest.raises(AlightError) as info:
        prepare_workspace(task, tmp_path / "ws")
    assert "acme__calc-42" in info.value.message and "cannot fetch" in info.value.message
    assert "no-such-repo.git" in info.value.message and "--swebench-mirror" in (info.value.hint or "")


def test_ids_that_are_not_pytest_node_ids_explain_themselves(tmp_path: Path) -> None:
    from agentlightning_cli.tasks.swebench_tests import run

    detail = run({"FAIL_TO_PASS": ["test_reverse (utils_tests.test_text.TestUtilsText)"], "PASS_TO_PASS": []}, tmp_path)
    assert detail["reward"] == 0.0 and detail["pytest_exit_code"] is None
    assert "not pytest node ids" in detail["error"] and "`reward` command" in detail["error"]
    assert detail["fail_to_pass"]["failed"][0]["outcome"] == "not run"


FIXER = '''open("calc/__init__.py", "w").write(FIXED)
open("notes.txt", "w").write("left by the agent\\n")
print(json.dumps({"event": "finished"}))
'''


@pytest.mark.parametrize("setup", [[], [VENV_SETUP]])
def test_run_warns_without_an_environment_and_exports_predictions(tmp_path: Path, mirror: tuple[Path, dict],
                                                                  setup: list[str]) -> None:
    """`alight run` on a SWE-bench line: without a setup that installs its project it says, before the round and in
    the summary, that rewards will not be meaningful; with one it does not. Either way each episode's patch goes
    out as a SWE-bench prediction that applies to the instance's base commit and carries the agent's fix."""
    from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM
    from tests import run_support as rs

    mirror_dir, line = mirror
    tasks = write_set(tmp_path, {**line, "setup": setup})
    agent = tmp_path / "fixer.py"
    agent.write_text(rs.CALL_MODEL_ONCE + FIXER.replace("FIXED", repr(FIXED)))
    agent.chmod(0o755)
    recipe = rs.script_recipe(tmp_path, "fixer", [str(agent), "{{ prompt_file }}"])
    out = tmp_path / "runs" / "swe"
    with FakeVLLM(FakeScript(turns=["ok"], served_models=["policy-r0"])) as fake:
        proc = rs.alight(["run", "--task-set", str(tasks), "--harness", str(recipe), "--attempts", "1",
                          "--swebench-mirror", str(mirror_dir), "--upstream", fake.url, "--out", str(out), "--json"],
                         cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    notes = json.loads(proc.stdout)["notes"]
    warned = "acme__calc-42) have no `setup` that installs their project"
    assert (warned in proc.stderr) == (not setup) and any(warned in n for n in notes) == (not setup), proc.stderr
    if setup:  # with an interpreter that has pytest, the official tests decide: the fix passes them
        assert json.loads(proc.stdout)["tasks"][0]["mean_reward"] == 1.0

    predictions = tmp_path / "preds.jsonl"
    export = rs.alight(["inspect", "export", str(out), "--format", "swebench", "--out", str(predictions),
                        "--model-name", "my-model"], cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    (pred,) = [json.loads(x) for x in predictions.read_text().splitlines()]
    assert pred["instance_id"] == "acme__calc-42" and pred["model_name_or_path"] == "my-model"
    assert "notes.txt" in pred["model_patch"] and "tests/" not in pred["model_patch"]  # test_patch came after it
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", str(mirror_dir / "acme__calc"), str(fresh)], check=True)
    git(fresh, "checkout", "-q", line["base_commit"])
    subprocess.run(["git", "apply", "-"], input=pred["model_patch"], text=True, cwd=fresh, check=True)
    assert (fresh / "calc" / "__init__.py").read_text() == FIXED
