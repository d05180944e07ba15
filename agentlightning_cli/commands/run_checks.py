"""`alight run`'s checks before anything starts: task set, subset, recipe and install, model, context, rounds.

Everything a user can get wrong in the command line or the task set is reported here, as one clear error,
before a run directory, a vLLM server or a harness exists.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError

TRAINING_MODULE = "agentlightning_cli.train.round_step"


@dataclass
class RunOptions:
    task_set: Path
    harness: str
    attempts: int = 4
    concurrency: int = 2
    model: Path | None = None
    upstream: list[str] | None = None
    """--upstream servers (one or more, the same model), instead of starting vLLM."""
    out: Path | None = None
    name: str | None = None
    timeout_s: float | None = None
    max_calls: int | None = None
    max_tokens: int | None = None
    max_turns: int | None = None
    seed: int | None = None
    keep_workspaces: bool = False
    tasks: list[str] = field(default_factory=list)
    rounds: int = 1
    swebench_mirror: Path | None = None
    setup_timeout_s: float = 900.0
    reward_timeout_s: float = 600.0
    sandbox: str | None = None
    """--sandbox: the `sandbox` setting for this run (run_and_report passes it in as a command-line flag)."""
    unsafe_expose: bool = False
    executor: str = "local"
    """--executor: `local` (episodes run on this machine) or `ray` (each a Ray task on a worker node)."""
    ray_address: str | None = None
    """--ray-address: the Ray cluster to join (None with --executor ray: a one-machine Ray started for the run)."""
    """--unsafe-expose-protected-paths: mount what the guard would refuse (sandbox/exposure.py); the summary says so."""
    adapter: Path | None = None
    """--adapter: a trained LoRA adapter folder served as round 0's policy (sets serve.adapter for this run)."""
    paired_seeds: bool = False
    """alight eval: the sampling seed of each call depends on its (task, attempt), not its episode id, so each
    adapter evaluated draws alike (proxy/control.slot_draw)."""
    eval_task_set: Path | None = None
    """--eval-task-set: held-out tasks evaluated inside the run (the eval.task_set setting; rollout/evaluation.py)."""
    eval_attempts: int | None = None
    """--eval-attempts (eval.attempts)."""
    eval_every: int | None = None
    """--eval-every (eval.every)."""
    report_to: list[str] | None = None
    """--report-to: experiment trackers (the train.report_to setting for this run; train/trackers.py)."""

    def snapshot(self) -> dict[str, Any]:
        return json.loads(json.dumps({k: v for k, v in self.__dict__.items()}, default=str))


def check_numbers(opts: RunOptions) -> None:
    for name, value, low in (("--attempts", opts.attempts, 1), ("--concurrency", opts.concurrency, 1),
                             ("--rounds", opts.rounds, 1)):
        if value < low:
            raise AlightError(f"{name} must be at least {low}, got {value}")
    for name, value in (("--timeout", opts.timeout_s), ("--max-calls", opts.max_calls), ("--max-tokens", opts.max_tokens),
                        ("--setup-timeout", opts.setup_timeout_s), ("--reward-timeout", opts.reward_timeout_s)):
        if value is not None and value <= 0:
            raise AlightError(f"{name} must be positive, got {value:g}")
    if opts.executor not in ("local", "ray"):
        raise AlightError(f"--executor must be local or ray, not {opts.executor!r}")
    if opts.ray_address is not None and opts.executor != "ray":
        raise AlightError("--ray-address needs --executor ray")
    # --model with --upstream names the model those servers serve, in a run of one round too: its tokenizer gives
    # exact continuation (proxy.continuation) its end-of-turn ids (without it, the servers are asked for them).
    if opts.rounds > 1 and importlib.util.find_spec(TRAINING_MODULE) is None:
        raise AlightError(f"--rounds {opts.rounds} needs training between rounds, which this version of alight does "
                          "not have yet (the `alight train` feature)", "run one round (--rounds 1) for now")
    if opts.rounds > 1 and opts.upstream is not None and opts.model is None:
        raise AlightError("--rounds > 1 with --upstream needs --model DIR: the model those servers serve, which the "
                          "trainer trains each round's adapter on",
                          "the servers also need --enable-lora, VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 and this run's "
                          "folder at the same path; or drop --upstream and alight starts vLLM")


def check_training_settings(settings: Any, opts: RunOptions) -> None:
    """Settings under which a run that trains (--rounds > 1) would train nothing, refused before anything starts."""
    if opts.rounds > 1 and settings.proxy.sampling.tool_choice == "required":
        raise AlightError(
            f"proxy.sampling.tool_choice is `required` in a run that trains (--rounds {opts.rounds}): vLLM then "
            "forces a tool call on every call that offers tools, its logprobs are not the policy's, and the trainer "
            "leaves every such call out (constrained calls), so the rounds would train on nothing",
            "remove proxy.sampling.tool_choice from alight.yaml (or set it to auto), or run one round (--rounds 1)")


def load_task_subset(opts: RunOptions) -> list[Any]:
    from agentlightning_cli.tasks import load_tasks

    tasks = load_tasks(opts.task_set, opts.swebench_mirror)
    if not tasks:
        raise AlightError(f"task set {opts.task_set} has no tasks", "add one JSON object per line")
    if opts.tasks:
        known = {t.id for t in tasks}
        unknown = [t for t in opts.tasks if t not in known]
        if unknown:
            raise AlightError(f"--tasks names task(s) not in {opts.task_set}: {', '.join(unknown)}",
                              f"known ids: {', '.join(sorted(known)[:20])}")
        wanted = set(opts.tasks)
        tasks = [t for t in tasks if t.id in wanted]
    return tasks


def recipe_and_install(settings: Any, harness: str) -> tuple[Any, Any]:
    from agentlightning_cli.harness import install as installs
    from agentlightning_cli.harness.recipe import load

    recipe = load(harness)
    override = settings.harness.get(recipe.name)
    if override is not None:
        update = {key: value for key in ("timeout_s", "context_tokens")
                  if (value := getattr(override, key)) is not None}
        recipe = recipe.model_copy(update=update) if update else recipe
    # An external recipe (no `install`) needs nothing installed: require_installed returns where its program is.
    return recipe, installs.require_installed(recipe, settings.home, override.version if override else None)


def swebench_environment_warning(tasks: list[Any]) -> str | None:
    """SWE-bench lines whose project environment nothing installs: rewards would read as a weak model.

    Today a SWE-bench line runs in a workspace cloned at its base commit, on the host's Python, with its listed
    tests run by pytest; SWE-bench's own images (the project installed, often another Python) are not used yet.
    Without a `setup` that installs the project, most instances cannot pass whatever the agent does.
    """
    bare = [t.id for t in tasks if t.kind == "swebench" and not t.setup]
    if not bare:
        return None
    names = ", ".join(bare[:3]) + (f" and {len(bare) - 3} more" if len(bare) > 3 else "")
    return (f"{len(bare)} SWE-bench task(s) ({names}) have no `setup` that installs their project: they run on "
            "this machine's Python with only the repository checked out, not in SWE-bench's image, so their tests "
            "will mostly fail whatever the agent does and rewards will not measure the model; run them in their "
            "own images with `--sandbox container` (graded by the official code), or give each line a `setup` that "
            "installs its environment")


def container_images(settings: Any, tasks: list[Any], recipe: Any = None, installed: Any = None) -> list[Any]:
    """`sandbox: container`, before anything starts: every task gets its image (its own, else `container.image`),
    the runtime is found, and each distinct image is checked once (present, a container starts, this machine's
    Python runs in it, and, given the recipe and its install, the harness's own check command runs in it with
    an episode's mounts). One error naming every task without an image, or the first image that cannot run."""
    from agentlightning_cli.sandbox import container

    from agentlightning_cli.tasks.swebench import published_image

    not_gradable = [t.id for t in tasks if t.swebench is not None and not t.swebench.gradable]
    if not_gradable:
        names = ", ".join(not_gradable[:5]) + (f" and {len(not_gradable) - 5} more" if len(not_gradable) > 5 else "")
        raise AlightError(
            f"{len(not_gradable)} SWE-bench row(s) ({names}) lack what the official grading needs: `eval_script`, "
            "`log_parser` and `eval_type` (SWE-bench 5.x rows carry them; older copies do not)",
            "take the rows from a current SWE-bench dataset, add the three fields to each line (your own eval "
            "script with the markers, e.g. log_parser parse_log_pytest, eval_type pass_and_fail), or run them under "
            "--sandbox bwrap with alight's pytest reward over the listed tests (not the official grading)")
    tasks = harbor_images(settings, tasks)
    # A SWE-bench row's project comes from its image (/testbed, installed and built), never from a fetch.
    tasks = [t.model_copy(update={"image": t.image or t.swebench.image or published_image(
                 t.id, settings.container.swebench_image), "repo": None, "repo_kind": "none"})
             if t.swebench is not None else t for t in tasks]
    default = settings.container.image
    missing = [t.id for t in tasks if t.image is None and default is None]
    if missing:
        names = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise AlightError(f"--sandbox container needs an image for every task; {len(missing)} have none ({names})",
                          "give each task line an `image`, or set `container.image` in alight.yaml")
    tasks = [t if t.image is not None else t.model_copy(update={"image": default}) for t in tasks]
    runtime = container.runtime_path(settings.container.runtime)
    images = list(dict.fromkeys(t.image for t in tasks))
    container.ensure_images(runtime, images, settings.container.pull)
    harness = harness_check(recipe, installed) if recipe is not None and not installed.external else None
    for image in images:
        container.check_image(runtime, image)
    if harness is not None:  # per image, and per Harbor task's agent user (the harness runs as that user)
        for image, user in dict.fromkeys((t.image, t.harbor.agent_user if t.harbor else None) for t in tasks):
            version = container.check_harness(runtime, image, recipe.name, *harness, user=user)
            as_user = f" as {user}" if user is not None else ""
            print(f"alight run: image {image} runs {recipe.name}{as_user} ({version or 'its check passed'})",
                  file=sys.stderr, flush=True)
    return tasks


def harbor_images(settings: Any, tasks: list[Any]) -> list[Any]:
    """Harbor tasks get their image: built from environment/Dockerfile (content-addressed, cached; one error
    naming every task that cannot build), or their docker_image as given (pulled with the others)."""
    harbor = [t for t in tasks if t.harbor is not None]
    if not harbor:
        return tasks
    from agentlightning_cli.sandbox import container
    from agentlightning_cli.tasks.harbor_image import task_images

    runtime = container.runtime_path(settings.container.runtime)
    images = task_images(runtime, (), [t for t in harbor if t.harbor.docker_image is None])
    return [t.model_copy(update={"image": images[t.id]}) if t.id in images else t for t in tasks]


def harness_check(recipe: Any, installed: Any) -> tuple[list[str], list[Path], dict[str, str]] | None:
    """The recipe's check command, the read-only mounts an episode's container gets, and its PATH (None when the
    recipe has no check command)."""
    from agentlightning_cli.harness.env import harness_env
    from agentlightning_cli.harness.install import check_argv
    from agentlightning_cli.harness.sandboxed import planned_mounts
    from agentlightning_cli.sandbox.paths import image_interpreters

    argv = check_argv(recipe, installed)
    if not argv:
        return None
    mounts = [m.path for m in planned_mounts(recipe, installed)] + image_interpreters(installed.dir)
    return argv, mounts, {"PATH": harness_env().get("PATH", os.defpath)}

