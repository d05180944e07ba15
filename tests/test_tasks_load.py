"""Task-set validation: every bad input is reported with file, line and field, and all of them at once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks import check_task_file, load_tasks
from agentlightning_cli.tasks.model import Problem

GOOD = {"id": "t1", "prompt": "Fix the bug.", "reward": "true"}


def write_lines(path: Path, *objs: object) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs), encoding="utf-8")
    return path


def the_problem(path: Path, line: int | None, field: str | None, contains: str) -> Problem:
    """The one problem at (line, field); its text must name the file, the line and the field."""
    report = check_task_file(path)
    assert not report.ok
    found = [p for p in report.problems if p.line == line and p.field == field]
    assert found, f"no problem at line {line} field {field}: {[str(p) for p in report.problems]}"
    text = str(found[0])
    assert str(path) in text
    if line is not None:
        assert f"{path}:{line}:" in text
    if field is not None:
        assert f"field '{field}'" in text
    assert contains in text, text
    return found[0]


def test_valid_file_loads_with_resolved_paths(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "hidden").mkdir()
    f = write_lines(
        tmp_path / "t.jsonl",
        {**GOOD, "repo": "repo", "hidden_files": "hidden", "setup": ["echo hi"], "timeout_s": 30, "metadata": {"a": 1}},
        {"id": "t2", "prompt": "Other.", "reward": "exit 1", "repo": "https://example.invalid/x.git", "base_commit": "main"},
    )
    tasks = load_tasks(f)
    assert [t.id for t in tasks] == ["t1", "t2"]
    assert tasks[0].repo == str(tmp_path / "repo") and tasks[0].repo_kind == "dir"
    assert tasks[0].hidden_files == tmp_path / "hidden"
    assert tasks[0].timeout_s == 30.0 and tasks[0].metadata == {"a": 1} and tasks[0].source_line == 1
    assert tasks[1].repo_kind == "url" and tasks[1].kind == "own"


def test_not_an_object(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", GOOD, "[1, 2]", '"text"')
    the_problem(f, 2, None, "expected a JSON object, got an array")
    the_problem(f, 3, None, "got a string")


def test_invalid_json_names_column(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", '{"id": "a", "prompt": }')
    the_problem(f, 1, None, "not valid JSON")


def test_missing_and_empty_prompt(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", {"id": "a", "reward": "true"}, {"id": "b", "prompt": "  \n", "reward": "true"})
    the_problem(f, 1, "prompt", "missing")
    the_problem(f, 2, "prompt", "must not be empty")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("id", 7, "expected a string, got a number"),
        ("prompt", ["x"], "expected a string, got an array"),
        ("setup", "pip install -e .", "expected an array, got a string"),
        ("metadata", [], "expected an object, got an array"),
        ("timeout_s", "60", "expected a number, got a string"),
        ("timeout_s", True, "expected a number, got a boolean"),
        ("reward", None, "expected a string, got null"),
        ("id", "has space", "not a usable id"),
        ("base_commit", "a b", "not a commit"),
    ],
)
def test_wrong_types(tmp_path: Path, field: str, value: object, expected: str) -> None:
    f = write_lines(tmp_path / "t.jsonl", {**GOOD, field: value})
    the_problem(f, 1, field, expected)


def test_wrong_type_inside_a_list_names_the_index(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", {**GOOD, "setup": ["ok", 3]})
    the_problem(f, 1, "setup[1]", "expected a string, got a number")


def test_negative_and_zero_timeout(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", {**GOOD, "timeout_s": -5}, {**GOOD, "id": "t2", "timeout_s": 0})
    the_problem(f, 1, "timeout_s", "greater than 0, got -5")
    the_problem(f, 2, "timeout_s", "greater than 0")


def test_duplicate_ids_name_the_first_line(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", GOOD, {**GOOD, "id": "other"}, GOOD)
    the_problem(f, 3, "id", "duplicate id 't1' (first used on line 1)")


def test_unknown_fields_are_named(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", {**GOOD, "promt": "typo", "extra": 1})
    the_problem(f, 1, "promt", "unknown field")
    the_problem(f, 1, "extra", "known fields: id, prompt")


def test_bad_utf8_names_line_and_byte_offset(tmp_path: Path) -> None:
    first = json.dumps(GOOD).encode() + b"\n"
    second = b'{"id": "b", "prompt": "caf\xe9", "reward": "true"}\n'
    f = tmp_path / "t.jsonl"
    f.write_bytes(first + second)
    offset = len(first) + second.index(b"\xe9")
    the_problem(f, 2, None, f"not valid UTF-8: byte 0xe9 at byte offset {offset} of the file")


def test_utf8_bom_is_accepted_with_a_warning(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n")
    report = check_task_file(f)
    assert report.ok and [t.id for t in report.tasks] == ["t1"]
    assert len(report.warnings) == 1 and "BOM" in str(report.warnings[0]) and f"{f}:1:" in str(report.warnings[0])


def test_utf16_file_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(json.dumps(GOOD).encode("utf-16"))
    the_problem(f, 1, None, "UTF-16")


def test_crlf_and_blank_lines_are_accepted(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    body = json.dumps(GOOD) + "\r\n\r\n   \r\n" + json.dumps({**GOOD, "id": "t2"}) + "\r\n"
    f.write_bytes(body.encode())
    report = check_task_file(f)
    assert report.ok, report.problems
    assert [(t.id, t.source_line) for t in report.tasks] == [("t1", 1), ("t2", 4)]
    assert report.tasks[0].prompt == "Fix the bug."


@pytest.mark.parametrize(("content", "expected"), [(b"", "file is empty"), (b"\n  \n\r\n", "only blank lines")])
def test_empty_file(tmp_path: Path, content: bytes, expected: str) -> None:
    f = tmp_path / "t.jsonl"
    f.write_bytes(content)
    problem = the_problem(f, None, None, expected)
    assert problem.line is None


def test_missing_file_and_folder(tmp_path: Path) -> None:
    the_problem(tmp_path / "nope.jsonl", None, None, "does not exist")
    the_problem(tmp_path, None, None, "is a folder")


def test_repo_path_that_does_not_exist_is_resolved(tmp_path: Path) -> None:
    (tmp_path / "sets").mkdir()
    f = write_lines(tmp_path / "sets" / "t.jsonl", {**GOOD, "repo": "../repos/missing"})
    the_problem(f, 1, "repo", f"repo path does not exist: {tmp_path / 'repos' / 'missing'}")


def test_hidden_files_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    f = write_lines(tmp_path / "t.jsonl", {**GOOD, "hidden_files": "nothere"}, {**GOOD, "id": "t2", "hidden_files": "file.txt"})
    the_problem(f, 1, "hidden_files", f"does not exist: {tmp_path / 'nothere'}")
    the_problem(f, 2, "hidden_files", "is not a folder")


def test_base_commit_checks(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    repo = tmp_path / "gitrepo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"], cwd=repo, check=True
    )
    f = write_lines(
        tmp_path / "t.jsonl",
        {**GOOD, "base_commit": "abc123"},
        {**GOOD, "id": "t2", "repo": "plain", "base_commit": "abc123"},
        {**GOOD, "id": "t3", "repo": "gitrepo", "base_commit": "deadbeefdeadbeef"},
        {**GOOD, "id": "t4", "repo": "gitrepo", "base_commit": "HEAD"},
    )
    the_problem(f, 1, "base_commit", "given without a repo")
    the_problem(f, 2, "base_commit", "plain folder, not a git repository")
    the_problem(f, 3, "base_commit", f"commit 'deadbeefdeadbeef' missing in {repo}")
    report = check_task_file(f)
    assert [t.id for t in report.tasks] == ["t4"] and report.tasks[0].repo_kind == "git-dir"


def test_all_problems_are_collected_and_raised_together(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", {"id": "a"}, "[]", GOOD, {**GOOD, "timeout_s": -1, "x": 2})
    report = check_task_file(f)
    assert {(p.line, p.field) for p in report.problems} == {
        (1, "prompt"), (1, "reward"), (2, None), (4, "timeout_s"), (4, "x"), (4, "id"),
    }  # fmt: skip
    with pytest.raises(AlightError) as info:
        load_tasks(f)
    message = info.value.message
    assert "6 problems" in message
    for p in report.problems:
        assert str(p) in message


def test_json_report_shape(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", GOOD, {"id": "b"})
    data = check_task_file(f).to_json()
    assert set(data) == {"file", "ok", "tasks", "problems", "warnings", "summary"}
    assert data["file"] == str(f) and data["ok"] is False and data["tasks"] == 1
    assert data["problems"][0] == {"file": str(f), "line": 2, "field": "prompt", "message": "missing (required)"}
    assert data["summary"]["kinds"] == {"own": 1} and data["summary"]["reward_kinds"] == {"command": 1}
    json.dumps(data)


def test_repeated_key_in_one_line(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", '{"id": "a", "prompt": "p", "reward": "true", "prompt": "q"}')
    the_problem(f, 1, "prompt", "appears more than once")


def test_hidden_files_inside_the_repo_would_leak(tmp_path: Path) -> None:
    (tmp_path / "repo" / "hidden").mkdir(parents=True)
    f = write_lines(tmp_path / "t.jsonl", {**GOOD, "repo": "repo", "hidden_files": "repo/hidden"})
    the_problem(f, 1, "hidden_files", "is inside the repo")


def test_task_file_inside_the_repo_warns(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", {**GOOD, "repo": "."})
    report = check_task_file(f)
    assert report.ok and "agent can read every prompt" in str(report.warnings[0])
    assert str(report.warnings[0]).startswith(f"{f}:1: field 'repo': ")
