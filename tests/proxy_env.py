"""Shared setup for the proxy tests: a real store, the scripted fake vLLM on a real socket, the proxy."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from agentlightning_cli.config import ProxySettings
from agentlightning_cli.proxy import Proxy
from agentlightning_cli.store import Store
from agentlightning_cli.testing.fake_vllm import FakeScript, FakeVLLM

POLICY = "policy-r0"


@dataclass
class ProxyEnv:
    store: Store
    fake: FakeVLLM
    proxy: Proxy
    keys: dict[str, str] = field(default_factory=dict)

    def episode(self) -> tuple[str, str]:
        """A new episode created in the store and registered with the proxy: (id, key)."""
        key = secrets.token_hex(8)
        ep = self.store.create_episode(None, None, None, 0, "test", key)
        self.proxy.register_episode(ep.id, key)
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


async def start_env(tmp_path: Path, script: FakeScript | None = None, upstream: str | None = None,
                    ad_hoc: bool = False, **settings: Any) -> ProxyEnv:
    store = Store.open(tmp_path / "run")
    script = script or FakeScript()
    if POLICY not in script.served_models:
        script.served_models.append(POLICY)
    fake = FakeVLLM(script).start()
    proxy = Proxy(store, upstream or fake.url, ProxySettings(**settings), policy=POLICY, ad_hoc=ad_hoc)
    await proxy.start()
    return ProxyEnv(store, fake, proxy)


async def stop_env(env: ProxyEnv) -> None:
    await env.proxy.stop()
    env.fake.stop()
    env.store.close()


async def post(url: str, body: bytes | str, key: str | None, headers: dict | None = None) -> tuple[int, bytes, Any]:
    """A raw POST on a fresh connection: (status, body bytes, headers)."""
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        hdrs.setdefault("Authorization", f"Bearer {key}")
    data = body.encode() if isinstance(body, str) else body
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=data, headers=hdrs) as resp:
            return resp.status, await resp.read(), resp.headers
