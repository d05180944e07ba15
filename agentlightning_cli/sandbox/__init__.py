"""Sandboxed episodes: bubblewrap namespaces, the proxy reached through a Unix socket, per-episode limits.

`bwrap.command` builds the command line, `launch.Sandbox` starts and watches one sandbox, `container` does
the same in a container from an image (`sandbox: container`), `relay` gives a
proxy that only listens on TCP a Unix socket, `check` reports whether this machine can sandbox.

May import: config, errors. Used by the harness runner and tasks/ (setup and reward shells); it knows
nothing of recipes, the proxy's internals or commands.
"""

from agentlightning_cli.sandbox.bwrap import SandboxSpec, bwrap_path, ensure_available
from agentlightning_cli.sandbox.container import ContainerSandbox
from agentlightning_cli.sandbox.launch import Sandbox


def open_sandbox(spec: SandboxSpec, bwrap_exe: str | None = None) -> Sandbox | ContainerSandbox:
    """The sandbox for one command: a container from spec.image when it names one, else bubblewrap."""
    return ContainerSandbox(spec) if spec.image is not None else Sandbox(spec, bwrap_exe)


__all__ = ["ContainerSandbox", "Sandbox", "SandboxSpec", "bwrap_path", "ensure_available", "open_sandbox"]
