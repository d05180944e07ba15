"""An ad-hoc recording proxy in front of a running vLLM, for tests that drive it with a client of their own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

from agentlightning_cli.config import ProxySettings
from agentlightning_cli.inspect.tokens import end_of_turn_ids
from agentlightning_cli.proxy.server import Proxy
from agentlightning_cli.store import Store


def in_proxy(base_url: str, model: Path, policy: str, store_dir: Path, mode: str,
             script: Callable[[Proxy], Any], local_tokens=None) -> tuple[Store, Any]:
    """Run `script(proxy)` (sync, in a thread: the clients are sync) against an ad-hoc proxy in continuation `mode`
    in front of `base_url`, serving `policy`; return (the store, what script returned) once every call is stored.
    `local_tokens`: the served template and tokenizer (serve/chat_render.py) for in-process render / derender."""
    eot = end_of_turn_ids(model / "tokenizer.json")

    async def main():
        store = Store.open(store_dir)
        proxy = Proxy(store, base_url, ProxySettings(continuation=mode), policy=policy, ad_hoc=True, eot_ids=eot,
                      local_tokens=local_tokens)
        await proxy.start(port=0)
        try:
            result = await asyncio.to_thread(script, proxy)
            await proxy.drain()
        finally:
            await proxy.stop()
        return store, result

    return asyncio.run(main())
