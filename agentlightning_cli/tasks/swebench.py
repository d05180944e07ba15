"""SWE-bench instances as tasks: where the repository comes from and what stays hidden from the agent.

Repository location: a published `repo` ("astropy/astropy") resolves to https://github.com/astropy/astropy.git,
unless a *mirror* folder is given (`load_tasks(..., swebench_mirror=DIR)`, `alight tasks check --swebench-mirror
DIR`). A mirror holds one git repository (bare or not) per project, named `owner__name` (SWE-bench's own
spelling, as in instance ids) or `owner/name`; with a mirror, a missing project is an error, never a silent
fallback to the network.
"""

from __future__ import annotations

import re
from pathlib import Path

from agentlightning_cli.tasks.lines import SwebenchLine
from agentlightning_cli.tasks.model import RepoKind, SwebenchSpec

GITHUB_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
GIT_URL = re.compile(r"^(https?|ssh|git|file)://|^[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+:")


def is_git_url(value: str) -> bool:
    return bool(GIT_URL.match(value))


def is_git_repo_dir(path: Path) -> bool:
    """A repository root: a work tree with .git, or a bare repository. A folder merely inside one is not."""
    if (path / ".git").exists():
        return True
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def mirror_candidates(mirror: Path, github_repo: str) -> list[Path]:
    owner, name = github_repo.split("/", 1)
    flat = f"{owner}__{name}"
    return [mirror / flat, mirror / f"{flat}.git", mirror / owner / name, mirror / owner / f"{name}.git"]


def resolve_repo(repo: str, mirror: Path | None) -> tuple[str, RepoKind]:
    """Published `repo` -> (location, kind). Raises ValueError with a message naming what was tried."""
    if is_git_url(repo):
        return repo, "url"
    if not GITHUB_REPO.match(repo):
        raise ValueError(f"expected 'owner/name' (as published) or a git URL, got {repo!r}")
    if mirror is None:
        return f"https://github.com/{repo}.git", "url"
    tried = mirror_candidates(mirror.resolve(), repo)
    for candidate in tried:
        if candidate.is_dir() and is_git_repo_dir(candidate):
            return str(candidate), "git-dir"
    raise ValueError(f"no git repository for {repo} in the mirror; looked for {', '.join(str(p) for p in tried)}")


def spec_from_line(line: SwebenchLine) -> SwebenchSpec:
    return SwebenchSpec(
        test_patch=line.test_patch,
        fail_to_pass=line.FAIL_TO_PASS,
        pass_to_pass=line.PASS_TO_PASS,
        gold_patch=line.patch,
        hints_text=line.hints_text,
        version=line.version,
        environment_setup_commit=line.environment_setup_commit,
        github_repo=line.repo,
        instance_id=line.instance_id,
        eval_script=line.eval_script,
        log_parser=line.log_parser,
        eval_type=line.eval_type,
        image=line.image,
    )


def published_image(instance_id: str, template: str = "swebench/sweb.eval.x86_64.{id}:latest") -> str:
    """The image SWE-bench publishes for an instance: `{id}` is the id in lower case with `__` spelled `_1776_`
    (a registry forbids double underscores), as every published row's `image` column has it."""
    return template.format(id=instance_id.lower().replace("__", "_1776_"))


def test_patch_paths(patch: str) -> list[str]:
    """Files a unified git diff touches (both sides), so they can be reset before the patch is applied."""
    paths: list[str] = []
    for m in re.finditer(r"^diff --git a/(\S+) b/(\S+)$", patch, flags=re.MULTILINE):
        for p in m.groups():
            if p not in paths:
                paths.append(p)
    return paths
