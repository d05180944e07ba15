"""SWE-bench grading as the official harness does it, under `sandbox: container`.

After the agent, only its patch counts (tasks/patch.py: exactly what would be submitted). The verdict comes from a
**fresh** container of the instance's image, never the agent's: the patch is applied with the official sequence
(`git apply --verbose`, `--3way`, `--reject`, then `patch --batch --forward --fuzz=5 -p1 -i`, the tree reset
between tries, then `git apply --check --reverse` for an already-applied patch), the row's eval script as
`make_test_spec` prepares it (the exit-code lines added) runs under `/bin/bash` with stdout and stderr merged and
no tty, and `get_eval_report` decides with the row's `log_parser` and `eval_type`. So nothing the agent left outside
its diff (processes, untracked ignored files, site-packages edits) can change the verdict.

The official code is SWE-bench's own package (`swebench==5.0.2`, installed without its runner's Docker, Modal and
datasets clients): it runs in a child process of its own (`python -m agentlightning_cli.swebench_grade spec|report`)
where those imports are stubbed, so nothing of it (its `load_dotenv()` included) touches alight's process.

Reward 1.0 when the instance is resolved, else 0.0, with the per-test statuses, the apply log and the eval log's
tail in the detail; an empty patch is 0.0 without a run (as officially); a grading run past its time limit or a
crash of the grader is a `reward_error` with its log, never a silent 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GRADE_DIR_INSIDE = "/alight-grade"
APPLY_COMMANDS = ("git apply --verbose", "git apply --verbose --3way", "git apply --verbose --reject",
                  "patch --batch --forward --fuzz=5 -p1 -i")
LOG_TAIL = 4000


def grade_script(workdir: str) -> str:
    """What runs in the fresh container: the official apply sequence, then the eval script, its log to a file."""
    # Each try only while none has applied; a failed one (notably --reject) can leave partial state, so the tree
    # is reset before the next, as the official harness does.
    tries = "\n".join(
        f'if [ $applied = 0 ]; then {"git checkout -- . ; git clean -fd >/dev/null 2>&1; " if i else ""}'
        f'if {cmd} {GRADE_DIR_INSIDE}/patch.diff >> {GRADE_DIR_INSIDE}/out/apply.log 2>&1; then applied=1; fi; fi'
        for i, cmd in enumerate(APPLY_COMMANDS))
    return f"""cd {workdir}
applied=0
{tries}
if [ $applied = 0 ] && git apply --check --reverse {GRADE_DIR_INSIDE}/patch.diff >> {GRADE_DIR_INSIDE}/out/apply.log 2>&1; then applied=1; fi
echo $applied > {GRADE_DIR_INSIDE}/out/applied
[ $applied = 1 ] || exit 0
/bin/bash {GRADE_DIR_INSIDE}/eval.sh > {GRADE_DIR_INSIDE}/out/test_output.txt 2>&1
echo $? > {GRADE_DIR_INSIDE}/out/eval_exit
"""


def instance(task: Any) -> dict[str, Any]:
    """The row as SWE-bench's `make_test_spec` reads it."""
    spec = task.swebench
    return {"instance_id": task.id, "image": task.image, "repo": spec.github_repo, "version": spec.version,
            "FAIL_TO_PASS": spec.fail_to_pass, "PASS_TO_PASS": spec.pass_to_pass, "log_parser": spec.log_parser,
            "eval_type": spec.eval_type, "eval_script": spec.eval_script}


def grade(task: Any, patch: bytes | None, *, runtime: str, network: bool = True, timeout_s: float = 1800.0) -> Any:
    """The official verdict on `patch` for the SWE-bench task `task` (its image in task.image), as a RewardResult."""
    from agentlightning_cli.reward import RewardResult
    from agentlightning_cli.sandbox.container import runtime_args, ulimit_args

    started = time.monotonic()
    if not patch or not patch.strip():
        detail = {"grading": "official", "resolved": False, "why": "empty patch: nothing to grade (as officially)"}
        return RewardResult(0.0, detail, exit_code=0, duration_s=0.0)
    with tempfile.TemporaryDirectory(prefix="alight-grade-") as tmp:
        folder = Path(tmp)
        (folder / "out").mkdir()
        (folder / "row.json").write_text(json.dumps(instance(task)), encoding="utf-8")
        (folder / "patch.diff").write_bytes(patch)
        spec = _child(["spec", str(folder / "row.json"), str(folder / "eval.sh")], folder)
        if spec.returncode != 0:
            return _error(f"the official grading code could not prepare the eval script: {_tail(spec.stderr)}",
                          started)
        (folder / "grade.sh").write_text(grade_script(task.container_workdir or "/testbed"), encoding="utf-8")
        name = f"alight-grade-{os.getpid()}-{time.monotonic_ns()}"
        argv = [runtime, *runtime_args(runtime, task.image), "run", "--rm", "--pull", "never", "--name", name,
                *ulimit_args(), *([] if network else ["--network", "none"]), "--label",
                f"alight.grading={task.id}", "-v", f"{folder}:{GRADE_DIR_INSIDE}", task.image,
                "/bin/bash", f"{GRADE_DIR_INSIDE}/grade.sh"]
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            subprocess.run([runtime, "rm", "-f", name], capture_output=True)
            log = _read(folder / "out" / "test_output.txt")
            return _error(f"grading ran past {timeout_s:g} s (the eval script's log so far: {log[-LOG_TAIL:]!r})",
                          started, timed_out=True)
        applied = _read(folder / "out" / "applied").strip() == "1"
        apply_log = _read(folder / "out" / "apply.log")
        if run.returncode != 0 or not (folder / "out" / "applied").exists():
            return _error(f"the grading container failed (exit {run.returncode}): {_tail(run.stderr)}", started)
        detail: dict[str, Any] = {"grading": "official", "network": network, "patch_applied": applied,
                                  "apply_log_tail": apply_log[-LOG_TAIL:]}
        if not applied:
            detail.update(resolved=False, why="the patch does not apply (the official apply sequence failed)")
            return RewardResult(0.0, detail, exit_code=0, duration_s=time.monotonic() - started)
        log = _read(folder / "out" / "test_output.txt")
        detail["eval_log_tail"] = log[-LOG_TAIL:]
        report = _child(["report", str(folder / "row.json"), str(folder / "patch.diff"),
                         str(folder / "out" / "test_output.txt")], folder)
        if report.returncode != 0:
            return _error(f"the official grading code failed on the log: {_tail(report.stderr)}", started, detail)
        verdict = json.loads(report.stdout.strip().splitlines()[-1])
        detail.update(resolved=bool(verdict.get("resolved")), tests_status=verdict.get("tests_status"),
                      patch_successfully_applied=verdict.get("patch_successfully_applied"))
        return RewardResult(1.0 if detail["resolved"] else 0.0, detail, exit_code=0,
                            duration_s=time.monotonic() - started)


def _child(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentlightning_cli.swebench_grade", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} |
                          {"PYTHONPATH": str(Path(__file__).resolve().parents[1])})


def _error(why: str, started: float, detail: dict[str, Any] | None = None, timed_out: bool = False) -> Any:
    from agentlightning_cli.reward import RewardResult

    return RewardResult(0.0, {**(detail or {}), "grading": "official", "error": why}, error=why,
                        duration_s=time.monotonic() - started, timed_out=timed_out)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _tail(text: str) -> str:
    return (text or "").strip()[-1500:] or "(no output)"


def _official() -> tuple[Any, Any]:
    """(make_test_spec, get_eval_report) from the installed swebench package, its runner's imports stubbed."""
    import types

    import swebench

    harness = types.ModuleType("swebench.harness")  # its __init__ imports the Docker and Modal clients
    harness.__path__ = [os.path.join(os.path.dirname(swebench.__file__), "harness")]
    sys.modules["swebench.harness"] = harness
    datasets = types.ModuleType("datasets")  # imported by harness/utils.py, never used by make_test_spec
    datasets.Dataset = datasets.load_dataset = datasets.load_from_disk = None
    sys.modules["datasets"] = datasets
    dotenv = types.ModuleType("dotenv")  # harness/utils.py calls load_dotenv() at import: not here
    dotenv.load_dotenv = lambda *a, **k: False
    sys.modules["dotenv"] = dotenv
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    return make_test_spec, get_eval_report


def main(argv: list[str]) -> int:
    make_test_spec, get_eval_report = _official()
    row = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    spec = make_test_spec(row)
    if argv[0] == "spec":
        Path(argv[2]).write_text(spec.eval_script, encoding="utf-8")
        return 0
    patch = Path(argv[2]).read_text(encoding="utf-8", errors="replace")
    report = get_eval_report(test_spec=spec, prediction={"instance_id": spec.instance_id, "model_patch": patch,
                                                         "model_name_or_path": "alight"},
                             test_log_path=argv[3], include_tests_status=True)
    print(json.dumps(report[spec.instance_id]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
