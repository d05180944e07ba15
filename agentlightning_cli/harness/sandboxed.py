"""The runner's side of the sandbox: which mode an episode runs in, what it may see, how it reaches the proxy.

`sandbox: bwrap` (the default) wraps the harness in bubblewrap: read-only its install folder and interpreters
plus the recipe's `sandbox.read_only`, read-write its workspace, episode folder (private HOME) and tmp folder.
The proxy is reached through its Unix socket (EpisodeSpec.proxy_socket, or a relay made here for a proxy that
only listens on TCP). `sandbox: none` runs on the host as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from agentlightning_cli.config import EpisodeLimits
from agentlightning_cli.errors import AlightError
from agentlightning_cli.harness.env import EpisodeSpec
from agentlightning_cli.harness.install import Installed
from agentlightning_cli.harness.recipe import Recipe
from agentlightning_cli.sandbox import Sandbox, SandboxSpec, choice, ensure_available
from agentlightning_cli.sandbox.paths import runtime_roots
from agentlightning_cli.sandbox.bwrap import LISTENERS_SOCKET
from agentlightning_cli.sandbox.relay import Relay

LOOPBACK = {"127.0.0.1", "localhost"}


@dataclass
class EpisodeBox:
    box: Sandbox
    relay: Relay | None

    async def close(self) -> None:
        import asyncio

        await asyncio.to_thread(self.box.close)
        if self.relay is not None:
            await self.relay.close()


def resolve(spec: EpisodeSpec) -> tuple[str, EpisodeLimits]:
    """The episode's sandbox mode and limits: the spec's own, else the settings (flags, env, files)."""
    return choice.resolve(spec.sandbox, spec.limits)


async def open_box(recipe: Recipe, installed: Installed, spec: EpisodeSpec, episode_dir: Path,
                   tmpdir: Path) -> EpisodeBox | None:
    """None for `sandbox: none`; otherwise a Sandbox ready to wrap the harness's command line."""
    mode, limits = resolve(spec)
    if mode == "none":
        return None
    bwrap_exe = ensure_available()
    url = urlsplit(spec.base_url)
    if url.hostname not in LOOPBACK or url.port is None:
        raise AlightError(f"a sandboxed episode reaches the proxy on loopback only, not {spec.base_url}",
                          "run the proxy on 127.0.0.1, or use `--sandbox none`")
    relay = None
    socket_path = spec.proxy_socket
    if not socket_path:
        relay = await Relay(url.hostname, url.port).start()
        socket_path = relay.path
    read_only = runtime_roots(installed.dir) + [Path(p).expanduser() for p in recipe.sandbox.read_only]
    # alight's proxy keeps a listener inbox beside its HTTP socket: the sandbox hands it its loopback listener.
    inbox = Path(socket_path).with_name(LISTENERS_SOCKET)
    box_spec = SandboxSpec(writable=[Path(spec.workspace), episode_dir, tmpdir], read_only=read_only,
                           proxy_socket=Path(socket_path), proxy_port=url.port, limits=limits,
                           proxy_listeners=inbox if relay is None and inbox.exists() else None)
    try:
        return EpisodeBox(Sandbox(box_spec, bwrap_exe), relay)
    except BaseException:
        if relay is not None:
            await relay.close()
        raise
