"""The one test environment: commands/smoke_env.py's `ProxyEnv` (a real store, the scripted upstream unless a
real upstream URL is given, and the recording proxy, through commands/lifecycle.py), plus what only tests need:
`start_env`/`stop_env` and a raw POST.

Proxy tests use `start_env`/`stop_env` and `ProxyEnv.episode()`; harness tests use `SmokeEnvironment(...)` as an
async context manager with `new_episode()` and `run()`, as `alight harness check` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentlightning_cli.commands.smoke_env import POLICY, SMOKE_PROMPT, ProxyEnv, SmokeEnvironment
from agentlightning_cli.config import ProxySettings
from agentlightning_cli.scripted.fake_vllm import FakeScript

__all__ = ["POLICY", "SMOKE_PROMPT", "ProxyEnv", "SmokeEnvironment", "post", "start_env", "stop_env"]


async def start_env(tmp_path: Path, script: FakeScript | None = None, upstream: str | list[str] | None = None,
                    ad_hoc: bool = False, **settings: Any) -> ProxyEnv:
    env = ProxyEnv(tmp_path / "run", script, ProxySettings(**settings), upstream_url=upstream, ad_hoc=ad_hoc)
    return await env.__aenter__()


async def stop_env(env: ProxyEnv) -> None:
    await env.stop()


async def post(url: str, body: bytes | str, key: str | None, headers: dict | None = None) -> tuple[int, bytes, Any]:
    """A raw POST on a fresh connection: (status, body bytes, headers)."""
    import aiohttp

    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        hdrs.setdefault("Authorization", f"Bearer {key}")
    data = body.encode() if isinstance(body, str) else body
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=data, headers=hdrs) as resp:
            return resp.status, await resp.read(), resp.headers

