"""What a loaded task is, and how a problem with a task file is reported."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# How the workspace is made: nothing (empty repo), a copied plain folder, a fetched local git repo, a remote URL.
RepoKind = Literal["none", "dir", "git-dir", "url"]


class SwebenchSpec(BaseModel):
    """The parts of a SWE-bench instance that only the reward side may see."""

    model_config = ConfigDict(frozen=True)

    test_patch: str = Field(repr=False)
    """Applied with `git apply` only after the agent finishes."""
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    # The reference fix: kept for analysis, never written to a workspace, a prompt, a dump or a repr.
    gold_patch: str | None = Field(default=None, repr=False, exclude=True)
    hints_text: str | None = Field(default=None, repr=False)
    """Published discussion; not part of the prompt (SWE-bench's default setting gives no hints)."""
    version: str | None = None
    environment_setup_commit: str | None = None
    github_repo: str
    """`owner/name` as published."""
    instance_id: str = ""
    eval_script: str | None = Field(default=None, repr=False)
    """SWE-bench 5.x: the row's own eval script (test-file reset, test_patch inlined, markers, the test command)."""
    log_parser: str | None = None
    """SWE-bench 5.x: the key of the official parser for its test log (`parse_log_pytest`, ...)."""
    eval_type: str | None = None
    """SWE-bench 5.x: `pass_and_fail` or `fail_only`."""
    image: str | None = None
    """The row's own `image` column (the instance's published image), when it has one."""

    @property
    def gradable(self) -> bool:
        """Whether the official grading can run: the row says how (eval script, log parser, eval type)."""
        return bool(self.eval_script and self.log_parser and self.eval_type)


SWEBENCH_WORKDIR = "/testbed"


class NetworkAsk(BaseModel):
    """What a Harbor task's network policy asks for one phase (the agent or the verifier), as written."""

    model_config = ConfigDict(frozen=True)

    mode: Literal["no-network", "public", "allowlist"]
    allowed_hosts: list[str] = Field(default_factory=list)

    def __str__(self) -> str:
        return f"allowlist ({', '.join(self.allowed_hosts)})" if self.mode == "allowlist" else self.mode


class HarborSpec(BaseModel):
    """A Harbor task directory's settings (task.toml and the files beside it), as alight runs them."""

    model_config = ConfigDict(frozen=True)

    task_dir: Path
    schema_version: str
    docker_image: str | None
    """`[environment].docker_image`: used as given; else the image is built from `build_context`."""
    build_context: Path | None
    """The task's environment/ folder (its Dockerfile) when there is no docker_image."""
    context_sha256: str | None
    """Content hash of the build context (paths, modes and bytes): the built image's cache key."""
    build_timeout_s: float
    cpus: float | None
    memory_mb: int | None
    storage_mb: int | None
    workdir: str | None
    """The agent's (and test.sh's) working directory; None: the image's WORKDIR."""
    env: dict[str, str]
    """`[environment].env`, set for the agent and the verifier (${VAR} templates are resolved at run time)."""
    agent_network: NetworkAsk
    verifier_network: NetworkAsk
    agent_timeout_s: float | None
    agent_user: str | int | None
    verifier_timeout_s: float
    verifier_env: dict[str, str]
    verifier_user: str | int | None
    healthcheck: str | None
    """A command that must succeed before the agent starts (`[environment.healthcheck].command`)."""
    tests_dir: Path
    """Copied to /tests only after the agent has run; never seen by the agent."""
    solution_dir: Path | None
    """Holds solution/solve.sh (the oracle harness runs it); None when the task ships no solution."""
    solution_env: dict[str, str] = Field(default_factory=dict)


HARBOR_REWARD = "bash /tests/test.sh"
"""A Harbor task's `reward`: its verifier, run in the episode's container after the agent (tasks/harbor.py)."""
HARBOR_VERIFIER_DIR = "/logs/verifier"
"""Where test.sh writes reward.txt (one finite number) or reward.json ({"name": number, ...})."""


class Task(BaseModel):
    """One line of a task set, validated and with every path resolved to an absolute one."""

    model_config = ConfigDict(frozen=True)

    id: str
    prompt: str
    repo: str | None
    """Absolute local path or git URL (resolved); None means the agent starts from an empty repository."""
    repo_kind: RepoKind
    base_commit: str | None
    setup: list[str]
    reward: str
    """Shell command run in the workspace after the agent (and after the hidden files are revealed)."""
    hidden_files: Path | None
    """Absolute folder copied into the workspace only after the agent finishes."""
    timeout_s: float | None
    """Wall-clock limit for the agent's run on this task; None means the harness default."""
    metadata: dict[str, Any]
    kind: Literal["own", "swebench", "harbor"]
    source_file: Path
    source_line: int
    swebench: SwebenchSpec | None = None
    setup_network: bool = False
    """Setup commands run in a sandbox with the host's network (reward commands never get one)."""
    image: str | None = None
    """`sandbox: container`: the image its setup, agent and reward run in; None: the `container.image` setting."""
    harbor: HarborSpec | None = None
    """A Harbor task directory: its environment, verifier and solution (`reward` is then HARBOR_REWARD)."""

    @property
    def reward_kind(self) -> str:
        if self.swebench is not None and self.reward == swebench_reward_command():
            return "swebench-tests"
        if self.harbor is not None:
            return "harbor-test.sh"
        return "command"

    @property
    def has_hidden(self) -> bool:
        return self.hidden_files is not None or self.swebench is not None or self.harbor is not None

    @property
    def where(self) -> str:
        return f"{self.source_file}:{self.source_line}"

    @property
    def container_workdir(self) -> str | None:
        """Under `sandbox: container`, where the image has the project (SWE-bench's images: /testbed): the
        workspace is made from it and bound there. None: the workspace is bound at its own path."""
        return SWEBENCH_WORKDIR if self.kind == "swebench" else None


def swebench_reward_command() -> str:
    """The reward command of a SWE-bench task: our test runner under the interpreter running alight."""
    import shlex
    import sys

    return f"{shlex.quote(sys.executable)} -m agentlightning_cli.tasks.swebench_tests"


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or worth a warning) in a task file; line and field are None when they do not apply."""

    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}" if self.field is None else f"{where}: field '{self.field}': {self.message}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
