"""`alight serve`: vLLM (policy-r0 adapter) + the recording proxy in ad-hoc mode, until Ctrl-C.

vLLM starts first and synchronously, so Ctrl-C during its 20-60 s startup lands in plain Python and the
PolicyServer's cleanup stops the process group. The proxy then runs on an event loop until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from agentlightning_cli.config import Settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve import banner
from agentlightning_cli.serve.policy import PolicyServer, resolve_model
from agentlightning_cli.serve.vllm import check_model_dir, port_is_free

DRAIN_TIMEOUT_S = 10.0


def default_run_name() -> str:
    return time.strftime("serve-%Y%m%d-%H%M%S")


def open_run(settings: Settings, name: str) -> tuple[Any, Any, Path]:
    """The run's store and row: reused if `name` exists, so `alight serve --run X` can be restarted."""
    from agentlightning_cli.store import Store

    run_dir = Path(settings.runs_dir) / name
    run_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(run_dir)
    run = store.get_run(name) or store.create_run(name, {"command": "serve", **settings.model_dump(mode="json")})
    return store, run, run_dir


async def run_proxy(settings: Settings, policy: PolicyServer, store: Any, run: Any, run_dir: Path,
                    stop: asyncio.Event | None = None, on_ready: Callable[[Any], None] | None = None,
                    round_id: str | None = None) -> None:
    """Serve until `stop` is set (the CLI sets it on SIGINT/SIGTERM/SIGHUP); `on_ready(proxy)` once listening.
    Ctrl-C ends in KeyboardInterrupt after the clean stop, so the CLI exits 130; SIGTERM/SIGHUP return."""
    from agentlightning_cli.proxy.server import Proxy

    caught: list[int] = []
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, lambda s=sig: (caught.append(s), stop.set()))
    proxy = Proxy(store, policy.base_url, settings.proxy, policy=policy.policy, ad_hoc=True,
                  ad_hoc_scope=(run.id, round_id))
    try:
        await proxy.start()
        print(banner.render(proxy.base_url, policy.base_url, str(policy.model), str(run_dir.resolve()), run.name,
                            policy.policy), file=sys.stderr, flush=True)
        if on_ready is not None:
            on_ready(proxy)
        await stop.wait()
        print("alight serve: stopping (finishing in-flight requests)", file=sys.stderr, flush=True)
        try:
            await asyncio.wait_for(proxy.drain(), timeout=DRAIN_TIMEOUT_S)
        except asyncio.TimeoutError:
            pass
    finally:
        await proxy.stop()
    if caught and caught[0] == signal.SIGINT:
        raise KeyboardInterrupt  # stopped cleanly; the CLI still exits 130 for Ctrl-C, like every command


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def serve(settings: Settings, model: Path | None = None, port: int | None = None, run_name: str | None = None) -> None:
    """Blocking: start everything, print the banner, wait for Ctrl-C, stop everything (vLLM last)."""
    if port is not None:
        settings.proxy.port = port
    if settings.proxy.port and not port_is_free(settings.proxy.host, settings.proxy.port):
        # Checked before vLLM's 20-60 s startup, not after it.
        raise AlightError(f"port {settings.proxy.port} on {settings.proxy.host} is already in use",
                          "pick another with --port, or omit it for a free one")
    name = run_name or default_run_name()
    # A wrong --model is reported before anything is written under runs/.
    model = resolve_model(settings, model)
    check_model_dir(model)
    # SIGTERM during vLLM's startup must unwind like Ctrl-C (the process group is stopped on the way out).
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)
    store, run, run_dir = open_run(settings, name)
    try:
        print(f"alight serve: starting vLLM (log: {run_dir / 'logs' / 'vllm.log'})", file=sys.stderr, flush=True)
        with PolicyServer(settings, run_dir, model) as policy:
            # A restarted `--run NAME` keeps its round 0 (same policy-r0 adapter directory).
            rnd = next((r for r in store.list_rounds(run.id) if r.index == 0), None) or store.create_round(
                run.id, 0, policy.policy, str(policy.adapter_dir(0)))
            from agentlightning_cli.proxy import server as _proxy_modules  # noqa: F401  (imported before the freeze)
            from agentlightning_cli.proxy.gc_policy import tune_for_serving

            tune_for_serving()  # see gc_policy.py
            try:
                asyncio.run(run_proxy(settings, policy, store, run, run_dir, round_id=rnd.id))
            finally:
                store.finish_round(rnd.id, "done")
    finally:
        store.close()
