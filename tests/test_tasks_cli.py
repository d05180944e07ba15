"""`alight tasks check`: exit codes 0 / 1 / 2 and the --json shape, as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parent.parent / "examples" / "tasks" / "tasks.jsonl"


def alight(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agentlightning_cli", *args], capture_output=True, text=True, env=dict(os.environ), timeout=120
    )


def test_valid_set_exits_0_with_a_summary() -> None:
    out = alight("tasks", "check", str(EXAMPLES))
    assert out.returncode == 0, out.stderr
    assert f"{EXAMPLES.resolve()}: ok" in out.stdout
    assert "tasks:        4" in out.stdout and "own 4" in out.stdout and "with 3, without 1" in out.stdout


def test_valid_set_json() -> None:
    out = alight("tasks", "check", str(EXAMPLES), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] is True and data["tasks"] == 4 and data["problems"] == [] and data["warnings"] == []
    assert data["summary"]["kinds"] == {"own": 4}
    assert data["summary"]["hidden_files"] == {"with": 3, "without": 1}
    assert data["summary"]["reward_kinds"] == {"command": 4}
    assert data["summary"]["repo_kinds"] == {"dir": 3, "none": 1}


def test_invalid_set_exits_1_listing_every_problem(tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"id": "a", "reward": "true"}\n[1]\n{"id": "b", "prompt": "p", "reward": "true", "timeout_s": -1}\n')
    out = alight("tasks", "check", str(f))
    assert out.returncode == 1
    assert f"error: {f}:1: field 'prompt': missing (required)" in out.stderr
    assert f"error: {f}:2: expected a JSON object, got an array" in out.stderr
    assert f"error: {f}:3: field 'timeout_s': must be greater than 0" in out.stderr
    assert "INVALID (3 problems)" in out.stdout

    out = alight("tasks", "check", str(f), "--json")
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert set(data) == {"file", "ok", "tasks", "problems", "warnings", "summary"}
    assert data["file"] == str(f) and data["ok"] is False and data["tasks"] == 0
    assert [(p["line"], p["field"]) for p in data["problems"]] == [(1, "prompt"), (2, None), (3, "timeout_s")]
    assert all(set(p) == {"file", "line", "field", "message"} for p in data["problems"])


def test_bom_warning_is_shown_but_valid(tmp_path: Path) -> None:
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "prompt": "p", "reward": "true"}).encode() + b"\r\n")
    out = alight("tasks", "check", str(f), "--json")
    assert out.returncode == 0
    assert "UTF-8 BOM" in json.loads(out.stdout)["warnings"][0]["message"]


def test_missing_file_is_invalid_and_usage_errors_exit_2(tmp_path: Path) -> None:
    out = alight("tasks", "check", str(tmp_path / "nope.jsonl"))
    assert out.returncode == 1 and "does not exist" in out.stderr
    assert alight("tasks", "check").returncode == 2
    assert alight("tasks", "check", str(EXAMPLES), "--no-such-flag").returncode == 2


def test_swebench_mirror_option(tmp_path: Path) -> None:
    f = tmp_path / "swe.jsonl"
    line = {"instance_id": "o__n-1", "problem_statement": "p", "repo": "o/n", "base_commit": "abc", "test_patch": "x",
            "FAIL_TO_PASS": "[\"t.py::t\"]", "PASS_TO_PASS": "[]"}  # fmt: skip
    f.write_text(json.dumps(line) + "\n")
    out = alight("tasks", "check", str(f), "--json", "--swebench-mirror", str(tmp_path))
    assert out.returncode == 1
    problem = json.loads(out.stdout)["problems"][0]
    assert problem["field"] == "repo" and str(tmp_path / "o__n") in problem["message"]
    out = alight("tasks", "check", str(f), "--json")
    assert out.returncode == 0
    assert json.loads(out.stdout)["summary"]["reward_kinds"] == {"swebench-tests": 1}
