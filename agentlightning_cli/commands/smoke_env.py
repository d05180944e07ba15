"""The smoke environment: a real store, the scripted upstream (scripted/fake_vllm.py) on a real socket unless a
real upstream URL is given, and the recording proxy, started and stopped through commands/lifecycle.py.

`alight harness check` runs one harness episode in it (`SmokeEnvironment(...)` as an async context manager with
`new_episode()` and `run()`); the tests use the same environment through testing/proxy_env.py, which adds
`start_env`/`stop_env` and raw requests, and `ProxyEnv.episode()` for proxy-only tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from agentlightning_cli.commands import lifecycle
from agentlightning_cli.config import ProxySettings
from agentlightning_cli.harness.runner import EpisodeSpec, EpisodeStopper, run_episode, store_call_counter
from agentlightning_cli.store import Store
from agentlightning_cli.scripted.fake_vllm import FakeScript, FakeVLLM

if TYPE_CHECKING:
    from agentlightning_cli.harness.install import Installed
    from agentlightning_cli.harness.outcome import EpisodeOutcome
    from agentlightning_cli.harness.recipe import Recipe
    from agentlightning_cli.proxy.server import Proxy

POLICY = "policy-r0"
SMOKE_PROMPT = "Create a file named out.txt in the current directory with the exact text the task requires."


@dataclass
class ProxyEnv:
    """Store + upstream + proxy. `async with ProxyEnv(...)` or `await env.start()` / `await env.stop()`."""

    run_dir: Path
    script: FakeScript | None = None
    """The scripted model; no fake is started when `upstream_url` points at a real server."""
    proxy_settings: ProxySettings | None = None
    upstream_url: str | list[str] | None = None
    policy: str = POLICY
    ad_hoc: bool = False
    store: Store = None  # type: ignore[assignment]
    fake: FakeVLLM | None = None
    proxy: "Proxy" = None  # type: ignore[assignment]
    keys: dict[str, str] = field(default_factory=dict)
    stopper: EpisodeStopper = field(default_factory=EpisodeStopper)
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def start(self) -> "ProxyEnv":
        if self.upstream_url is None:
            script = self.script or FakeScript()
            if self.policy not in script.served_models:
                script.served_models.append(self.policy)
            self.fake = FakeVLLM(script).start()
            self._stack.callback(self.fake.stop)
        self.store = Store.open(self.run_dir)
        self._stack.callback(self.store.close)
        self.proxy = await self._stack.enter_async_context(lifecycle.proxy_running(
            self.store, self.upstream_url or self.fake.url, self.proxy_settings or ProxySettings(),
            policy=self.policy, ad_hoc=self.ad_hoc, on_budget_exceeded=self.stopper))
        return self

    async def stop(self) -> None:
        await self._stack.aclose()

    async def __aenter__(self) -> "ProxyEnv":
        try:
            return await self.start()
        except BaseException:
            await self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- proxy tests -------------------------------------------------------------------------------------
    def episode(self, seed: int | None = None) -> tuple[str, str]:
        """A new episode created in the store and registered with the proxy (seeded when `seed` is given): (id, key)."""
        key = secrets.token_hex(8)
        ep = self.store.create_episode(None, None, None, 0, "test", key)
        self.proxy.register_episode(ep.id, key, seed=seed)
        self.keys[ep.id] = key
        return ep.id, key

    def url(self, episode_id: str, path: str = "/v1/chat/completions") -> str:
        return f"{self.proxy.base_url}/e/{episode_id}{path}"

    async def calls(self, episode_id: str, count: int, timeout: float = 10.0) -> list[Any]:
        """The episode's calls once `count` are stored (stream records land just after the last byte)."""
        deadline = time.monotonic() + timeout
        while True:
            calls = await asyncio.to_thread(self.store.get_calls, episode_id)
            if len(calls) >= count or time.monotonic() > deadline:
                return calls
            await asyncio.sleep(0.02)

    # --- harness episodes --------------------------------------------------------------------------------
    def new_episode(self, recipe: "Recipe", workspace: Path, prompt: str = SMOKE_PROMPT, **limits: Any) -> EpisodeSpec:
        key = "ek-" + secrets.token_urlsafe(24)
        episode = self.store.create_episode(None, None, "smoke", 0, recipe.name, key, workspace=str(workspace))
        self.proxy.register_episode(episode.id, key)
        workspace.mkdir(parents=True, exist_ok=True)
        return EpisodeSpec(episode_id=episode.id, prompt=prompt, workspace=workspace,
                           base_url=self.proxy.episode_base_url(episode.id, recipe.protocol), api_key=key,
                           run_dir=self.run_dir, proxy_socket=self.proxy.unix_path,
                           proxy_listeners=self.proxy.listeners_path or None, **limits)

    async def run(self, recipe: "Recipe", installed: "Installed", spec: EpisodeSpec) -> "EpisodeOutcome":
        return await run_episode(recipe, installed, spec, store_call_counter(self.store), self.stopper)


def SmokeEnvironment(run_dir: Path, reply: Callable[[dict], dict] | None = None, proxy_settings: Any = None,
                     upstream_url: str | None = None, policy: str = POLICY) -> ProxyEnv:
    """A harness environment whose scripted model is `reply` (ignored when `upstream_url` is given)."""
    script = FakeScript(reply=reply, served_models=[policy]) if upstream_url is None else None
    return ProxyEnv(Path(run_dir), script, proxy_settings, upstream_url, policy)
