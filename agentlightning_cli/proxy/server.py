"""The recording proxy: routes `/e/<episode>/...`, checks the episode key, dispatches by protocol.

Its own lean HTTP server (http_server.py) in front of ONE pooled upstream client (upstream.py), both on
llhttp: a bare relay on these costs 0.18 ms of CPU per request against 0.30 ms for the aiohttp server + client
pair research/proxy-engines.md recommended (bench/proxy.py, `floor` and `floor-aiohttp` rows, side by side).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import tempfile
import time
from typing import Any, Callable, Collection
from urllib.parse import parse_qs, parse_qsl, urlencode

from agentlightning_cli.config import ProxySettings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.local_http import is_loopback_host
from agentlightning_cli.proxy.access import EpisodeKeys, new_run_token
from agentlightning_cli.proxy.continued import ExactContinuation
from agentlightning_cli.proxy.control import Budgets, Gate, ModelPolicy
from agentlightning_cli.proxy.errors import ProxyReject, error_bytes
from agentlightning_cli.proxy.exchange import Collaborators, Exchange, unavailable
from agentlightning_cli.proxy.http_server import HTTPServer, Request, Response, StreamWriter
from agentlightning_cli.proxy.incoming import read_body
from agentlightning_cli.proxy.jsonio import dumps
from agentlightning_cli.proxy.listener_inbox import LISTENERS_SOCKET, ListenerInbox
from agentlightning_cli.proxy.local_token_io import LocalTokens
from agentlightning_cli.proxy.probe import server_root
from agentlightning_cli.proxy.recorder import Recorder
from agentlightning_cli.proxy.routes import models_body, protocol_of, route
from agentlightning_cli.proxy.routing import UpstreamRouter
from agentlightning_cli.store import Store

log = logging.getLogger("alight.proxy")
EPISODE_PATH = re.compile(r"^/e/([A-Za-z0-9._~-]{1,128})(/.*)?$")
PREFLIGHT = ("/", "/api/hello")


def _presented_key(request: Request) -> str | None:
    """The key as OpenAI (Bearer), Anthropic (x-api-key) or Google (x-goog-api-key, or `?key=`) clients send it."""
    headers = request.headers
    auth = headers.get("Authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    key = headers.get("x-api-key") or headers.get("x-goog-api-key")
    if key is None and "key=" in request.query_string:
        keys = parse_qs(request.query_string).get("key")
        key = keys[0] if keys else None
    return key


def _without_key(path_qs: str) -> str:
    """The recorded path: a `?key=` query parameter (Google's other way to send the key) is left out, as the key
    headers are."""
    path, _, query = path_qs.partition("?")
    if "key=" not in query:
        return path_qs
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "key"]
    return f"{path}?{urlencode(kept)}" if kept else path


def _json(status: int, body: bytes) -> Response:
    return Response(status, body)


CALLS_PATH = "/alight/calls"
"""GET /e/<episode>/alight/calls (with the episode's key): {"calls": n, "first_call_at": t, "over_budget": why}."""


def episode_base_url(proxy_url: str, episode_id: str, protocol: str = "openai-chat") -> str:
    """The base URL a harness of `protocol` is handed for its episode on the proxy at `proxy_url`."""
    base = f"{proxy_url}/e/{episode_id}"
    # Anthropic's and Google's SDKs add their own version segment (/v1/messages, /v1beta/models/...).
    return base if protocol in ("anthropic", "anthropic-messages", "gemini", "gemini-generate-content") else base + "/v1"


class Proxy:
    def __init__(self, store: Store, upstream_url: str | list[str], settings: ProxySettings, policy: str | None = "policy-r0",
                 ad_hoc: bool = False, connections: int = 256,
                 ad_hoc_scope: tuple[str | None, str | None] = (None, None), upstream_api_key: str | None = None,
                 retry_after_s: float = 30.0, replica_exited: Callable[[str], int | None] | None = None,
                 eot_ids: Collection[int] = (), local_tokens: LocalTokens | None = None):
        self.store, self.settings, self.ad_hoc = store, settings, ad_hoc
        # (run id, round id) that episodes created on first use belong to, so `alight serve` traffic is its run's.
        self.ad_hoc_scope = ad_hoc_scope
        self.upstream_api_key = upstream_api_key
        """Sent as `Authorization: Bearer` on every upstream request (vLLM's --api-key beyond loopback)."""
        self.retry_after_s, self.replica_exited = retry_after_s, replica_exited
        # The server root: `--upstream http://host:8000/v1` (the base URL OpenAI clients print) works too.
        # Several servers: each episode stays on one (proxy/routing.py).
        urls = [upstream_url] if isinstance(upstream_url, str) else list(upstream_url)
        self.upstream_urls = [server_root(u) for u in urls]
        self.upstream_url = ", ".join(self.upstream_urls)
        self.model_policy = ModelPolicy(policy, settings.model_aliases, settings.sampling)
        self.gate = Gate()
        self.budgets = Budgets(settings.budgets)
        self.recorder = Recorder(store, in_flight=lambda: self.gate.in_flight)
        self.base_url = ""
        self.unix_path = ""
        """The proxy's Unix socket (set by start()); the sandbox binds it in for episodes."""
        self.listeners_path = ""
        """The listener inbox (proxy/listener_inbox.py) a sandbox hands its loopback listener to; "" until started."""
        self._unix_dir = ""
        self._inbox: ListenerInbox | None = None
        self._connections = connections
        self.keys = EpisodeKeys(store, self._create_ad_hoc if ad_hoc else None, settings.run_token)
        self._tasks: set[asyncio.Task] = set()
        self._server: HTTPServer | None = None
        self.session: UpstreamRouter | None = None  # made in start(), on the loop
        self._parts: Collaborators | None = None
        self.eot_ids = frozenset(eot_ids)
        """The model's end-of-turn ids (inspect/tokens.end_of_turn_ids, computed by whoever starts the proxy):
        exact continuation splits prompts into turns at them."""
        if settings.continuation == "exact" and not self.eot_ids:
            raise AlightError("proxy.continuation is exact but the proxy was given no end-of-turn ids",
                              "pass the model's end-of-turn ids (inspect/tokens.end_of_turn_ids of its tokenizer.json)"
                              " or set proxy.continuation: render")
        self.local_tokens = local_tokens
        """The served model's template and tokenizer (serve/chat_render.py, for servers alight started): exact
        continuation renders and derenders confirmed request shapes in-process (proxy/local_token_io.py)."""
        self.continuation: ExactContinuation | None = None

    @property
    def run_token(self) -> str | None:
        """What a client must present to create an episode (proxy/access.py); None: any key does (loopback)."""
        return self.keys.run_token

    @property
    def policy(self) -> str | None:
        return self.model_policy.name

    @property
    def on_budget_exceeded(self) -> Callable[[str, str], None] | None:
        return self.budgets.on_exceeded

    @on_budget_exceeded.setter
    def on_budget_exceeded(self, callback: Callable[[str, str], None] | None) -> None:
        self.budgets.on_exceeded = callback

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self, host: str | None = None, port: int | None = None) -> "Proxy":
        host = host or self.settings.host
        port = self.settings.port if port is None else port
        if self.ad_hoc and self.keys.run_token is None and not is_loopback_host(host):
            self.keys.run_token = new_run_token()  # beyond loopback, new episodes need it (proxy/access.py)
        # No Accept-Encoding, no cookies, no redirects: vLLM does not compress, and what one episode's
        # answer sets must never ride along on another's request.
        self.session = UpstreamRouter(self.upstream_urls, limit=self._connections, connect_timeout=30,
                                      retry_after_s=self.retry_after_s, api_key=self.upstream_api_key,
                                      exited=self.replica_exited)
        if self.settings.continuation == "exact":  # the effective mode, resolved (probed) before the proxy starts
            self.continuation = ExactContinuation(self.session, self.eot_ids, self.local_tokens)
        self._parts = Collaborators(self.gate, self.budgets, self.recorder, self.session, self.model_policy,
                                    self.continuation)
        # Bodies are decoded by incoming.py, bounded by max_body_bytes (a zip bomb stops at the limit).
        server = HTTPServer(self._handle, self.settings.max_body_bytes)
        bound = await server.start(host, port)
        self._server = server
        self.base_url = f"http://{bound[0]}:{bound[1]}"
        # The same server on a Unix socket in a short private folder (socket paths are limited to 107
        # bytes): sandboxed episodes have no route to the host's loopback and reach the proxy through it.
        self._unix_dir = tempfile.mkdtemp(prefix="alight-px-")
        self.unix_path = os.path.join(self._unix_dir, "proxy.sock")
        await server.start_unix(self.unix_path)
        # Sandboxes hand over a listening socket bound in their own network namespace; served as our own.
        self._inbox = ListenerInbox(server.serve_socket)
        self.listeners_path = os.path.join(self._unix_dir, LISTENERS_SOCKET)
        self._inbox.start(self.listeners_path)
        return self

    async def stop(self, grace: float = 5.0) -> None:
        """Stop listening, give in-flight requests `grace` seconds, then cut them (streams are recorded as
        partial), and flush the recorder."""
        if self._server is not None:
            self._server.stop_listening()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=grace)
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=grace)
            self._server.close_connections()
            self._server = None
            if self._inbox is not None:
                self._inbox.close()
                self._inbox = None
            shutil.rmtree(self._unix_dir, ignore_errors=True)
        if self.session is not None:
            await self.session.close()
        self.recorder.flush_soon()  # records still gathering on the loop go before the writer stops
        await asyncio.to_thread(self.recorder.close)

    # -- control ----------------------------------------------------------------------------------------
    def register_episode(self, episode_id: str, key: str, seed: int | None = None, draw: str | None = None) -> None:
        """`seed` (a seeded run): every chat call of the episode goes upstream with a vLLM seed derived from
        (seed, episode id, call index), see control.episode_seed. None: requests keep their own sampling.
        `draw` (control.slot_draw): hashed instead of the episode id, so runs of the same slot draw alike."""
        self.keys.register(episode_id, key)
        self.model_policy.seeds.register(episode_id, seed, draw)

    def end_episode(self, episode_id: str) -> None:
        """The episode ended (finished, timed out, cancelled, abandoned): its key stops working at once (a later
        call is answered 403 and recorded nowhere) and routing forgets it (its recorded calls stay counted)."""
        self.keys.end(episode_id)
        self.model_policy.seeds.register(episode_id, None)
        if self.continuation is not None:
            self.continuation.end(episode_id)  # its conversations end with it
        if self.session is not None:
            self.session.forget(episode_id)

    def episode_base_url(self, episode_id: str, protocol: str = "openai-chat") -> str:
        return episode_base_url(self.base_url, episode_id, protocol)

    def set_policy(self, name: str) -> None:
        # One attribute store: requests read it once, after the pause gate, so none sees a mix.
        self.model_policy.name = name

    async def pause(self) -> None:
        self.gate.pause()

    def resume(self) -> None:
        self.gate.resume()

    async def drain(self) -> None:
        """Wait until every forwarded request has answered and its record is in the store."""
        await self.gate.drain()
        self.recorder.flush_soon()  # what is gathering on the loop is written (or queued) now
        await asyncio.wrap_future(self.recorder.call(lambda: None))  # the writer queue is FIFO

    # -- requests ---------------------------------------------------------------------------------------
    async def _handle(self, request: Request) -> Response | StreamWriter:
        task = asyncio.current_task()
        assert task is not None  # the HTTP server runs each request in its own task
        self._tasks.add(task)  # so stop() can cut what outlives its grace period
        try:
            return await self._dispatch(request)
        finally:
            self._tasks.discard(task)

    async def _dispatch(self, request: Request) -> Response | StreamWriter:
        started = time.time()
        match = EPISODE_PATH.match(request.path)
        if match is None:
            return self._unscoped(request)
        episode_id, rest = match.group(1), match.group(2) or "/"
        method = request.method
        if method == "HEAD" and (rest in PREFLIGHT or rest.rstrip("/") in ("", "/v1")):
            return Response(200, b"", None)
        protocol = protocol_of(rest, request.headers)
        if not self.recorder.healthy:
            return unavailable(protocol, self.recorder.failure)
        verdict = await self.keys.check(episode_id, _presented_key(request))
        if verdict != "ok":
            return self._refused(verdict, episode_id, protocol)
        if method == "GET" and rest in ("/v1/models", "/models", "/v1beta/models"):
            return _json(200, dumps(models_body(self.model_policy.advertised(), protocol)))
        if method == "GET" and rest == CALLS_PATH:
            # The episode's recorded LLM calls, for a runner on another machine (rollout/remote.py) that judges
            # its harness's ending (no_calls) without the store.
            calls, first = await asyncio.to_thread(self.store.llm_call_count, episode_id)
            return _json(200, dumps({"calls": calls, "first_call_at": first,
                                     "over_budget": self.budgets.refusals.get(episode_id)}))
        path = _without_key(request.path_qs[len("/e/") + len(episode_id):]) or "/"
        assert self._parts is not None  # requests only arrive after start()
        ex = Exchange(self._parts, request, episode_id, path, protocol, started)
        try:
            ex.raw = read_body(request, self.settings.max_body_bytes)
            handler = route(method, rest)
            if handler is None:
                raise ProxyReject(404, f"alight: no route for {method} {rest} (see `alight proxy --help`)",
                                  "client_error", "not_found_error")
            return await handler(ex)
        except ProxyReject as exc:
            return await ex.reject(exc)
        except Exception as exc:  # noqa: BLE001 - one bad request must never take the proxy down
            log.exception("internal error on %s %s", method, request.path)
            return await ex.reject(ProxyReject(500, f"alight: internal proxy error: {type(exc).__name__}: {exc}",
                                               "internal_error"))

    def _unscoped(self, request: Request) -> Response:
        protocol = protocol_of(request.path, request.headers)
        if request.method == "HEAD" and request.path in PREFLIGHT:
            return Response(200, b"", None)
        if request.method == "GET" and request.path == "/v1/models":
            return _json(200, dumps(models_body(self.model_policy.advertised(), protocol)))
        msg = f"alight: no route for {request.method} {request.path}; episode URLs look like /e/<episode_id>/v1"
        return _json(404, error_bytes(protocol, 404, msg, "not_found_error"))

    def _create_ad_hoc(self, episode_id: str, key: str) -> Any:
        """The episode row, written by the recorder's writer (the store's one writer in this process)."""
        return self.recorder.call(
            lambda: self.store.create_episode(*self.ad_hoc_scope, None, 0, None, key, episode_id=episode_id))

    def _refused(self, verdict: str, episode_id: str, protocol: str) -> Response:
        """The answer to a request proxy/access.py refused; nothing of it is recorded."""
        if verdict == "unknown":
            return _json(404, error_bytes(protocol, 404, f"alight: unknown episode {episode_id!r}", "not_found_error"))
        if verdict == "ended":
            msg = (f"alight: episode {episode_id!r} has ended; its key no longer works and nothing more is recorded "
                   "for it (a process left behind by its harness, or a client reusing the key)")
            return _json(403, error_bytes(protocol, 403, msg, "permission_error"))
        if verdict == "no_token":
            msg = ("alight: this proxy listens beyond loopback, so a new episode needs the run token its banner "
                   "printed: send it as the API key, alone or as <run token>.<your own suffix>")
            return _json(401, error_bytes(protocol, 401, msg, "authentication_error"))
        msg = ("alight: missing or wrong API key for this episode (send it as Authorization: Bearer, x-api-key or "
               "x-goog-api-key)")
        return _json(401, error_bytes(protocol, 401, msg, "authentication_error"))
