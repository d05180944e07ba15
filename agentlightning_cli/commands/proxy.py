"""`alight proxy`: the recording proxy alone, in ad-hoc mode, in front of any OpenAI-compatible server, until
Ctrl-C. The wiring is commands/lifecycle.py; this module adds the upstream probe (proxy/probe.py) and the
banner."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agentlightning_cli.commands import lifecycle
from agentlightning_cli.errors import AlightError
from agentlightning_cli.proxy.probe import check_url, probe_upstream, server_root

if TYPE_CHECKING:
    from agentlightning_cli.config import Settings
    from agentlightning_cli.proxy.server import Proxy

BANNER = """\
alight proxy: recording {base} -> {upstream}
  store: {db}
  ad-hoc episodes: put any episode id in the URL; it is created on first use and the API key it first
  presents becomes its key (later requests must send the same key).
  OpenAI chat / Responses   base_url = {base}/e/<episode>/v1
  Anthropic Messages        base_url = {base}/e/<episode>
  Gemini                    base_url = {base}/e/<episode>
  e.g.  OPENAI_BASE_URL={base}/e/demo-1/v1 OPENAI_API_KEY=any-secret
        ANTHROPIC_BASE_URL={base}/e/demo-1 ANTHROPIC_API_KEY=any-secret
        GOOGLE_GEMINI_BASE_URL={base}/e/demo-1 GEMINI_API_KEY=any-secret
  upstream serves: {served}
  upstream model: {model}
{token}Ctrl-C stops."""
TOKEN_LINES = """\
  beyond loopback: only clients holding this run token may start episodes; an episode's API key is the
  token or <token>.<a suffix of your own>, e.g. OPENAI_API_KEY={token}.demo-1
  run token: {token}
"""


async def serve(settings: Settings, upstream: str | list[str], served: str, store_dir: Path,
                model: str | None, served_model: str | None = None) -> None:
    from agentlightning_cli.store import Store

    store_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(store_dir)

    def text(proxy: Proxy) -> str:
        token = TOKEN_LINES.format(token=proxy.run_token) if proxy.run_token else ""
        return BANNER.format(base=proxy.base_url, upstream=proxy.upstream_url, db=store_dir / "alight.db",
                             served=served, model=model or "whatever each client asks for", token=token)

    try:
        await lifecycle.serve_proxy(store, upstream, settings.proxy, name="alight proxy", banner=text,
                                    policy=model, ad_hoc=True, upstream_api_key=settings.serve.api_key,
                                    served_model=served_model)
    finally:
        store.close()


def run(settings: Settings, upstream: str | list[str], store_dir: Path, model: str | None) -> None:
    # Before anything listens, say plainly what is wrong with each upstream, rather than only as a 502 or 404
    # on every call later. A server that is not up yet is not fatal: the proxy may well start first.
    upstreams = [upstream] if isinstance(upstream, str) else list(upstream)
    for url in upstreams:
        check_url(url)
    from agentlightning_cli.serve.remote_policy import unkeyed_servers

    unkeyed = unkeyed_servers(upstreams, settings.serve.api_key, trains=False)
    if unkeyed:
        print(f"alight proxy: warning: {unkeyed}", file=sys.stderr, flush=True)
    described, infos = [], []
    for url in upstreams:
        try:
            info = probe_upstream(url, api_key=settings.serve.api_key)
            described.append(info.describe())
            infos.append(info)
        except AlightError as exc:
            print(f"alight proxy: warning: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""),
                  file=sys.stderr, flush=True)
            described.append("unknown (the probe above failed; calls fail until the upstream answers)")
    settings.proxy.continuation = _continuation(settings, infos if len(infos) == len(upstreams) else None, model)
    served = described[0] if len(set(described)) == 1 else "; ".join(
        f"{server_root(u)}: {d}" for u, d in zip(upstreams, described))
    roots = [server_root(u) for u in upstreams]
    # The model name to ask the servers under (their end-of-turn ids, when exact continuation is on).
    served_model = model or next((info.models[0] for info in infos if info.models), None)
    lifecycle.run_loop(serve(settings, roots if len(roots) > 1 else roots[0], served, store_dir, model, served_model))


def _continuation(settings: Settings, infos: list | None, model: str | None) -> str:
    """The effective proxy.continuation (proxy/token_io_probe.py); `infos`: every upstream's probe, None when one
    failed (a server that is not up yet gets `render`, or an error when `exact` was asked)."""
    from agentlightning_cli.proxy.token_io_probe import resolve_continuation

    asked = settings.proxy.continuation
    if asked != "render" and (infos is None or not all(info.models for info in infos)):
        if asked == "exact":
            raise AlightError("proxy.continuation is exact, but an upstream could not be probed for vLLM's render / "
                              "generate / derender endpoints", "start the upstream first, or set "
                              "proxy.continuation: render")
        print("alight proxy: proxy.continuation: render, not exact (an upstream could not be probed at start)",
              file=sys.stderr, flush=True)
        return "render"
    found = resolve_continuation(asked, [(info.root_url, model or info.models[0]) for info in infos or []],
                                 settings.serve.api_key)
    if found.note:
        print(f"alight proxy: {found.note}", file=sys.stderr, flush=True)
    return found.mode
