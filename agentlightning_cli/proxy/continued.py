"""Exact continuation on the request path (issue 34, `proxy.continuation: exact`): every call of an episode is
classified by the episode's chains (proxy/continuation/chains.py), generated token-in/token-out from the ids the
decision chose, derendered by vLLM's own parsers and answered in the client's protocol, JSON or SSE.

Per call: render the chat body as it would go upstream (the plain render: the guard's reference, the effective
sampling params, the reasoning state) -> classify (continue / fork / start / fallback) -> generate from the
decision's prompt ids under the policy adapter with the sampling as sent (max_tokens left for generate to resolve
for a longer continued prompt when the client sent none) -> derender -> answer. A fallback and a start send the
plain render's ids, which are exactly what chat completions would have used. The record keeps the prompt ids
generated from, the sampled ids and logprobs from generate, the generate request as sent and the decision
(`continuation` column, store m009). The chain learns the reply as the client received it, before the client has
it, so its next request finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

from agentlightning_cli.proxy.chat import ChatPlan
from agentlightning_cli.proxy.continuation.chains import Chains, Decision
from agentlightning_cli.proxy.continuation.normalise import Request, canonical_request
from agentlightning_cli.proxy.errors import ProxyReject, error_bytes
from agentlightning_cli.proxy.exchange import Exchange, log
from agentlightning_cli.proxy.http_server import Response, StreamWriter
from agentlightning_cli.proxy.jsonio import dumps
from agentlightning_cli.proxy.local_token_io import LocalTokenIO, LocalTokens
from agentlightning_cli.proxy.routing import UpstreamRouter
from agentlightning_cli.proxy.token_io import (DETOKENISER_WINDOW, GeneratedDelta, Rendered, TokenIO, TokenIOError,
                                              derender_stream, generate_body)
from agentlightning_cli.proxy.translators import StreamTranslator
from agentlightning_cli.proxy.upstream import UPSTREAM_DOWN

_GENERATE_PREFIX = "generate-tokens-"  # vLLM prefixes generate's request id; the client sees chat's own form


class _EpisodeRoute:
    """The router as TokenIO's pool: every request of an episode goes to the server its episode is on (the
    prefix cache holds its conversation there)."""

    __slots__ = ("router", "episode_id")

    def __init__(self, router: UpstreamRouter, episode_id: str):
        self.router, self.episode_id = router, episode_id

    async def post(self, path: str, body: bytes, content_type: str = "application/json"):
        return await self.router.post(path, body, content_type, episode_id=self.episode_id)


class ExactContinuation:
    """The chains of every live episode (in memory; an episode's go when it ends), the model's end-of-turn ids
    and, for a server alight started, its template and tokenizer for in-process render / derender
    (proxy/local_token_io.py). Both are computed where the proxy is started: the proxy layer reads no tokenizer."""

    def __init__(self, router: UpstreamRouter, eot_ids: Collection[int], local_tokens: LocalTokens | None = None):
        self.router, self.eot = router, frozenset(eot_ids)
        self.episodes: dict[str, Chains] = {}
        self.local = LocalTokenIO(local_tokens) if local_tokens is not None else None

    def chains(self, episode_id: str) -> Chains:
        chains = self.episodes.get(episode_id)
        if chains is None:
            chains = self.episodes[episode_id] = Chains(self.eot)
        return chains

    def io(self, episode_id: str) -> TokenIO:
        # In-process tokens exist only for a server alight started without a reasoning parser
        # (serve/chat_render.served_chat_render): its derender reads only the prompt's last ids.
        tail = DETOKENISER_WINDOW if self.local is not None else None
        return TokenIO(_EpisodeRoute(self.router, episode_id), prompt_tail=tail)  # type: ignore[arg-type]

    def end(self, episode_id: str) -> None:
        self.episodes.pop(episode_id, None)


def continues(ex: Exchange, plan: ChatPlan) -> bool:
    """Whether this call goes the exact path. Not: `proxy.continuation: render`; several choices (`n` > 1: one
    chain continues one reply); prompt logprobs (generate does not return them); logprobs asked while streaming
    (vLLM's streaming derender leaves them out). Those are relayed to chat completions as under `render`."""
    if ex.parts.continuation is None:
        return False
    up = plan.upstream
    return (up.get("n") or 1) <= 1 and not plan.want_prompt_logprobs and not (plan.stream and plan.want_logprobs)


def _client_max_tokens(plan: ChatPlan) -> bool:
    return any(plan.upstream.get(k) is not None for k in ("max_tokens", "max_completion_tokens"))


def _chat_request(plan: ChatPlan) -> dict:
    """The chat body as chat completions would get it, minus streaming: what render and derender read."""
    return {k: v for k, v in plan.upstream.items() if k not in ("stream", "stream_options")}


def _dress(data: dict, plan: ChatPlan, prompt_ids: list[int], sampled: list[int] | None) -> None:
    """Derender's answer in chat completions' own form: its id, and the ids when the client asked for them."""
    rid = data.get("id")
    if isinstance(rid, str) and rid.startswith(_GENERATE_PREFIX):
        data["id"] = rid[len(_GENERATE_PREFIX):]
    if plan.want_token_ids and sampled is not None:  # a whole answer; stream chunks carry their own token_ids
        data["prompt_token_ids"] = prompt_ids
        for choice in data.get("choices") or ():
            choice["token_ids"] = sampled


async def _post_error(ex: Exchange, exc: TokenIOError) -> Response:
    """vLLM refused (a prompt over the context, a bad sampling key): its status and message, as chat would."""
    status = exc.status if 400 <= exc.status < 600 else 502
    message = f"{exc.message} ({exc.path})"
    return await ex.reply(status, error_bytes(ex.protocol, status, message), "upstream_error", error=message)


async def _down(coro):
    """An unreachable upstream becomes the same 502 the relay path answers."""
    try:
        return await coro
    except UPSTREAM_DOWN as exc:
        raise ProxyReject(502, f"alight: upstream model server unreachable: {exc or type(exc).__name__}",
                          "unreachable") from exc


async def exact_chat(ex: Exchange, plan: ChatPlan, *, dropped: dict | None, answer: Callable[[dict], bytes],
                     stream: Callable[[], StreamTranslator],
                     rewrite: Callable[[dict], None] | None = None) -> Response | StreamWriter:
    """One call under exact continuation. `answer`: a whole chat completion -> the client's body (the caller
    strips or translates); `stream`: the client's StreamTranslator for chat.completion.chunk dicts. `rewrite`
    (optional) edits derender's answer (the whole completion, or each chunk) in place before the chain learns it
    and the client gets it: a protocol that hands out tool-call ids of its own (Gemini's positional ids) has the
    chain learn the ids its client will send back."""
    cont: ExactContinuation = ex.parts.continuation  # type: ignore[assignment]
    io, chains = cont.io(ex.episode_id), cont.chains(ex.episode_id)
    chat_request = _chat_request(plan)
    local = LocalCall(cont.local, plan, chat_request)
    try:
        rendered = await _down(local.render(io, chat_request))
    except TokenIOError as exc:
        ex.fields["upstream_request"] = dumps(chat_request)
        return await _post_error(ex, exc)
    request = canonical_request(chat_request, dropped)
    decision = chains.classify(request, rendered.prompt_ids)
    if decision.history_messages:  # a reply cut without an end-of-turn id: how does the template close its turn?
        decision = await _closing_a_cut_reply(io, local, chains, request, chat_request, rendered, decision)
    prompt = decision.prompt_ids
    # Render resolved max_tokens for the plain prompt; a continued prompt has another length, so generate
    # resolves it again unless the client sent one (then it is the client's, as chat completions would keep it).
    keep = _client_max_tokens(plan) or prompt == rendered.prompt_ids
    body = generate_body(rendered, prompt, keep_max_tokens=keep, stream=plan.stream)
    body["model"] = plan.upstream.get("model")
    ex.fields["upstream_request"] = dumps(body)
    ex.fields["continuation"] = {"mode": "exact", **decision.as_json(), "plain_len": len(rendered.prompt_ids),
                                 "sampling_params": body["sampling_params"], "local": local.done}
    ex.fields["prompt_token_ids"] = prompt
    chains.begin(decision)  # no await since classify: a concurrent continuation of this tip forks as `parallel`
    try:
        if not plan.stream:
            return await _whole(ex, io, local, chains, decision, body, chat_request, plan, answer, rewrite)
        return await _streamed(ex, io, chains, decision, body, chat_request, plan, stream, rewrite)
    finally:  # every ending without a record (refused, unreachable, client gone, an exception) frees the chain
        chains.release(decision)


class LocalCall:
    """One call's use of the in-process render / derender (proxy/local_token_io.py): local where the call's shape
    is confirmed, else the server's, whose answer is then compared. `done` lists what ran locally (the record's
    `continuation.local`)."""

    __slots__ = ("body", "done", "io", "key", "want_ids", "want_logprobs", "whole")

    def __init__(self, io: LocalTokenIO | None, plan: ChatPlan, chat_request: dict):
        self.io, self.want_ids, self.want_logprobs = io, plan.want_token_ids, plan.want_logprobs
        self.whole = not plan.stream
        self.done: list[str] = []
        self.body = chat_request
        self.key = self._shape(chat_request)  # the call's own body: its shape, computed once

    def _shape(self, body: dict) -> str | None:
        return self.io.shape_key(body, self.want_ids, self.want_logprobs) if self.io is not None else None

    def _key(self, body: dict) -> str | None:
        return self.key if body is self.body else self._shape(body)

    async def render(self, server: TokenIO, body: dict) -> Rendered:
        io = self.io
        key = self._key(body)
        if io is None or key is None:
            return await server.render(body)
        rendered = io.render(key, body)
        if rendered is not None:
            self.done.append("render" if body.get("add_generation_prompt", True) is not False else "history")
            return rendered
        rendered = await server.render(body)
        io.learn_render(key, body, rendered)
        return rendered

    async def derender(self, server: TokenIO, generate_response: dict, chat_request: dict,
                       prompt_ids: list[int]) -> dict:
        # Only whole answers without logprobs asked: a stream derenders chunk by chunk on the server, hidden under
        # generation, and the local answer carries no logprobs.
        io = self.io
        key = self._key(chat_request) if self.whole and not self.want_logprobs else None
        if io is None or key is None:
            return await server.derender(generate_response, chat_request, prompt_ids)
        data = io.derender(key, generate_response, prompt_ids)
        if data is not None:
            self.done.append("derender")
            return data
        data = await server.derender(generate_response, chat_request, prompt_ids)
        io.learn_derender(key, generate_response, prompt_ids, data)
        return data


async def _closing_a_cut_reply(io: TokenIO, local: LocalCall, chains: Chains, request: Request, chat_request: dict,
                               rendered: Rendered, decision: Decision) -> Decision:
    """Classify again with the render of the history up to the cut reply (chains.closing_ids): a continuation
    with the reply closed, or the same `unclosed` fallback when the render does not close it (or fails)."""
    history_body = {**chat_request, "messages": chat_request["messages"][:decision.history_messages],
                    "add_generation_prompt": False, "continue_final_message": False}
    try:
        history = await _down(local.render(io, history_body))
    except TokenIOError:
        return decision  # the plain render stands: the call is answered, counted as `unclosed`
    return chains.classify(request, rendered.prompt_ids, history_ids=history.prompt_ids)


def _record(ex: Exchange, chains: Chains, decision: Decision, reply: dict, ids: list[int], finish: str | None) -> None:
    """The chain learns the call; the record names the chain the call is on (a start, fork or fallback makes a
    new one), which is how the trainer keeps each conversation in its own row."""
    chain = chains.record(decision, reply, ids, finish)
    ex.fields["continuation"]["chain"] = chain.id


async def _whole(ex: Exchange, io: TokenIO, local: LocalCall, chains: Chains, decision: Decision, body: dict,
                 chat_request: dict, plan: ChatPlan, answer: Callable[[dict], bytes],
                 rewrite: Callable[[dict], None] | None) -> Response:
    prompt = decision.prompt_ids
    try:
        generated = await _down(io.generate(prompt, body["sampling_params"], body["model"], base=body))
        if not generated.token_ids:  # derender refuses an empty generation; nothing was sampled to answer
            raise ProxyReject(502, "alight: the upstream generated no token", "upstream_error")
        data = await _down(local.derender(io, without_stop_token(generated.response), chat_request, prompt))
    except TokenIOError as exc:
        return await _post_error(ex, exc)
    usage = data.get("usage")
    if isinstance(usage, dict):  # the stop token counts, as chat completions counts it
        usage["completion_tokens"] = len(generated.token_ids)
        usage["total_tokens"] = len(prompt) + len(generated.token_ids)
    _dress(data, plan, prompt, generated.token_ids)
    if rewrite is not None:
        rewrite(data)
    choice = (data.get("choices") or [{}])[0]
    reply = dict(choice.get("message") or {})
    fields = {"completion_token_ids": generated.token_ids, "completion_logprobs": generated.logprobs or None,
              "finish_reason": choice.get("finish_reason") or generated.finish_reason, "usage": data.get("usage")}
    _record(ex, chains, decision, reply, generated.token_ids, generated.finish_reason)
    return await ex.reply(200, answer(data), "ok", upstream_response=dumps(generated.response), **fields)


def _stopped_on_token(choice: dict) -> bool:
    """Generation ended on the eos or a stop token id (not a stop string, not length)."""
    return choice.get("finish_reason") == "stop" and not isinstance(choice.get("stop_reason"), str)


def without_stop_token(event: dict) -> dict:
    """A generate answer (or stream event) without the token it stopped on, for derender. Chat completions'
    detokeniser leaves the stop token out of the text; derender detokenises every id it gets, and with a tool
    parser configured (skip_special_tokens off) the text then ends in `<|im_end|>`. The record and the chain keep
    the stop token; only the text sent to the client leaves it out. An answer of the stop token alone stays whole
    (derender refuses an empty one)."""
    choices = event.get("choices") or ()
    if not choices or not _stopped_on_token(choices[0]) or len(choices[0].get("token_ids") or ()) < 2:
        return event
    choice = dict(choices[0])
    choice["token_ids"] = choice["token_ids"][:-1]
    content = (choice.get("logprobs") or {}).get("content")
    if content:
        choice["logprobs"] = {**choice["logprobs"], "content": content[:-1]}
    return {**event, "choices": [choice, *choices[1:]]}


def _last_step(held: dict, final: dict) -> dict:
    """The held event with the final event's finish (its only id, the stop token, left out)."""
    choice = {**held["choices"][0], "finish_reason": final["choices"][0].get("finish_reason"),
              "stop_reason": final["choices"][0].get("stop_reason")}
    return {**held, "choices": [choice]}


class _Reply:
    """The assistant message a stream delivered, assembled from its deltas (what the chain compares the next
    request with): content, reasoning, tool calls by index with their arguments joined."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict] = {}
        self.finish: str | None = None

    def add(self, chunk: dict) -> None:
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            if delta.get("reasoning"):
                self.reasoning.append(delta["reasoning"])
            for call in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(call.get("index", 0), {"type": "function", "function": {
                    "name": "", "arguments": ""}})
                if call.get("id"):
                    slot["id"] = call["id"]
                fn = call.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def message(self) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.reasoning:
            message["reasoning"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message


async def _streamed(ex: Exchange, io: TokenIO, chains: Chains, decision: Decision, body: dict, chat_request: dict,
                    plan: ChatPlan, open_translator: Callable[[], StreamTranslator],
                    rewrite: Callable[[dict], None] | None) -> Response | StreamWriter:
    prompt = decision.prompt_ids
    ids: list[int] = []
    logprobs: list[float] = []
    state: dict[str, Any] = {"finish": None, "usage": None}
    deltas = io.generate_stream(prompt, body["sampling_params"], body["model"], base=body)
    try:  # the first event before any byte goes out: a refused generate is an HTTP error, not a broken stream
        first = await _down(deltas.__anext__())
    except TokenIOError as exc:
        await deltas.aclose()
        return await _post_error(ex, exc)
    except StopAsyncIteration:
        raise ProxyReject(502, "alight: the upstream generate stream ended before its first event", "upstream_error")

    async def generated() -> AsyncIterator[GeneratedDelta]:
        delta: GeneratedDelta | None = first
        while delta is not None:
            ids.extend(delta.token_ids)
            logprobs.extend(delta.logprobs)
            state["finish"] = delta.finish_reason or state["finish"]
            state["usage"] = delta.usage or state["usage"]
            yield delta
            try:
                delta = await deltas.__anext__()
            except StopAsyncIteration:
                delta = None

    async def tapped() -> AsyncIterator[GeneratedDelta]:
        """Generate's events for derender, one engine step behind: the step that stops on the stop token goes
        without it (without_stop_token), and when the stop token came alone its finish joins the step before."""
        held: dict | None = None
        async for delta in generated():
            event = delta.event
            choices = event.get("choices")
            if choices and _stopped_on_token(choices[0]):
                if len(choices[0].get("token_ids") or ()) == 1 and held is not None and held.get("choices"):
                    event, held = _last_step(held, event), None
                else:
                    event = without_stop_token(event)
            if held is not None:
                yield GeneratedDelta([], [], None, held)
            held = event
        if held is not None:
            yield GeneratedDelta([], [], None, held)

    translator = open_translator()
    reply = _Reply()
    try:
        out = await ex.start_stream()
    except ProxyReject:  # the client is gone: generate stops here, not at the end of its answer
        with contextlib.suppress(RuntimeError):
            await deltas.aclose()
        raise
    sent: list[bytes] = []
    outcome, error, answered = "ok", None, False
    try:
        try:
            async for chunk in derender_stream(io, tapped(), chat_request, prompt):
                _dress(chunk, plan, prompt, None)
                if rewrite is not None:
                    rewrite(chunk)
                reply.add(chunk)
                data = translator.feed(chunk)
                if data:
                    if ex.first_byte_at is None:
                        ex.first_byte_at = time.time()
                    sent.append(data)
                    await out.write(data)
        except (TokenIOError, *UPSTREAM_DOWN) as exc:
            outcome, error = "upstream_error", f"upstream stream broke: {exc or type(exc).__name__}"
        if error is None and not ids:
            outcome, error = "upstream_error", "the upstream generated no token"
        if error is None:
            # The chain learns the reply before the client has all of it: its next request may come at once.
            _record(ex, chains, decision, reply.message(), ids, state["finish"])
            tail = translator.finish()
            answered = True
        else:
            tail = translator.fail(f"alight: {error}")
        sent.append(tail)
        await out.write(tail)
        await out.write_eof()
    except (ConnectionResetError, asyncio.CancelledError) as exc:
        if not (answered and isinstance(exc, ConnectionResetError)):
            outcome, error = "partial", f"client disconnected mid-stream ({type(exc).__name__})"
        if isinstance(exc, asyncio.CancelledError):
            _finish(ex, outcome, sent, error, ids, logprobs, state, reply)
            raise
    except Exception as exc:  # noqa: BLE001 - headers are sent: record it and end this stream, nothing more
        log.exception("exact-continuation stream failed after the response started")
        outcome, error = "internal_error", f"alight: internal error mid-stream: {exc!r}"
    finally:
        with contextlib.suppress(RuntimeError):  # still running inside a cancelled feed task: it closes itself
            await deltas.aclose()
    _finish(ex, outcome, sent, error, ids, logprobs, state, reply)
    return out


def _finish(ex: Exchange, outcome: str, sent: list[bytes], error: str | None, ids: list[int], logprobs: list[float],
            state: dict, reply: _Reply) -> None:
    ex.finish_stream(outcome, sent, error=error, completion_token_ids=ids or None,
                     completion_logprobs=logprobs or None, finish_reason=reply.finish or state["finish"],
                     usage=state["usage"])
