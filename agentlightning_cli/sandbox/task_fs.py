"""A Harbor task's container file system as an episode's sandbox uses it (`sandbox: container`).

Harbor runs the agent and then the verifier in ONE container (harbor/verifier/verifier.py): whatever the agent
changed anywhere in the image's file system is what test.sh sees. alight's container sandbox runs one command
per container, so for such a task the harness's container works in the image's own file system (no workspace
bound over it, /tmp not replaced), starts in the task's workdir as its agent user with its environment, CPUs and
memory, and is committed to an image when the harness ends (`commit_to`): the verifier's container starts from
that image (tasks/harbor_run.verify), with the agent's files and none of its processes, as if every process the
agent left had been killed (which Harbor's own verifier does not do; alight does it in both paths).
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass, field

TRIAL_REPOSITORY = "localhost/alight-harbor-trial"


@dataclass
class TaskFS:
    workdir: str | None
    """The agent's working directory ([environment].workdir); None: the image's WORKDIR."""
    user: str | int | None
    """[agent].user; None: the image's USER."""
    env: dict[str, str] = field(default_factory=dict)
    """[environment].env, templates resolved."""
    cpus: float | None = None
    storage_mb: int | None = None
    """`--storage-opt size=` when the runtime's storage driver enforces it (`storage_note` says when it does not)."""
    storage_note: str | None = None
    commit_to: str = ""
    """The image the agent's container becomes when the harness ends (removed after the verifier)."""
    committed: bool = False
    commit_error: str | None = None
    """Why the agent's container could not be kept (the verifier then cannot grade its work: reward_error)."""


@functools.lru_cache(maxsize=8)
def storage_refused(runtime: str, flags: tuple[str, ...], image: str) -> str | None:
    """None when the runtime can cap a container's writable layer here (overlay on XFS with project quotas);
    otherwise its own words (podman and docker refuse `--storage-opt size=` on overlay over ext4). Once per run."""
    from agentlightning_cli.sandbox.container import PROBE_TIMEOUT_S, ulimit_args

    proc = subprocess.run([runtime, *flags, "run", "--rm", "--pull", "never", "--network", "none", *ulimit_args(),
                           "--storage-opt", "size=64m", "--entrypoint", "true", image], capture_output=True,
                          text=True, timeout=PROBE_TIMEOUT_S)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else f"exit {proc.returncode}"


def trial_image(episode_id: str) -> str:
    return f"{TRIAL_REPOSITORY}:{episode_id.lower()}"
