"""Run a task's reward command in its workspace and turn what it says into a number.

Two forms: the exit code (0 -> 1.0, anything else -> 0.0), or a final stdout line that is a JSON object with a
"reward" key (-> that value; the other keys become the detail). The JSON line wins over the exit code, because
test runners often exit non-zero while still reporting a partial score. A reward that is not a finite number, or
a command that runs past its limit, gives 0.0 with the reason in the detail: scoring never crashes a round.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox.choice import task_shell_spec
from agentlightning_cli.tasks.model import Task
from agentlightning_cli.tasks.shell import ShellResult, run_shell
from agentlightning_cli.tasks.workspace import task_env


@dataclass(frozen=True)
class RewardResult:
    reward: float
    detail: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    error: str | None = None
    """Why the command could not be scored (also in detail["error"]); None when it was."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_reward(task: Task, workspace: Path, timeout_s: float | None = 600.0, *, sandbox: str | None = None,
               limits: EpisodeLimits | None = None, container_runtime: str = "auto") -> RewardResult:
    """Run task.reward with `bash -c` in workspace (own process group, killed as a group on timeout).

    The command sees TASK_ID and TASK_WORKSPACE; for SWE-bench tasks also TASK_TESTS_FILE, a JSON file outside
    the workspace listing FAIL_TO_PASS and PASS_TO_PASS. It runs in the same kind of sandbox as the agent
    (`sandbox`, None: the setting), without network: it executes code the agent may have written.
    """
    workspace = Path(workspace).absolute()
    env = task_env(task, workspace)
    with tempfile.TemporaryDirectory(prefix="alight-reward-") as tmp:
        if task.swebench is not None:
            tests_file = Path(tmp) / "tests.json"
            tests = {"FAIL_TO_PASS": task.swebench.fail_to_pass, "PASS_TO_PASS": task.swebench.pass_to_pass}
            tests_file.write_text(json.dumps(tests), encoding="utf-8")
            env["TASK_TESTS_FILE"] = str(tests_file)
        try:
            box = task_shell_spec(workspace, network=False, mode=sandbox, limits=limits, read_only=[Path(tmp)],
                                  with_alight=task.swebench is not None, image=task.image, runtime=container_runtime,
                                  workdir=task.container_workdir)
            result = run_shell(task.reward, workspace, timeout_s, env=env, sandbox=box)
        except (OSError, AlightError) as exc:  # no workspace, bash or image: a scoring failure, not a crash
            error = f"reward command could not start in {workspace}: {getattr(exc, 'message', exc)}"
            return RewardResult(0.0, {"error": error}, error=error)
    return score(result, timeout_s)


def score(res: ShellResult, timeout_s: float | None = None) -> RewardResult:
    """A finished (or killed) reward command -> RewardResult."""
    common = dict(
        exit_code=res.exit_code, stdout_tail=res.stdout_tail, stderr_tail=res.stderr_tail,
        duration_s=round(res.duration_s, 3),
    )  # fmt: skip
    if res.resource_limit is not None:
        error = f"reward command ended at a sandbox limit: {res.resource_limit}"
        return RewardResult(0.0, {"resource_limit": res.resource_limit, "error": error}, error=error, **common)
    if res.timed_out:
        error = f"reward command ran past its {timeout_s:g}s limit and was killed"
        return RewardResult(0.0, {"timed_out": True, "error": error}, timed_out=True, error=error, **common)
    reported = _final_json(res.last_stdout_line)
    if reported is None:
        return RewardResult(1.0 if res.exit_code == 0 else 0.0, {}, **common)
    value = reported.pop("reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        error = f"the final JSON line's reward must be a finite number, got {json.dumps(value)}"
        return RewardResult(0.0, {**reported, "error": error}, error=error, **common)
    return RewardResult(float(value), reported, **common)


def _final_json(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)  # NaN/Infinity parse here and are rejected by the finite check
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and "reward" in obj else None
