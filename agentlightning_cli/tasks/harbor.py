"""Harbor task directories as a task set: `--task-set DIR` / `alight tasks check DIR`, where DIR is one task
directory (it has task.toml) or a dataset folder holding them at any depth.

Every task is checked before anything runs and every problem is collected (file and line: tomllib's for bad
TOML, the key's own line for a wrong type or value). What alight cannot run faithfully is refused by name (GPU,
TPU, Windows, compose, multi-step, a separate verifier container, MCP servers, skills, prior-context trajectories)
rather than run differently from Harbor. The layout and rules follow the `harbor` 0.25.0 wheel:
harbor/models/task/{config,paths,task}.py and harbor/verifier/verifier.py."""

from __future__ import annotations

import hashlib
import os
import sys
import tomllib
from pathlib import Path

from pydantic import ValidationError

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks.harbor_toml import TaskToml, key_line
from agentlightning_cli.tasks.lines import json_type
from agentlightning_cli.tasks.model import HARBOR_REWARD, HarborSpec, NetworkAsk, Problem, Task

CONFIG = "task.toml"
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
SKIP_DIRS = {".git", ".hg", ".venv", "node_modules", "__pycache__"}
MAX_ID = 200


def refuse_held_out(task_set: Path, tasks: list[Task]) -> None:
    """A Harbor dataset as `--eval-task-set` is refused before anything starts (its images are built and checked
    for the train set's episodes only, so far): evaluate it with `alight eval --task-set DIR`."""
    harbor = [t.id for t in tasks if t.kind == "harbor"]
    if harbor:
        raise AlightError(f"held-out task set {task_set} is a Harbor dataset ({len(harbor)} task(s)); evaluating "
                          "Harbor tasks inside a training run is not supported yet",
                          f"evaluate them afterwards: `alight eval --task-set {task_set} --sandbox container "
                          "--adapter DIR`")


def check_running(task_set: Path, tasks: list[Task], sandbox: str, recipe_name: str, oracle: bool) -> None:
    """Before anything starts: Harbor tasks run in their own image, so under `sandbox: container` only (their
    verifier runs in the agent's container); the oracle harness runs Harbor tasks' solutions only. Tasks without a
    solution under the oracle are listed (they end `harness_error`, graded as the image leaves them)."""
    harbor = [t for t in tasks if t.kind == "harbor"]
    if harbor and sandbox != "container":
        raise AlightError(f"task set {task_set} holds {len(harbor)} Harbor task(s): they run in their own image, "
                          f"with their verifier in the agent's container, under `--sandbox container` only (the "
                          f"sandbox is {sandbox})", "add --sandbox container (podman or docker)")
    if oracle:
        other = [t.id for t in tasks if t.kind != "harbor"]
        if other:
            shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
            raise AlightError(f"the {recipe_name} harness runs Harbor tasks' solution/solve.sh; {len(other)} task(s) "
                              f"of {task_set} are not Harbor tasks ({shown})",
                              "pick Harbor tasks with --tasks, or use a harness that runs a model")
        unsolved = [t.id for t in harbor if t.harbor.solution_dir is None]
        if unsolved:
            print(f"alight run: {len(unsolved)} task(s) have no solution/solve.sh (the oracle ends them "
                  f"harness_error): {', '.join(unsolved)}", file=sys.stderr, flush=True)


def find_task_dirs(root: Path) -> list[Path]:
    """`root` itself when it is a task directory; else every folder under it with a task.toml, in path order
    (a task's own subfolders are not searched: environment/ may hold anything)."""
    if (root / CONFIG).is_file():
        return [root]
    found: list[Path] = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        if CONFIG in files and Path(here) != root:
            found.append(Path(here))
            dirs[:] = []
    return found


def check_task_dir(task_dir: Path, problems: list[Problem], warnings: list[Problem]) -> Task | None:
    """One task directory -> a Task, or None with every problem appended (nothing raised for its content)."""
    config_path = task_dir / CONFIG
    cfg_name = str(config_path)
    before = len(problems)
    try:
        text = config_path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        problems.append(Problem(cfg_name, None, None, f"not valid UTF-8 (byte offset {exc.start})"))
        return None
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)  # 3.14 has it; older ones put "(at line L, column C)" in the message
        problems.append(Problem(cfg_name, line or _line_from_message(str(exc)), None, f"bad TOML: {exc}"))
        return None
    try:
        config = TaskToml.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(err["loc"])
            where = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
            problems.append(Problem(cfg_name, key_line(text, loc), where or None, _message(err)))
        config = None

    instruction = task_dir / "instruction.md"
    prompt = ""
    if config is not None and config.steps:
        pass  # refused below; a multi-step task has its instructions per step
    elif not instruction.is_file():
        msg = "missing: a Harbor task needs instruction.md (the prompt)"
        problems.append(Problem(str(instruction), None, None, msg))
    else:
        prompt = _strip_canary(instruction.read_text(encoding="utf-8", errors="replace"))
        if not prompt.strip():
            problems.append(Problem(str(instruction), 1, None, "is empty: it is the agent's prompt"))
    test_sh = task_dir / "tests" / "test.sh"
    if not test_sh.is_file():
        alt = " (only test.bat: Windows tasks are not supported)" if (task_dir / "tests" / "test.bat").is_file() else ""
        problems.append(Problem(str(test_sh), None, None, "missing: the verifier script writes "
                                f"/logs/verifier/reward.txt or reward.json{alt}"))
    if config is None:
        return None
    _refuse_unsupported(task_dir, config, text, problems, warnings)
    env_dir = task_dir / "environment"
    image = config.environment.docker_image
    context = env_dir if image is None else None
    if image is None and not (env_dir / "Dockerfile").is_file():
        line = key_line(text, ("environment",))
        problems.append(Problem(cfg_name, line, "environment.docker_image", "no image: set [environment].docker_image"
                                f" or add {env_dir / 'Dockerfile'}"))
    task_id = config.task.name if config.task is not None else task_dir.name
    if config.task is None and not _safe_dir_name(task_id):
        problems.append(Problem(cfg_name, None, "task.name", f"no [task].name, and the folder name {task_id!r} is not "
                                "a usable task name (letters, digits, . _ -); add [task] name = \"org/name\""))
    if len(problems) > before:
        return None
    solve = task_dir / "solution" / "solve.sh"
    spec = HarborSpec(
        task_dir=task_dir, schema_version=config.schema_version, docker_image=image, build_context=context,
        context_sha256=context_hash(context) if context is not None else None,
        build_timeout_s=config.environment.build_timeout_sec, cpus=config.environment.cpus,
        memory_mb=config.environment.memory_mb, storage_mb=config.environment.storage_mb,
        workdir=config.environment.workdir, env=dict(config.environment.env),
        agent_network=_ask(config.phase_network(config.agent)),
        verifier_network=_ask(config.phase_network(config.verifier)),
        agent_timeout_s=config.agent.timeout_sec, agent_user=config.agent.user,
        verifier_timeout_s=config.verifier.timeout_sec, verifier_env=dict(config.verifier.env),
        verifier_user=config.verifier.user,
        healthcheck=config.environment.healthcheck.command if config.environment.healthcheck else None,
        tests_dir=task_dir / "tests", solution_dir=solve.parent if solve.is_file() else None,
        solution_env=dict(config.solution.env),
    )
    return Task(
        id=task_id, prompt=prompt, repo=None, repo_kind="none", base_commit=None, setup=[], reward=HARBOR_REWARD,
        hidden_files=None, timeout_s=config.agent.timeout_sec, metadata=dict(config.metadata), kind="harbor",
        source_file=config_path, source_line=1, image=image, harbor=spec,
    )  # fmt: skip


def _refuse_unsupported(task_dir: Path, config: TaskToml, text: str, problems: list[Problem],
                        warnings: list[Problem]) -> None:
    """What Harbor can run and alight cannot (yet), each named, so a task never runs differently than written."""
    name = str(task_dir / CONFIG)
    env = config.environment

    def refuse(loc: tuple[str, ...], what: str) -> None:
        problems.append(Problem(name, key_line(text, loc), ".".join(loc), f"unsupported: {what}"))

    if config.steps:
        refuse(("steps",), "multi-step tasks ([[steps]]: per-step instructions and tests)")
    if env.os != "linux":
        refuse(("environment", "os"), f"os = {env.os!r} (only Linux containers)")
    if env.gpus:
        refuse(("environment", "gpus"), f"gpus = {env.gpus} (episodes get no GPU)")
    if env.gpu_types:
        refuse(("environment", "gpu_types"), "gpu_types (episodes get no GPU)")
    if env.tpu is not None:
        refuse(("environment", "tpu"), "TPU slices")
    if env.mcp_servers:
        refuse(("environment", "mcp_servers"), "MCP servers for the agent")
    if env.skills_dir is not None:
        refuse(("environment", "skills_dir"), "skills directories")
    if config.verifier.environment is not None or config.verifier.environment_mode == "separate":
        refuse(("verifier", "environment_mode"), "a separate verifier container (alight verifies in the agent's)")
    if config.verifier.collect:
        refuse(("verifier", "collect"), "[[verifier.collect]] hooks (compose services)")
    compose = [f for f in COMPOSE_FILES if (task_dir / "environment" / f).is_file()]
    if compose:
        problems.append(Problem(str(task_dir / "environment" / compose[0]), None, None,
                                "unsupported: compose environments (several services); alight runs one container"))
    if (task_dir / "trajectory.json").is_file():
        problems.append(Problem(str(task_dir / "trajectory.json"), None, None,
                                "unsupported: prior context (an ATIF trajectory seeded before the agent runs)"))
    if config.artifacts:
        warnings.append(Problem(name, key_line(text, ("artifacts",)), "artifacts",
                                "not collected: alight keeps the episode's calls, patch and verifier log"))


def context_hash(folder: Path) -> str:
    """sha256 over the build context's relative paths, executable bits, link targets and bytes, in path order:
    the same folder gives the same key on any machine, any change gives a new one (the image cache's key)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix()):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} -> {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {rel} {os.access(path, os.X_OK):d} {path.stat().st_size}\0".encode())
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        elif path.is_dir():
            digest.update(f"D {rel}\0".encode())
    return digest.hexdigest()


def _ask(policy: tuple[str, list[str]]) -> NetworkAsk:
    return NetworkAsk(mode=policy[0], allowed_hosts=policy[1])


def _safe_dir_name(name: str) -> bool:
    return 0 < len(name) <= MAX_ID and name[0].isalnum() and all(c.isalnum() or c in "._-" for c in name)


def _strip_canary(text: str) -> str:
    """Harbor's strip_canary: leading comment lines naming a canary (anti-contamination markers) and the blank
    lines after them are not shown to the agent."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and "canary" in lines[i].lower() and lines[i].strip().startswith(("<!--", "#")):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def _line_from_message(message: str) -> int | None:
    import re

    m = re.search(r"at line (\d+)", message)
    return int(m.group(1)) if m else None


_EXPECTED = {"float_parsing": "a number", "float_type": "a number", "int_parsing": "an integer",
             "int_type": "an integer", "int_from_float": "an integer", "string_type": "a string",
             "list_type": "an array", "dict_type": "a table", "model_type": "a table", "bool_type": "a boolean",
             "bool_parsing": "a boolean"}


def _message(err: dict) -> str:
    kind = err["type"]
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {json_type(err.get('input'))} ({err.get('input')!r})"
    if kind == "literal_error":
        return f"{err.get('input')!r} is not one of {err['ctx']['expected']}"
    if kind in ("greater_than", "greater_than_equal"):
        bound = err["ctx"].get("gt", err["ctx"].get("ge"))
        return f"must be {'>' if kind == 'greater_than' else '>='} {bound}, got {err.get('input')!r}"
    if kind == "finite_number":
        return "must be a finite number"
    if kind == "missing":
        return "missing (required)"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    return err["msg"]
