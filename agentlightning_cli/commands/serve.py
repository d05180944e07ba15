"""`alight serve`: vLLM (policy-r0 adapter) + the recording proxy in ad-hoc mode, until Ctrl-C.

The wiring (store, vLLM, proxy, signals, drain, stop order) is commands/lifecycle.py; this module adds what is
particular to serve: the run row and its round 0, the port check before vLLM's slow start, the banner.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from agentlightning_cli.commands import lifecycle
from agentlightning_cli.config import Settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve import banner
from agentlightning_cli.serve.policy import PolicyServer, resolve_model
from agentlightning_cli.serve.vllm import check_model_dir, port_is_free

if TYPE_CHECKING:
    from agentlightning_cli.proxy.server import Proxy
    from agentlightning_cli.store import Run, Store

# Kept importable under the old names for callers of the serve module.
open_run = lifecycle.open_run


def default_run_name() -> str:
    return lifecycle.default_run_name("serve")


async def run_proxy(settings: Settings, policy: PolicyServer, store: Store, run: Run, run_dir: Path,
                    stop: asyncio.Event | None = None, on_ready: Callable[[Proxy], None] | None = None,
                    round_id: str | None = None) -> None:
    """Serve until `stop` is set (or a stop signal when none is given); `on_ready(proxy)` once listening."""

    def text(proxy: Proxy) -> str:
        return banner.render(proxy.base_url, ", ".join(policy.base_urls), str(policy.model), str(run_dir.resolve()), run.name,
                             policy.policy, run_token=proxy.run_token)

    await lifecycle.serve_proxy(store, policy.base_urls, settings.proxy, name="alight serve", banner=text, stop=stop,
                                on_ready=on_ready, policy=policy.policy, ad_hoc=True, ad_hoc_scope=(run.id, round_id),
                                upstream=policy)


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
    # The banner prints settings for every shipped harness: vLLM's context must hold each one's first prompt.
    from agentlightning_cli.commands.context import size_for_serve

    for warning in size_for_serve(settings, model):
        print(f"warning: {warning}", file=sys.stderr)
    store, run, run_dir = open_run(settings, name, model=model)
    try:
        with lifecycle.vllm_upstream(settings, run_dir, model) as policy:
            # A restarted `--run NAME` keeps its round 0 (same policy-r0 adapter directory).
            rnd = next((r for r in store.list_rounds(run.id) if r.index == 0), None) or store.create_round(
                run.id, 0, policy.policy, str(policy.adapter_dir(0)))
            try:
                lifecycle.run_loop(run_proxy(settings, policy, store, run, run_dir, round_id=rnd.id))
            finally:
                store.finish_round(rnd.id, "done")
    finally:
        store.close()
