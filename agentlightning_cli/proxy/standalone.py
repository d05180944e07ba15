"""`alight proxy`: the recording proxy alone, in ad-hoc mode, until Ctrl-C."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

BANNER = """\
alight proxy: recording {base} -> {upstream}
  store: {db}
  ad-hoc episodes: put any episode id in the URL; it is created on first use and the API key it first
  presents becomes its key (later requests must send the same key).
  OpenAI chat / Responses   base_url = {base}/e/<episode>/v1
  Anthropic Messages        base_url = {base}/e/<episode>
  e.g.  OPENAI_BASE_URL={base}/e/demo-1/v1 OPENAI_API_KEY=any-secret
        ANTHROPIC_BASE_URL={base}/e/demo-1 ANTHROPIC_API_KEY=any-secret
  upstream model: {model}
Ctrl-C stops."""


async def serve(settings: Any, upstream: str, store_dir: Path, model: str | None) -> None:
    from agentlightning_cli.errors import AlightError
    from agentlightning_cli.proxy.gc_policy import tune_for_serving
    from agentlightning_cli.proxy.server import Proxy
    from agentlightning_cli.store import Store

    if not upstream.startswith(("http://", "https://")):
        raise AlightError(f"--upstream must be an http:// or https:// URL, got {upstream!r}",
                          "e.g. --upstream http://127.0.0.1:8000")

    store_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(store_dir)
    proxy = Proxy(store, upstream, settings.proxy, policy=model, ad_hoc=True)
    stop = asyncio.Event()
    caught: list[int] = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda s=sig: (caught.append(s), stop.set()))
    try:
        try:
            await proxy.start()
        except OSError as exc:
            raise AlightError(f"cannot listen on {settings.proxy.host}:{settings.proxy.port}: {exc.strerror or exc}",
                              "pick another --port (0 picks a free one)") from exc
        tune_for_serving()  # everything is imported now; see gc_policy.py
        text = BANNER.format(base=proxy.base_url, upstream=proxy.upstream_url, db=store_dir / "alight.db",
                             model=model or "whatever each client asks for")
        print(text, file=sys.stderr, flush=True)
        await stop.wait()
        print("alight proxy: stopping (finishing in-flight requests)", file=sys.stderr, flush=True)
        await asyncio.wait_for(proxy.drain(), timeout=10)
    except asyncio.TimeoutError:
        pass
    finally:
        await proxy.stop()
        store.close()
    if caught and caught[0] == signal.SIGINT:
        raise KeyboardInterrupt  # stopped cleanly; the CLI boundary turns Ctrl-C into exit code 130


def run(settings: Any, upstream: str, store_dir: Path, model: str | None) -> None:
    try:  # uvloop: a cheaper event loop where it installs (not on Windows)
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(settings, upstream, store_dir, model))
