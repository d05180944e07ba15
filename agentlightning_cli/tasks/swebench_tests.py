"""Reward command of SWE-bench tasks: run FAIL_TO_PASS + PASS_TO_PASS with pytest, print a final JSON line.

Run as `python -m agentlightning_cli.tasks.swebench_tests` in the workspace, with TASK_TESTS_FILE naming a JSON
file {"FAIL_TO_PASS": [...], "PASS_TO_PASS": [...]} (run_reward writes it, outside the workspace).
Reward 1.0 only when every listed test passes (or is an expected failure, as SWE-bench counts it).

pytest is given the test *files* and a small plugin deselects everything not listed, because naming one
unknown node id on pytest's command line aborts the whole session; a listed id that never ran counts as failed.
The interpreter: the workspace's .venv/bin/python if a setup command made one, else `python` on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PASSING = ("passed", "xfailed")
MAX_LISTED = 50

PLUGIN = '''
import json, os
_wanted = set(json.load(open(os.environ["TASK_PYTEST_WANTED"])))
_outcomes = {}

def pytest_collection_modifyitems(session, config, items):
    keep = [i for i in items if i.nodeid in _wanted]
    drop = [i for i in items if i.nodeid not in _wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep

def pytest_runtest_logreport(report):
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        outcome = ("xfailed" if report.skipped else "xpassed") if xfail else report.outcome
        if _outcomes.get(report.nodeid) != "error":
            _outcomes[report.nodeid] = outcome
    elif report.failed:
        _outcomes[report.nodeid] = "error"
    elif report.skipped:
        _outcomes[report.nodeid] = "xfailed" if xfail else "skipped"

def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["TASK_PYTEST_OUTCOMES"], "w") as f:
        json.dump(_outcomes, f)
'''


def pick_test_python(workspace: Path) -> str:
    venv = workspace / ".venv" / "bin" / "python"
    if venv.exists():
        return str(venv)
    return shutil.which("python") or shutil.which("python3") or sys.executable


def run(tests: dict[str, list[str]], workspace: Path) -> dict:
    wanted = list(dict.fromkeys(tests.get("FAIL_TO_PASS", []) + tests.get("PASS_TO_PASS", [])))
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in wanted if "::" in t))
    files = [f for f in files if (workspace / f).exists()]
    outcomes: dict[str, str] = {}
    exit_code = None
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "alight_outcomes.py").write_text(PLUGIN)
        (Path(tmp) / "wanted.json").write_text(json.dumps(wanted))
        out_file = Path(tmp) / "outcomes.json"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")])),
            "TASK_PYTEST_WANTED": str(Path(tmp) / "wanted.json"),
            "TASK_PYTEST_OUTCOMES": str(out_file),
        }
        if files:
            # --rootdir: SWE-bench ids are relative to the repository root, whatever pytest would infer.
            cmd = [pick_test_python(workspace), "-m", "pytest", "-p", "alight_outcomes", "-p", "no:cacheprovider"]
            cmd += ["-rA", "--rootdir", str(workspace), *files]
            sys.stdout.flush()
            exit_code = subprocess.run(cmd, cwd=workspace, env=env, stdin=subprocess.DEVNULL).returncode
            if out_file.exists():
                outcomes = json.loads(out_file.read_text())
    detail: dict = {"pytest_exit_code": exit_code}
    errors = []
    not_node_ids = [t for t in wanted if "::" not in t]
    if not_node_ids:
        errors.append(
            f"{len(not_node_ids)} test id(s) are not pytest node ids (e.g. {not_node_ids[0]!r}; django/sympy style):"
            " give this line a `reward` command that runs the project's own test runner"
        )
    if exit_code is not None and not out_file.exists():
        errors.append(f"pytest did not run (exit {exit_code}); is pytest installed for {pick_test_python(workspace)}?")
    if errors:
        detail["error"] = "; ".join(errors)
    ok = True
    for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        ids = tests.get(group, [])
        failed = [t for t in ids if outcomes.get(t) not in PASSING]
        ok = ok and not failed
        detail[group.lower()] = {
            "total": len(ids),
            "passed": len(ids) - len(failed),
            "failed": [{"test": t, "outcome": outcomes.get(t, "not run")} for t in failed[:MAX_LISTED]],
            "failed_not_listed": max(0, len(failed) - MAX_LISTED),
        }
    return {"reward": 1.0 if ok else 0.0, **detail}


def main() -> int:
    tests_file = os.environ.get("TASK_TESTS_FILE")
    if not tests_file:
        print(json.dumps({"reward": 0.0, "error": "TASK_TESTS_FILE is not set (run through alight's run_reward)"}))
        return 2
    tests = json.loads(Path(tests_file).read_text(encoding="utf-8"))
    print(json.dumps(run(tests, Path.cwd())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
