"""Which sandbox a command runs in: the caller's explicit choice, else the settings (default `bwrap`)."""

from __future__ import annotations

from pathlib import Path

from agentlightning_cli.config import EpisodeLimits, load_settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.sandbox.bwrap import SandboxSpec
from agentlightning_cli.sandbox.paths import task_shell_roots

MODES = ("bwrap", "container", "none")


def resolve(mode: str | None, limits: EpisodeLimits | None) -> tuple[str, EpisodeLimits]:
    if mode is None or limits is None:
        settings = load_settings()
        mode = mode or settings.sandbox
        limits = limits or settings.episode_limits
    if mode not in MODES:
        raise AlightError(f"unknown sandbox '{mode}'", "use `bwrap`, `container` or `none`")
    return mode, limits


def task_shell_spec(workspace: Path, *, network: bool, mode: str | None = None, limits: EpisodeLimits | None = None,
                    read_only: list[Path] | None = None, with_alight: bool = False, image: str | None = None,
                    runtime: str = "auto", workdir: str | None = None) -> SandboxSpec | None:
    """The sandbox for a task's setup or reward command over `workspace`; None for `sandbox: none`. with_alight:
    alight's own package is visible too (a SWE-bench reward runs it). `sandbox: container` runs it in `image`
    (the task's, or `container.image` given by the caller) on `runtime`."""
    mode, limits = resolve(mode, limits)
    if mode == "none":
        return None
    if mode == "container" and image is None:
        raise AlightError("sandbox 'container' needs an image for this task, and it has none",
                          "give the task line an `image`, or set `container.image` in alight.yaml")
    return SandboxSpec(writable=[Path(workspace)], read_only=[*task_shell_roots(with_alight), *(read_only or [])],
                       network=network, limits=limits, image=image if mode == "container" else None,
                       runtime=runtime, workdir=workdir if mode == "container" else None)
