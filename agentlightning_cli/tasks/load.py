"""Read a JSONL task set, collecting every problem (file, line, field) instead of stopping at the first."""

from __future__ import annotations

import codecs
import json
import logging
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentlightning_cli.errors import AlightError
from agentlightning_cli.tasks.lines import OwnLine, SwebenchLine, describe_errors, is_swebench, json_type
from agentlightning_cli.tasks.model import Problem, RepoKind, Task, swebench_reward_command
from agentlightning_cli.tasks.swebench import is_git_repo_dir, is_git_url, resolve_repo, spec_from_line

log = logging.getLogger(__name__)


@dataclass
class TaskSetReport:
    """Everything `alight tasks check` shows: the valid tasks, the errors and the warnings."""

    file: Path
    tasks: list[Task] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        t = self.tasks
        return {
            "kinds": dict(Counter(x.kind for x in t)),
            "repos": dict(Counter(x.repo or "(empty repository)" for x in t)),
            "repo_kinds": dict(Counter(x.repo_kind for x in t)),
            "hidden_files": {"with": sum(x.has_hidden for x in t), "without": sum(not x.has_hidden for x in t)},
            "reward_kinds": dict(Counter(x.reward_kind for x in t)),
            "with_setup": sum(bool(x.setup) for x in t),
            "harbor": [harbor_row(x) for x in t if x.harbor is not None],
        }

    def to_json(self) -> dict[str, Any]:
        # A Harbor dataset's problems are in many files; a JSONL set's are all in report.file.
        strip = lambda p: {"file": p.file, "line": p.line, "field": p.field, "message": p.message}  # noqa: E731
        return {
            "file": str(self.file),
            "ok": self.ok,
            "tasks": len(self.tasks),
            "problems": [strip(p) for p in self.problems],
            "warnings": [strip(p) for p in self.warnings],
            "summary": self.summary(),
        }


def harbor_row(task: Task) -> dict[str, Any]:
    """A Harbor task as `alight tasks check` shows it: its environment, what its network policy asks for, limits."""
    h = task.harbor
    return {"id": task.id, "dir": str(h.task_dir),
            "environment": f"image {h.docker_image}" if h.docker_image else f"Dockerfile ({h.context_sha256[:12]})",
            "agent_network": str(h.agent_network), "verifier_network": str(h.verifier_network),
            "agent_timeout_s": h.agent_timeout_s, "verifier_timeout_s": h.verifier_timeout_s,
            "cpus": h.cpus, "memory_mb": h.memory_mb, "storage_mb": h.storage_mb, "workdir": h.workdir,
            "user": h.agent_user, "solution": h.solution_dir is not None}


def load_tasks(path: Path | str, swebench_mirror: Path | str | None = None) -> list[Task]:
    """The tasks of a valid set; otherwise AlightError listing every problem. Warnings go to the log."""
    report = check_task_file(path, swebench_mirror)
    for w in report.warnings:
        log.warning("%s", w)
    if not report.ok:
        n = len(report.problems)
        listing = "\n".join(f"  {p}" for p in report.problems)
        raise AlightError(
            f"task set {report.file} has {n} problem{'s' if n != 1 else ''}:\n{listing}",
            f"fix them and run `alight tasks check {report.file}`",
        )
    return report.tasks


def check_task_file(path: Path | str, swebench_mirror: Path | str | None = None) -> TaskSetReport:
    """Validate a task set without raising for its content: every problem ends up in the report."""
    path = Path(path).expanduser().absolute()
    report = TaskSetReport(file=path)
    name = str(path)
    mirror = Path(swebench_mirror).expanduser().absolute() if swebench_mirror is not None else None
    if mirror is not None and not mirror.is_dir():
        report.problems.append(Problem(name, None, None, f"SWE-bench mirror folder does not exist: {mirror}"))
    if path.is_dir():
        return _check_harbor_dir(report)
    if not path.is_file():
        report.problems.append(Problem(name, None, None, "task file does not exist"))
        return report
    first_line: dict[str, int] = {}
    for lineno, obj in _json_lines(path, report):
        task = _task_from_object(obj, path, lineno, mirror, report)
        raw_id = obj.get("instance_id" if is_swebench(obj) else "id")
        if isinstance(raw_id, str):
            if raw_id in first_line:
                field_name = "instance_id" if is_swebench(obj) else "id"
                msg = f"duplicate id {raw_id!r} (first used on line {first_line[raw_id]})"
                report.problems.append(Problem(name, lineno, field_name, msg))
                continue
            first_line[raw_id] = lineno
        if task is not None:
            report.tasks.append(task)
    _check_base_commits(report)
    report.problems.sort(key=lambda p: (p.line or 0))
    return report


def _check_harbor_dir(report: TaskSetReport) -> TaskSetReport:
    """A folder is a Harbor task directory or dataset (tasks/harbor.py): every task checked, names unique."""
    from agentlightning_cli.tasks.harbor import check_task_dir, find_task_dirs

    dirs = find_task_dirs(report.file)
    if not dirs:
        msg = ("is a folder with no Harbor task directory in it (a folder with task.toml, found at any depth); "
               "a JSONL task set is a file")
        report.problems.append(Problem(str(report.file), None, None, msg))
        return report
    first: dict[str, Path] = {}
    for task_dir in dirs:
        task = check_task_dir(task_dir, report.problems, report.warnings)
        if task is None:
            continue
        if task.id in first:
            msg = f"duplicate task name {task.id!r} (also {first[task.id] / 'task.toml'})"
            report.problems.append(Problem(str(task.source_file), None, "task.name", msg))
            continue
        first[task.id] = task_dir
        report.tasks.append(task)
    return report


def _json_lines(path: Path, report: TaskSetReport):
    """Yield (line number, object) for each non-blank line that is a JSON object; report everything else."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        report.problems.append(Problem(name, None, None, f"cannot read the task file: {exc.strerror}"))
        return
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        report.problems.append(Problem(name, 1, None, "file is UTF-16 (it starts with a UTF-16 BOM); save it as UTF-8"))
        return
    offset = 0
    if raw.startswith(codecs.BOM_UTF8):
        report.warnings.append(Problem(name, 1, None, "file starts with a UTF-8 BOM; accepted and ignored"))
        offset = len(codecs.BOM_UTF8)
    if not raw[offset:].strip():
        msg = "file is empty: a task set needs at least one task (one JSON object per line)"
        if raw[offset:]:
            msg = "file has only blank lines: a task set needs at least one task (one JSON object per line)"
        report.problems.append(Problem(name, None, None, msg))
        return
    for lineno, chunk in enumerate(raw[offset:].split(b"\n"), start=1):
        start = offset
        offset += len(chunk) + 1
        chunk = chunk[:-1] if chunk.endswith(b"\r") else chunk  # CRLF files are fine
        if lineno > 1 and chunk.startswith(codecs.BOM_UTF8):
            msg = "line starts with a UTF-8 BOM (files concatenated?); ignored"
            report.warnings.append(Problem(name, lineno, None, msg))
            chunk, start = chunk[len(codecs.BOM_UTF8) :], start + len(codecs.BOM_UTF8)
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = chunk[exc.start]
            msg = (
                f"not valid UTF-8: byte 0x{bad:02x} at byte offset {start + exc.start} of the file"
                f" (column {exc.start + 1})"
            )
            report.problems.append(Problem(name, lineno, None, msg))
            continue
        if not text.strip():
            continue
        repeated: list[str] = []
        try:
            obj = json.loads(text, object_pairs_hook=lambda pairs: _no_repeats(pairs, repeated))
        except json.JSONDecodeError as exc:
            report.problems.append(Problem(name, lineno, None, f"not valid JSON: {exc.msg} (column {exc.colno})"))
            continue
        for key in dict.fromkeys(repeated):
            # json.loads would silently keep the last value; a repeated key is almost always an editing mistake.
            report.problems.append(Problem(name, lineno, key, "appears more than once in the same object"))
        if not isinstance(obj, dict):
            report.problems.append(Problem(name, lineno, None, f"expected a JSON object, got {json_type(obj)}"))
            continue
        yield lineno, obj


def _no_repeats(pairs: list[tuple[str, Any]], repeated: list[str]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            repeated.append(key)
        seen[key] = value
    return seen


def _task_from_object(obj: dict, path: Path, lineno: int, mirror: Path | None, report: TaskSetReport) -> Task | None:
    name = str(path)
    swebench = is_swebench(obj)
    problems: list[Problem] = []
    try:
        line = (SwebenchLine if swebench else OwnLine).model_validate(obj)
    except ValidationError as exc:
        problems = [Problem(name, lineno, f, m) for f, m in describe_errors(exc, swebench)]
        report.problems.extend(problems)
        return None
    base = path.parent
    if isinstance(line, SwebenchLine):
        if not line.FAIL_TO_PASS and not line.PASS_TO_PASS:
            msg = "FAIL_TO_PASS and PASS_TO_PASS are both empty: no reward"
            problems.append(Problem(name, lineno, "FAIL_TO_PASS", msg))
        try:
            repo, repo_kind = resolve_repo(line.repo, mirror)
        except ValueError as exc:
            problems.append(Problem(name, lineno, "repo", str(exc)))
            repo, repo_kind = None, "none"
        fields: dict[str, Any] = dict(
            id=line.instance_id,
            prompt=line.problem_statement,
            base_commit=line.base_commit,
            reward=line.reward or swebench_reward_command(),
            hidden_files=None,
            kind="swebench",
            swebench=spec_from_line(line),
        )
    else:
        repo, repo_kind = _resolve_own_repo(line, base, name, lineno, problems)
        if repo_kind == "dir" and path.is_relative_to(repo or "/nonexistent"):
            msg = f"the task file is inside the repo {repo}: the agent can read every prompt and reward command"
            report.warnings.append(Problem(name, lineno, "repo", msg))
        hidden = None
        if line.hidden_files is not None:
            hidden = (base / Path(line.hidden_files).expanduser()).resolve()
            if not hidden.is_dir():
                what = "is not a folder" if hidden.exists() else "does not exist"
                problems.append(Problem(name, lineno, "hidden_files", f"{what}: {hidden}"))
            elif repo_kind in ("dir", "git-dir") and hidden.is_relative_to(repo or "/nonexistent"):
                msg = f"{hidden} is inside the repo {repo}, so the agent would see it; move it out of the repo"
                problems.append(Problem(name, lineno, "hidden_files", msg))
        fields = dict(
            id=line.id, prompt=line.prompt, base_commit=line.base_commit, reward=line.reward,
            hidden_files=hidden, kind="own", setup_network=line.setup_network, image=line.image,
        )  # fmt: skip
        if line.setup_network and not line.setup:
            report.warnings.append(Problem(name, lineno, "setup_network", "true, but the task has no setup commands"))
    report.problems.extend(problems)
    if problems:
        return None
    return Task(
        repo=repo, repo_kind=repo_kind, setup=line.setup, timeout_s=line.timeout_s, metadata=line.metadata,
        source_file=path, source_line=lineno, **fields,
    )  # fmt: skip


def _resolve_own_repo(
    line: OwnLine, base: Path, name: str, lineno: int, problems: list[Problem]
) -> tuple[str | None, RepoKind]:
    if line.repo is None:
        if line.base_commit is not None:
            problems.append(Problem(name, lineno, "base_commit", "given without a repo"))
        return None, "none"
    if is_git_url(line.repo):
        return line.repo, "url"
    repo = (base / Path(line.repo).expanduser()).resolve()
    if not repo.is_dir():
        what = "is not a folder" if repo.exists() else "does not exist"
        msg = f"repo path {what}: {repo} (paths are relative to the task file)"
        problems.append(Problem(name, lineno, "repo", msg))
        return None, "none"
    if is_git_repo_dir(repo):
        return str(repo), "git-dir"
    if line.base_commit is not None:
        msg = f"given, but the repo {repo} is a plain folder, not a git repository (no .git)"
        problems.append(Problem(name, lineno, "base_commit", msg))
    return str(repo), "dir"


def _check_base_commits(report: TaskSetReport) -> None:
    """One `git cat-file --batch-check` per local repository, so thousands of SWE-bench lines stay fast."""
    by_repo: dict[str, list[Task]] = {}
    for t in report.tasks:
        if t.repo_kind == "git-dir" and t.base_commit:
            by_repo.setdefault(t.repo, []).append(t)
    bad: set[int] = set()
    for repo, tasks in by_repo.items():
        query = "".join(f"{t.base_commit}^{{commit}}\n" for t in tasks)
        proc = subprocess.run(
            ["git", "-C", repo, "cat-file", "--batch-check"], input=query, capture_output=True, text=True, check=False
        )
        answers = proc.stdout.splitlines()
        for t, answer in zip(tasks, answers + [""] * len(tasks)):
            parts = answer.split()  # "<sha> commit <size>", or "<name> missing" / "<name> ambiguous"
            if proc.returncode != 0 or len(parts) != 3 or parts[1] != "commit":
                why = parts[-1] if len(parts) == 2 else "not found"
                msg = f"commit {t.base_commit!r} {why} in {repo}"
                report.problems.append(Problem(str(report.file), t.source_line, "base_commit", msg))
                bad.add(id(t))
    report.tasks = [t for t in report.tasks if id(t) not in bad]
