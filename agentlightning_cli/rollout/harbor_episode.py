"""The Harbor parts of an episode (`sandbox: container`, a task with `harbor`): the agent's container, its verdict,
and the oracle harness. rollout/episode.py calls these; everything else about the episode (store, proxy, key,
progress) is the same as for any task.

- A harness runs as usual, in a container from the task's image working in the image's own file system
  (sandbox/task_fs.py), committed when it ends; the verifier (tasks/harbor_run.verify) runs test.sh in a
  container from that commit: the agent's files, none of its processes, /logs/verifier made empty just before.
- The `oracle` harness runs no model: the task's solution/solve.sh in the task's container (tasks/harbor_run
  .run_oracle), then the verifier in that same container, as Harbor's oracle agent does.
Timeouts are the task's ([agent] and [verifier] timeout_sec) times `harbor.timeout_multiplier`; the reward is
`harbor.reward_key` of reward.json (else reward.txt); every key of reward.json is kept in the reward detail.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox.task_fs import TaskFS, trial_image

ORACLE = "oracle"
"""The built-in harness that runs a Harbor task's solution/solve.sh (harness_recipes/oracle.yaml)."""


def is_oracle(recipe: Any) -> bool:
    return recipe.name == ORACLE and recipe.external


def _settings(node: Any) -> Any:
    from agentlightning_cli.config import HarborSettings

    return node.harbor or HarborSettings()


def agent_timeout(node: Any, task: Any) -> float | None:
    """--timeout wins; else the task's [agent].timeout_sec times harbor.timeout_multiplier."""
    if node.timeout_s:
        return node.timeout_s
    h = task.harbor
    return h.agent_timeout_s * _settings(node).timeout_multiplier if h.agent_timeout_s else None


def task_fs(node: Any, episode_id: str, task: Any) -> TaskFS:
    """How the agent's container is made for this task (its env templates resolved on this machine: a variable
    it lacks is an AlightError, the episode's harness_error); `storage_mb` where the storage driver enforces it."""
    from agentlightning_cli.sandbox.task_fs import storage_refused
    from agentlightning_cli.tasks.harbor_run import resolve_env

    h = task.harbor
    fs = TaskFS(workdir=h.workdir, user=h.agent_user, env=resolve_env(task.id, h.env), cpus=h.cpus,
                commit_to=trial_image(episode_id))
    if h.storage_mb is not None:
        refused = storage_refused(*_runtime(node, task.image), task.image)
        if refused is None:
            fs.storage_mb = h.storage_mb
        else:
            fs.storage_note = f"storage_mb = {h.storage_mb} not enforced for the agent's container: {refused}"
    return fs


def limits_for(limits: Any, task: Any) -> Any:
    """The episode's limits with the task's memory_mb (the task's ask wins over `episode_limits`)."""
    if limits is None or task.harbor.memory_mb is None:
        return limits
    return limits.model_copy(update={"memory_mb": task.harbor.memory_mb})


def _runtime(node: Any, image: str) -> tuple[str, tuple[str, ...]]:
    from agentlightning_cli.sandbox.container import runtime_args, runtime_path

    runtime = runtime_path(node.container_runtime)
    return runtime, runtime_args(runtime, image)


def _verifier_dir(node: Any, episode_id: str) -> Path:
    return Path(node.run_dir) / "logs" / "verifier" / episode_id


def _verdict(box: Any, node: Any, episode_id: str) -> tuple[str, float | None, str | None, dict]:
    from agentlightning_cli.tasks.harbor_reward import RewardFileError
    from agentlightning_cli.tasks.harbor_run import verify

    settings = _settings(node)
    out = _verifier_dir(node, episode_id)
    shutil.rmtree(out, ignore_errors=True)
    try:
        verdict = verify(box, out, key=settings.reward_key, timeout_multiplier=settings.timeout_multiplier)
    except RewardFileError as exc:
        return "reward_error", None, str(exc), {"error": str(exc), "log": exc.log, "notes": box.notes}
    detail = {**verdict.detail, "verifier_dir": str(out)}
    if box.notes:
        detail["notes"] = box.notes
    if box.network:
        detail["verifier_network"] = "host (the task asked for a network; an allowlist is not enforced)"
    return "done", verdict.reward, None, detail


def verifier_box(node: Any, task: Any, image: str, episode_id: str | None = None) -> Any:
    """A TaskContainer of `image` (the task's, or the agent's committed container, whose entrypoint is the
    forwarder's: the runtime's flags are found with the task's own image)."""
    from agentlightning_cli.tasks.harbor_run import TaskContainer

    runtime, flags = _runtime(node, task.image)
    from agentlightning_cli.rollout import stale

    network = _settings(node).verifier_network and task.harbor.verifier_network.mode != "no-network"
    workspace = stale.workspaces_root(Path(node.run_dir)) / episode_id if episode_id else None
    return TaskContainer(runtime, flags, task, image, network=network, workspace=workspace)


def grade(node: Any, slot: Any, fs: TaskFS | None, timings: dict[str, float]) -> tuple[str, float | None, str | None,
                                                                                        dict]:
    """The verifier on what the agent left: in a container from the committed agent container (from the task's
    own image when the harness never started one: nothing of the agent's to keep). (status, reward, error,
    detail); the committed image is removed after."""
    task = slot.task
    t = time.monotonic()
    if fs is not None and fs.commit_error is not None:
        why = f"the agent's container could not be kept for the verifier: {fs.commit_error}"
        return "reward_error", None, why, {"error": why}
    image = fs.commit_to if fs is not None and fs.committed else task.image
    try:
        with verifier_box(node, task, image, slot.episode_id) as box:
            if fs is not None and fs.storage_note:
                box.notes.insert(0, fs.storage_note)
            verdict = _verdict(box, node, slot.episode_id)
    except AlightError as exc:
        verdict = ("reward_error", None, exc.message, {"error": exc.message})
    finally:
        if fs is not None and fs.committed:
            runtime, _ = _runtime(node, task.image)
            subprocess.run([runtime, "rmi", "-f", fs.commit_to], capture_output=True, timeout=120)
    timings["reward_s"] = time.monotonic() - t
    return verdict


def oracle(node: Any, slot: Any, timings: dict[str, float]) -> tuple[str, str | None, int | None,
                                                                     tuple[str, float | None, str | None, dict]]:
    """The oracle harness: (ending, reason, exit code, (status, reward, error, detail)) of solve.sh and the
    verifier in one container of the task's image. A task without a solution ends `harness_error`, graded as is."""
    from agentlightning_cli.tasks.harbor_run import run_oracle

    task = slot.task
    t = time.monotonic()
    ending, reason, code = "finished", None, None
    try:
        with verifier_box(node, task, task.image, slot.episode_id) as box:
            if task.harbor.solution_dir is None:
                ending, reason = "harness_error", f"task {task.id} has no solution/solve.sh"
            else:
                solved = run_oracle(box, _settings(node).timeout_multiplier)
                code = solved.exit_code
                if code is None:
                    ending, reason = "timeout", "solve.sh ran past [agent].timeout_sec"
                elif code != 0:
                    ending, reason = "harness_error", f"solve.sh exited {code}: {solved.output.strip()[-300:]}"
            timings["harness_s"] = time.monotonic() - t
            t = time.monotonic()
            verdict = _verdict(box, node, slot.episode_id)
    except AlightError as exc:
        return "harness_error", exc.message, None, ("reward_error", None, exc.message, {"error": exc.message})
    timings["reward_s"] = time.monotonic() - t
    return ending, reason, code, verdict
