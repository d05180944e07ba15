"""Sandboxed episodes: bubblewrap namespaces, the proxy reached through a Unix socket, per-episode limits.

`bwrap.command` builds the command line, `launch.Sandbox` starts and watches one sandbox, `relay` gives a
proxy that only listens on TCP a Unix socket, `check` reports whether this machine can sandbox.

May import: config, errors. Used by the harness runner and tasks/ (setup and reward shells); it knows
nothing of recipes, the proxy's internals or commands.
"""

from agentlightning_cli.sandbox.bwrap import SandboxSpec, bwrap_path, ensure_available
from agentlightning_cli.sandbox.launch import Sandbox

__all__ = ["Sandbox", "SandboxSpec", "bwrap_path", "ensure_available"]
