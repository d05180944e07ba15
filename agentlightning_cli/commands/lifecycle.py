"""THE shared lifecycle: a store, an upstream (vLLM when asked, or a given URL), the recording proxy; run until
done or a signal; drain; stop everything in reverse order.

Every command that needs store + upstream + proxy (`alight serve`, `alight proxy`, `alight harness check`, the
rollout of `alight run`) and the smoke environment (commands/smoke_env.py, which the tests use too) go through here, so signal
handling, draining and the order of shutdown exist once.

Order and why:
  1. the store opens first (a wrong path fails before anything slow starts);
  2. vLLM starts synchronously, outside any event loop, so Ctrl-C during its 20-60 s start-up lands in plain
     Python and the PolicyServer's cleanup stops its process group;
  3. the proxy starts on the event loop; SIGINT/SIGTERM/SIGHUP set one stop event;
  4. on stop: in-flight requests drain (bounded), the proxy stops, vLLM stops, the store closes.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator

from agentlightning_cli.errors import AlightError

if TYPE_CHECKING:
    from agentlightning_cli.config import ProxySettings
    from agentlightning_cli.config import Settings
    from agentlightning_cli.proxy.server import Proxy
    from agentlightning_cli.serve.policy import PolicyServer
    from agentlightning_cli.store import Store

log = logging.getLogger("alight.lifecycle")

DRAIN_TIMEOUT_S = 10.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def default_run_name(command: str) -> str:
    return time.strftime(f"{command}-%Y%m%d-%H%M%S")


def open_run(settings: "Settings", name: str, command: str = "serve",
             model: Path | None = None) -> tuple["Store", Any, Path]:
    """The run's store and row under runs/NAME: reused if it exists, so a named run can be restarted. `model`:
    the directory vLLM serves, recorded as serve.model of the snapshot (run_snapshot.py: one shape)."""
    from agentlightning_cli.run_snapshot import snapshot_settings
    from agentlightning_cli.store import Store

    run_dir = Path(settings.runs_dir) / name
    run_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(run_dir)
    run = store.get_run(name) or store.create_run(name, {"command": command,
                                                             "settings": snapshot_settings(settings, model)})
    return store, run, run_dir


@contextmanager
def interrupt_on_term() -> Iterator[None]:
    """While slow synchronous start-up runs (vLLM), SIGTERM/SIGHUP unwind like Ctrl-C, so the `with` blocks
    around it stop what already started."""

    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, _raise) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def vllm_upstream(settings: "Settings", run_dir: Path, model: Path | None,
                  trains: bool = False) -> Iterator["PolicyServer"]:
    """vLLM serving `model` with the round-0 adapter (blocking start; stopped, group and all, on exit); `trains`:
    rounds train between them (the GPU plan places the trainer too)."""
    from agentlightning_cli.serve.policy import PolicyServer

    replicas = settings.serve.replicas
    print(f"starting vLLM (log: {run_dir / 'logs' / 'vllm.log'})" if replicas == 1 else
          f"starting {replicas} vLLM replicas (logs: {run_dir / 'logs'}/vllm.log, vllm-1.log, ...)",
          file=sys.stderr, flush=True)
    with interrupt_on_term(), PolicyServer(settings, run_dir, model, trains=trains) as policy:
        log.info("vLLM ready at %s serving %s as %s", ", ".join(policy.base_urls), policy.model, policy.policy)
        _check_replica_logprobs(policy, trains)
        resolve_replica_continuation(settings, policy)
        yield policy
        log.info("stopping vLLM")


def _check_replica_logprobs(policy: "PolicyServer", trains: bool) -> None:
    """Every replica reports processed logprobs (alight starts them so; serve.extra_args could say otherwise):
    the same probe as for servers alight did not start (commands/run_upstream.check_logprobs)."""
    from agentlightning_cli.commands.run_upstream import check_logprobs

    warning = check_logprobs([(url, policy.policy) for url in policy.base_urls], trains,
                             getattr(policy, "api_key", None),
                             fix="take --logprobs-mode (and --generation-config) out of serve.extra_args: alight "
                                 "starts vLLM with --logprobs-mode processed_logprobs")
    if warning:
        print(f"WARNING: {warning}", file=sys.stderr, flush=True)


def resolve_replica_continuation(settings: "Settings", policy: "PolicyServer | Any") -> None:
    """settings.proxy.continuation becomes the effective mode for the replicas alight started (with
    --enable-scale-out, unless serve.extra_args switched it off): proxy/token_io_probe.py."""
    from agentlightning_cli.proxy.token_io_probe import FLAG, resolve_continuation

    found = resolve_continuation(settings.proxy.continuation, [(url, policy.policy) for url in policy.base_urls],
                                 getattr(policy, "api_key", None),
                                 fix=f"take --no-enable-scale-out out of serve.extra_args (alight starts vLLM with "
                                     f"{FLAG}), or set proxy.continuation: render")
    settings.proxy.continuation = found.mode
    if found.note:
        print(found.note, file=sys.stderr, flush=True)


def continuation_eot_ids(proxy_settings: ProxySettings, model: "Path | str | None",
                         servers: list[tuple[str, str]] = (), api_key: str | None = None) -> frozenset[int]:
    """The model's end-of-turn ids exact continuation splits turns at: from its tokenizer.json where the model is
    a local folder (the proxy layer reads no tokenizer), else asked of the `servers` [(root, served model name)]
    (a server alight did not start: proxy/token_io_probe.server_end_of_turn_ids); every server must say the same.
    Where none can be found the proxy renders every call: proxy.continuation becomes `render`, with one line."""
    if proxy_settings.continuation != "exact":
        return frozenset()
    from agentlightning_cli.train.rows import END_OF_TURN_TOKENS

    tokenizer = Path(model) / "tokenizer.json" if model is not None else None
    if tokenizer is not None and tokenizer.is_file():
        from agentlightning_cli.inspect.tokens import end_of_turn_ids

        ids = end_of_turn_ids(tokenizer)
        if ids:
            return ids
        where = f"in {tokenizer}"
    elif servers:
        from agentlightning_cli.proxy.token_io_probe import server_end_of_turn_ids

        said = {root: server_end_of_turn_ids(root, name, END_OF_TURN_TOKENS, api_key) for root, name in servers}
        if len(set(said.values())) > 1:
            raise AlightError("the upstreams name different end-of-turn tokens (" + "; ".join(
                f"{root}: {sorted(ids)}" for root, ids in said.items()) + "): they serve different models",
                              "give upstreams that serve the same model, or set proxy.continuation: render")
        ids = next(iter(said.values()))
        if ids:
            return ids
        where = "from the upstream (its /tokenize and render answers)"
    else:
        where = "(no local model folder, no server to ask)"
    print(f"alight: proxy.continuation: render, not exact: no end-of-turn tokens found {where}; every call is "
          "rendered from its messages", file=sys.stderr, flush=True)
    proxy_settings.continuation = "render"
    return frozenset()


def local_chat_render(proxy_settings: ProxySettings, upstream: "PolicyServer | Any | None"):
    """The served template and tokenizer for in-process render / derender (serve/chat_render.py), for vLLM servers
    alight started (it knows their model, --chat-template and parsers); None for any other upstream or with
    proxy.local_render off."""
    if not proxy_settings.local_render or not getattr(upstream, "starts_servers", False):
        return None
    from agentlightning_cli.serve.chat_render import served_chat_render
    from agentlightning_cli.serve.parsers import choose_parsers

    serve = upstream.settings.serve
    overridden = {arg.split("=")[0] for arg in serve.extra_args} & {
        "--chat-template", "--tool-call-parser", "--reasoning-parser", "--tokenizer", "--tokenizer-mode"}
    if overridden:  # the server renders with what alight did not choose: let it
        return None
    parsers = choose_parsers(upstream.model, serve.tool_call_parser, serve.reasoning_parser)
    return served_chat_render(upstream.model, upstream.vllm.chat_template, parsers.tool_call_parser,
                              parsers.reasoning_parser)


@asynccontextmanager
async def proxy_running(store: "Store", upstream_url: str | list[str], proxy_settings: ProxySettings, *, policy: str | None = "policy-r0",
                        ad_hoc: bool = False, ad_hoc_scope: tuple[str | None, str | None] | None = None,
                        on_budget_exceeded: Callable[[str, str], None] | None = None,
                        upstream: "PolicyServer | Any | None" = None,
                        upstream_api_key: str | None = None,
                        model: "Path | str | None" = None,
                        served_model: str | None = None, local_tokens: Any = None) -> AsyncIterator["Proxy"]:
    """The recording proxy, listening, in front of `upstream_url`; stopped (not drained) on exit. `upstream`: the
    policy server behind it, when there is one: its API key (else `upstream_api_key`, serve.api_key for servers
    alight did not start) goes on every upstream request, and a replica of it whose process exited stays out of
    the proxy's routing (proxy/routing.py). `local_tokens`: the served template and tokenizer for in-process render
    / derender (serve/chat_render.py); by default found for an `upstream` alight started (local_chat_render)."""
    from agentlightning_cli.proxy.probe import server_root
    from agentlightning_cli.proxy.server import Proxy

    kwargs: dict[str, Any] = {"policy": policy, "ad_hoc": ad_hoc,
                              "upstream_api_key": getattr(upstream, "api_key", None) or upstream_api_key,
                              "replica_exited": getattr(upstream, "exit_code", None)}
    if ad_hoc_scope is not None:
        kwargs["ad_hoc_scope"] = ad_hoc_scope
    name = policy or served_model
    urls = [upstream_url] if isinstance(upstream_url, str) else list(upstream_url)
    servers = [(server_root(url), name) for url in urls] if name else []
    kwargs["eot_ids"] = continuation_eot_ids(proxy_settings, model or getattr(upstream, "model", None), servers,
                                             kwargs["upstream_api_key"])
    if kwargs["eot_ids"] and proxy_settings.local_render:
        kwargs["local_tokens"] = local_tokens or local_chat_render(proxy_settings, upstream)
    proxy = Proxy(store, upstream_url, proxy_settings, **kwargs)
    if on_budget_exceeded is not None:
        proxy.on_budget_exceeded = on_budget_exceeded
    try:
        await proxy.start()
    except OSError as exc:
        raise AlightError(f"cannot listen on {proxy_settings.host}:{proxy_settings.port}: {exc.strerror or exc}",
                          "pick another --port (0 or none picks a free one)") from exc
    log.info("proxy listening on %s -> %s", proxy.base_url, upstream_url)
    try:
        yield proxy
    finally:
        await proxy.stop()
        log.info("proxy stopped")


def stop_on_signals(stop: asyncio.Event) -> list[int]:
    """SIGINT/SIGTERM/SIGHUP set `stop`; returns the list the caught signals are appended to."""
    caught: list[int] = []
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, lambda s=sig: (caught.append(s), stop.set()))
    return caught


async def until_stopped(proxy: "Proxy", name: str, stop: asyncio.Event | None = None,
                        drain_timeout_s: float = DRAIN_TIMEOUT_S) -> list[int]:
    """Wait for `stop` (or, when none is given, for a stop signal), then drain in-flight requests (bounded).
    Returns the signals caught, first first."""
    caught: list[int] = []
    if stop is None:
        stop = asyncio.Event()
        caught = stop_on_signals(stop)
    await stop.wait()
    print(f"{name}: stopping (finishing in-flight requests)", file=sys.stderr, flush=True)
    try:
        await asyncio.wait_for(proxy.drain(), timeout=drain_timeout_s)
    except asyncio.TimeoutError:
        pass
    return caught


def raise_if_interrupted(caught: list[int]) -> None:
    """Stopped cleanly by Ctrl-C: the CLI boundary still turns it into exit code 130, like every command."""
    if caught and caught[0] == signal.SIGINT:
        raise KeyboardInterrupt


async def serve_proxy(store: "Store", upstream_url: str | list[str], proxy_settings: ProxySettings, *, name: str,
                      banner: Callable[["Proxy"], str], stop: asyncio.Event | None = None,
                      on_ready: Callable[["Proxy"], None] | None = None, **proxy_kwargs: Any) -> None:
    """Start the proxy, print the banner, serve until stopped, drain, stop. Ctrl-C ends in KeyboardInterrupt
    after the clean stop; SIGTERM/SIGHUP return normally."""
    from agentlightning_cli.proxy.gc_policy import tune_for_serving

    async with proxy_running(store, upstream_url, proxy_settings, **proxy_kwargs) as proxy:
        tune_for_serving()  # everything is imported now; see gc_policy.py
        print(banner(proxy), file=sys.stderr, flush=True)
        if on_ready is not None:
            on_ready(proxy)
        caught = await until_stopped(proxy, name, stop)
    raise_if_interrupted(caught)


def run_loop(main: Any) -> None:
    """Run a coroutine on uvloop where it installs (a cheaper event loop), else asyncio's own."""
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)
