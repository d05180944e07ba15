"""The episode's environment: what a harness process may see (scrubbed parent env) and the template context a
recipe renders with. Imports only harness/recipe.py of the harness package."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlightning_cli.harness.recipe import Recipe

if TYPE_CHECKING:
    from agentlightning_cli.harness.install import Installed

# The parent's provider keys, proxies and tool settings must never leak into a harness: it would talk to
# a real provider, or pick up a developer's config instead of alight's.
SCRUB_PREFIXES = (
    "ALIGHT_", "OPENAI_", "ANTHROPIC_", "CLAUDE_", "CODEX_", "LLM_", "LITELLM_", "MSWEA_", "HOSTED_VLLM_",
    "OPENHANDS_", "GEMINI_", "GOOGLE_", "AZURE_", "AWS_", "OPENROUTER_", "MISTRAL_", "GROQ_", "TOGETHER",
    "DEEPSEEK_", "XAI_", "HF_", "HUGGING", "XDG_", "TMUX", "VIRTUAL_ENV", "CONDA_", "PYTHON", "NODE_OPTIONS",
    "RAY_",  # on a Ray node: RAY_AUTH_TOKEN would let the agent run code on every node of the cluster
)
SCRUB_NAMES = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "PYENV_VERSION",
               # alight's own working directory, not the harness's: a container runs the harness with no shell to
               # correct it, and OpenCode takes PWD over getcwd() as its project folder (a path absent in the image).
               "PWD", "OLDPWD"}


@dataclass
class EpisodeSpec:
    episode_id: str
    prompt: str
    workspace: Path
    base_url: str
    """The proxy's base URL for this episode and the recipe's protocol (proxy.episode_base_url)."""
    api_key: str
    run_dir: Path
    max_turns: int | None = None
    timeout_s: float | None = None
    model: str | None = None
    sandbox: str | None = None
    """"bwrap", "container" or "none"; None: the `sandbox` setting (default bwrap)."""
    image: str | None = None
    """`sandbox: container`: the image the harness runs in (the task's, or `container.image`)."""
    container_runtime: str = "auto"
    """`sandbox: container`: podman, docker, or auto."""
    container_workdir: str | None = None
    """`sandbox: container`: where the image has the project (SWE-bench: /testbed); the workspace is bound there
    too and the harness starts there."""
    limits: Any = None
    """config.EpisodeLimits; None: the `episode_limits` setting."""
    task_fs: Any = None
    """`sandbox: container`, a Harbor task: a sandbox.task_fs.TaskFS (the harness works in the image's own file
    system, kept for the verifier when it ends)."""
    proxy_socket: str | None = None
    """The proxy's Unix socket (Proxy.unix_path); None: a relay to base_url's port is made for the episode."""
    proxy_listeners: str | None = None
    """The proxy's listener inbox (Proxy.listeners_path): the sandbox hands it its loopback listener and the proxy
    accepts the harness's connections itself; None: connections go through proxy_socket."""
    proxy_remote: str | None = None
    """host:port of a proxy on another machine (an episode on a Ray worker node): the sandbox relays to it and the
    harness is handed base_url on loopback."""


def harness_env(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if name.startswith(SCRUB_PREFIXES) or name in SCRUB_NAMES:
            del env[name]
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def episode_context(recipe: Recipe, installed: "Installed", spec: EpisodeSpec, episode_dir: Path, tmpdir: Path) -> dict[str, Any]:
    return {
        "prompt": spec.prompt, "workspace": str(spec.workspace), "episode_id": spec.episode_id,
        "episode_dir": str(episode_dir), "home": str(episode_dir / "home"), "tmpdir": str(tmpdir),
        "prompt_file": str(episode_dir / "prompt.txt"),  # the prompt, written before launch (see Recipe.stdin)
        "base_url": spec.base_url, "api_key": spec.api_key, "model": spec.model or recipe.model,
        "install_dir": str(installed.dir), "bin_dir": str(installed.bin_dir), "executable": str(installed.executable),
        "is_root": os.geteuid() == 0,
        "max_turns": spec.max_turns if spec.max_turns is not None else (recipe.max_turns or 0),
        "timeout_s": spec.timeout_s or recipe.timeout_s, "recipe_dir": str(recipe.recipe_dir),
    }


def resolve_program(program: str, recipe_dir: Path, workspace: Path | None = None, path: str | None = None) -> str | None:
    """Where an external recipe's program is: an absolute path as is; a path with a slash relative to the recipe
    file's folder, then the workspace; a bare name on PATH (`path`, default the current PATH). None: not found."""
    if os.path.isabs(program):
        return program if os.access(program, os.X_OK) else None
    if "/" in program:
        for base in (recipe_dir, workspace):
            if base is not None and os.access(Path(base) / program, os.X_OK):
                return str((Path(base) / program).resolve())
        return None
    return shutil.which(program, path=path)


