"""The runner's side of the sandbox: which mode an episode runs in, what it may see, how it reaches the proxy.

`sandbox: bwrap` (the default) wraps the harness in bubblewrap: read-only its install folder and interpreters
(an external recipe: only the files its command runs and their interpreters, sandbox/paths.program_roots) plus
the recipe's `sandbox.read_only`, read-write its workspace, episode folder (private HOME) and tmp folder. What
is mounted read-only is checked against the protected places once per run, before any episode
(`check_mounts`, sandbox/exposure.py).
The proxy is reached through its Unix socket (EpisodeSpec.proxy_socket, or a relay made here for a proxy that
only listens on TCP). `sandbox: container` does the same in a container from the task's image (the harness's
install and interpreters mounted read-only at their host paths). `sandbox: none` runs on the host as before.
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
from agentlightning_cli.sandbox import ContainerSandbox, Sandbox, SandboxSpec, choice, ensure_available, open_sandbox
from agentlightning_cli.sandbox.exposure import Mount
from agentlightning_cli.sandbox.paths import image_interpreters, program_roots, runtime_roots
from agentlightning_cli.sandbox.relay import Relay

LOOPBACK = {"127.0.0.1", "localhost"}


@dataclass
class EpisodeBox:
    box: Sandbox | ContainerSandbox
    relay: Relay | None
    mode: str = "bwrap"

    async def close(self) -> None:
        import asyncio

        await asyncio.to_thread(self.box.close)
        if self.relay is not None:
            await self.relay.close()


def resolve(spec: EpisodeSpec) -> tuple[str, EpisodeLimits]:
    """The episode's sandbox mode and limits: the spec's own, else the settings (flags, env, files)."""
    return choice.resolve(spec.sandbox, spec.limits)


def harness_mounts(recipe: Recipe, installed: Installed, argv: list[str], path: str | None,
                   private: list[Path] = ()) -> list[Mount]:
    """What the harness's sandbox shows read-only: its install and interpreters (an external recipe: the files
    its command line `argv` runs, found on `path`, and their interpreters), then the recipe's sandbox.read_only.
    `private`: the episode's own writable folders (nothing in them needs a mount)."""
    if installed.external:
        found = [Mount(p, "named by the recipe's command, or its interpreter", single_file=p.is_file())
                 for p in program_roots(argv, path, list(private))]
    else:
        found = [Mount(p, f"the {recipe.name} install and its interpreters") for p in runtime_roots(installed.dir)]
    return found + [Mount(Path(p).expanduser(), f"sandbox.read_only of {recipe.source}") for p in recipe.sandbox.read_only]


def planned_mounts(recipe: Recipe, installed: Installed) -> list[Mount]:
    """harness_mounts for the run's check, before any episode: the command rendered with placeholder episode
    paths (a workspace-relative program is found per episode, inside the workspace, and needs no mount)."""
    import os

    from agentlightning_cli.harness.env import harness_env
    from agentlightning_cli.harness.recipe import dummy_context

    nowhere = "/nonexistent/alight-episode"
    ctx = {**dummy_context(), "recipe_dir": str(recipe.recipe_dir), "install_dir": str(installed.dir),
           "bin_dir": str(installed.bin_dir), "executable": str(installed.executable), "workspace": f"{nowhere}/ws",
           "episode_dir": nowhere, "home": f"{nowhere}/home", "tmpdir": f"{nowhere}/tmp",
           "prompt_file": f"{nowhere}/prompt.txt"}
    argv = [recipe.render(part, ctx) for part in recipe.command]
    path = harness_env().get("PATH", os.defpath)
    if installed.external:
        from agentlightning_cli.harness.env import resolve_program

        argv[0] = resolve_program(argv[0], recipe.recipe_dir, None, path) or argv[0]
    return harness_mounts(recipe, installed, argv, path)


async def open_box(recipe: Recipe, installed: Installed, spec: EpisodeSpec, episode_dir: Path,
                   tmpdir: Path, argv: list[str], path: str | None) -> EpisodeBox | None:
    """None for `sandbox: none`; otherwise a Sandbox ready to wrap the harness's command line `argv` (as it will
    run, with the episode's PATH `path`)."""
    mode, limits = resolve(spec)
    if mode == "none":
        return None
    if mode == "container" and spec.image is None:
        raise AlightError("sandbox 'container' needs an image for this task, and it has none",
                          "give the task line an `image`, or set `container.image` in alight.yaml")
    bwrap_exe = ensure_available() if mode == "bwrap" else None
    url = urlsplit(spec.base_url)
    if url.hostname not in LOOPBACK or url.port is None:
        raise AlightError(f"a sandboxed episode reaches the proxy on loopback only, not {spec.base_url}",
                          "run the proxy on 127.0.0.1, or use `--sandbox none`")
    relay = None
    socket_path = spec.proxy_socket
    if spec.proxy_remote:  # the proxy is on another machine: relayed to over TCP, the harness sees loopback
        host, _, port = spec.proxy_remote.rpartition(":")
        relay = await Relay(host, int(port)).start()
        socket_path = relay.path
    elif not socket_path:
        relay = await Relay(url.hostname, url.port).start()
        socket_path = relay.path
    private = [Path(spec.workspace), episode_dir, tmpdir]
    read_only = [m.path for m in harness_mounts(recipe, installed, argv, path, private)]
    if mode == "container" and not installed.external:  # the image's /usr is not the host's
        read_only += image_interpreters(installed.dir)
    # The proxy's listener inbox, when it gave one: the sandbox hands it its loopback listener.
    inbox = Path(spec.proxy_listeners) if spec.proxy_listeners and relay is None else None
    box_spec = SandboxSpec(writable=private, read_only=read_only,
                           proxy_socket=Path(socket_path), proxy_port=url.port, limits=limits,
                           proxy_listeners=inbox if inbox is not None and inbox.exists() else None,
                           image=spec.image if mode == "container" else None, runtime=spec.container_runtime,
                           workdir=spec.container_workdir if mode == "container" else None,
                           task_fs=spec.task_fs if mode == "container" else None)
    try:
        return EpisodeBox(open_sandbox(box_spec, bwrap_exe), relay, mode)
    except BaseException:
        if relay is not None:
            await relay.close()
        raise
