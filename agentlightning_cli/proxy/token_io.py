"""vLLM's token-in / token-out path, as exact continuation (issue 34) uses it: render a chat body to its prompt ids
and sampling params, generate from ids the proxy chooses, derender the sampled ids back to a chat completion with
the server's own tool and reasoning parsers. On the proxy's pooled HTTP client (proxy/upstream.py). The server
must run with `--enable-scale-out` (proxy/token_io_probe.py checks that at start).

Shapes in vLLM 0.32 (vllm/entrypoints/scale_out/, checked against a running server; notes/item34-io.md has them in
full):

- `POST /v1/chat/completions/render` takes the chat body as is and answers a GenerateRequest: `token_ids` (the
  prompt chat completions would use: same template, tools, chat_template_kwargs), `sampling_params` (vLLM
  SamplingParams JSON with only non-default fields (so a resolved max_tokens of 16, the default, is absent:
  `render` puts it back); `max_tokens` already resolved, `logprobs` 0 for "the sampled
  token's logprob", `seed` when sent), `model` (as sent: a LoRA adapter's name stays), `reasoning_ended`,
  `reasoning_parser_kwargs`, `stream`, `stream_options`, `cache_salt`, `priority`, `token_offsets`.
- `POST /inference/v1/generate` takes that GenerateRequest (`token_ids` replaced at will) and answers
  `{request_id: "generate-tokens-<id>", model, usage, choices: [{index, finish_reason, stop_reason, token_ids,
  logprobs: {content: [{token_id, logprob, rank, top_logprobs: [...]}]}, weight_versions}]}`; `model` naming a
  loaded adapter runs under it (the adapter is in effect). Streaming (`stream: true`): SSE `data:` events, one per
  engine step, each `{request_id, choices: [{index, finish_reason, token_ids: <delta>, logprobs}]}`, then a
  usage-only event when `stream_options.include_usage`, then `[DONE]`.
- `sampling_params.max_tokens` left out: generate resolves it for *its* prompt (max_model_len - prompt length,
  capped by the server's generation config), so a continued, longer prompt gets the right budget; render's value
  is for the rendered prompt only.
- `POST /v1/chat/completions/derender` `{model, generate_response, chat_request, prompt_tokens, prompt_token_ids}`
  answers a `chat.completion` (content, reasoning, tool_calls from the server's parsers; logprobs with token
  strings; `usage.prompt_tokens` = what was passed). `chat_request` is required when a tool or reasoning parser is
  configured (alight always configures one), `prompt_token_ids` lets the reasoning parser see whether the prompt
  left reasoning open: pass the ids actually generated from.
- Streaming derender: the same path with `{stream: true, generate_chunk, stream_state, chat_request,
  prompt_token_ids, prompt_tokens}` answers `{chunk: <chat.completion.chunk>, stream_state}`; the client carries
  `stream_state` to the next call. With a parser configured the state holds every output id so far and the server
  replays the parser over all of them on each call (O(n) per call), so `StreamDerender` batches: it sends the
  generate events that arrived since its last call as one chunk, never more than one call in flight.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import AsyncIterator

from agentlightning_cli.errors import upstream_error_message
from agentlightning_cli.proxy.jsonio import dumps, loads
from agentlightning_cli.proxy.sse import SSEDecoder
from agentlightning_cli.proxy.upstream import UpstreamPool

RENDER = "/v1/chat/completions/render"
GENERATE = "/inference/v1/generate"
DERENDER = "/v1/chat/completions/derender"
SAMPLING_PARAMS_MAX_TOKENS_DEFAULT = 16  # vllm.SamplingParams.max_tokens' default (vLLM 0.32)
DETOKENISER_WINDOW = 32
"""Prompt ids a derender call needs from a server without a reasoning parser: its incremental detokeniser is seeded
from the prompt's last 7 ids (vLLM 0.32 detokenizer_utils.convert_prompt_ids_to_tokens: the initial offset 5, + 2),
and nothing else reads them there (a tool parser sees tools and output; only a reasoning parser asks the whole
prompt whether reasoning is still open). 32 leaves a margin; see `TokenIO.prompt_tail`."""


class TokenIOError(Exception):
    """An endpoint answered an error: `status` and vLLM's message (403: the server lacks --enable-scale-out)."""

    def __init__(self, path: str, status: int, message: str):
        super().__init__(f"POST {path} answered {status}: {message}")
        self.path, self.status, self.message = path, status, message


@dataclass
class Rendered:
    prompt_ids: list[int]
    sampling_params: dict
    """vLLM SamplingParams JSON, as render resolved it for `prompt_ids` (max_tokens included)."""
    generate_request: dict
    """The whole GenerateRequest (model, reasoning_ended, reasoning_parser_kwargs, ...): the base of a generate."""


@dataclass
class Generated:
    token_ids: list[int]
    logprobs: list[float]
    """The sampled tokens' logprobs (as vLLM's --logprobs-mode reports them), one per id."""
    finish_reason: str | None
    stop_reason: int | str | None
    response: dict
    """The generate answer as it came: what derender takes."""


@dataclass
class GeneratedDelta:
    """One streamed generate event of the one choice: its new ids and their logprobs."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None
    event: dict
    usage: dict | None = None


def choice_logprobs(choice: dict) -> list[float]:
    content = (choice.get("logprobs") or {}).get("content") or ()
    return [entry["logprob"] for entry in content]


def generate_body(rendered: Rendered, token_ids: list[int], *, keep_max_tokens: bool, stream: bool = False,
                  request_id: str | None = None) -> dict:
    """A generate request from a render, prompting `token_ids` instead. `keep_max_tokens` False (the client sent
    no max_tokens and the prompt is not the rendered one): generate resolves max_tokens for `token_ids` itself."""
    body = dict(rendered.generate_request)
    params = dict(rendered.sampling_params)
    if not keep_max_tokens:
        params.pop("max_tokens", None)
    body.update(token_ids=token_ids, sampling_params=params, stream=stream)
    body.pop("token_offsets", None)  # offsets of the rendered text: meaningless for other ids
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request_id is not None:
        body["request_id"] = request_id
    return body


class TokenIO:
    """render / generate / derender against one upstream pool.

    `prompt_tail`: set (to DETOKENISER_WINDOW) only for a server known to run no reasoning parser; derender calls
    then carry the prompt's last ids instead of all of them (`prompt_tokens`, the usage count, stays the whole
    prompt's length). A streaming derender call sends the prompt ids every time: at a 30k-token prompt they were
    most of the call's cost on the server (bench/token_io.py). None: the whole prompt, as vLLM's reasoning parsers
    need it."""

    def __init__(self, pool: UpstreamPool, prompt_tail: int | None = None):
        self.pool = pool
        self.prompt_tail = prompt_tail

    def derender_prompt(self, prompt_ids: list[int]) -> list[int]:
        """The prompt ids a derender call sends (see `prompt_tail`)."""
        tail = self.prompt_tail
        return prompt_ids if tail is None or len(prompt_ids) <= tail else prompt_ids[-tail:]

    async def _post(self, path: str, body: dict) -> dict:
        response = await self.pool.post(path, dumps(body))
        try:
            raw = await response.read()
        finally:
            response.release()
        if response.status != 200:
            raise TokenIOError(path, response.status, upstream_error_message(raw))
        return loads(raw)

    async def render(self, chat_body: dict) -> Rendered:
        """The prompt ids and effective sampling params vLLM would use for `chat_body` (a chat completions body as
        sent upstream: model, messages, tools, sampling keys, logprobs, seed)."""
        answer = await self._post(RENDER, chat_body)
        params = answer["sampling_params"]
        # Render writes only the SamplingParams fields that differ from the dataclass defaults, and max_tokens'
        # default is 16: a resolved 16 comes back absent, and generate would then resolve it again to the whole
        # context left (31k tokens on a 32k model). Render always resolves max_tokens, so absent means 16.
        params.setdefault("max_tokens", SAMPLING_PARAMS_MAX_TOKENS_DEFAULT)
        return Rendered(answer["token_ids"], params, answer)

    async def generate(self, token_ids: list[int], sampling_params: dict, model: str | None,
                       base: dict | None = None) -> Generated:
        """Sample from `token_ids` under `model` (a loaded LoRA adapter's name runs under that adapter).
        `base`: a render's generate request whose other fields (reasoning_ended, reasoning_parser_kwargs,
        cache_salt, priority) go along."""
        body = {**(base or {}), "token_ids": token_ids, "sampling_params": sampling_params, "model": model,
                "stream": False}
        body.pop("token_offsets", None)
        answer = await self._post(GENERATE, body)
        choice = answer["choices"][0]
        return Generated(choice.get("token_ids") or [], choice_logprobs(choice), choice.get("finish_reason"),
                         choice.get("stop_reason"), answer)

    async def generate_stream(self, token_ids: list[int], sampling_params: dict, model: str | None,
                              base: dict | None = None) -> AsyncIterator[GeneratedDelta]:
        """Like `generate`, yielding each engine step's new ids as it arrives (and a last delta with no ids that
        carries the usage)."""
        body = {**(base or {}), "token_ids": token_ids, "sampling_params": sampling_params, "model": model,
                "stream": True, "stream_options": {"include_usage": True}}
        body.pop("token_offsets", None)
        response = await self.pool.post(GENERATE, dumps(body))
        try:
            if response.status != 200:
                raise TokenIOError(GENERATE, response.status, upstream_error_message(await response.read()))
            decoder = SSEDecoder()
            async for data in response:
                for payload in decoder.payloads(data):
                    if payload == b"[DONE]":
                        return
                    event = loads(payload)
                    if "error" in event:  # vLLM reports a failure inside a started stream as an event
                        error = event["error"]
                        raise TokenIOError(GENERATE, int(error.get("code") or 500), str(error.get("message")))
                    choices = event.get("choices") or ()
                    if not choices:
                        yield GeneratedDelta([], [], None, event, event.get("usage"))
                        continue
                    choice = choices[0]
                    yield GeneratedDelta(choice.get("token_ids") or [], choice_logprobs(choice),
                                         choice.get("finish_reason"), event, event.get("usage"))
        finally:
            response.release()

    async def derender(self, generate_response: dict, chat_request: dict, prompt_ids: list[int],
                       model: str | None = None) -> dict:
        """The chat.completion for a generate answer: content, reasoning and tool calls split by the server's
        parsers as chat completions would. `chat_request`: the chat body (its tools and reasoning settings);
        `prompt_ids`: the ids generated from (the continued prompt, not the render's)."""
        sent = self.derender_prompt(prompt_ids)
        if not generate_response.get("prompt_token_ids") or sent is not prompt_ids:
            # Non-streaming derender seeds detokenisation from the request's prompt_token_ids, but its reasoning
            # parser asks generate_response.prompt_token_ids whether the prompt left reasoning open (vllm
            # renderers/online_derenderer.py), present only when generate echoed them (return_token_ids).
            generate_response = {**generate_response, "prompt_token_ids": sent}
        body = {"model": model or chat_request.get("model"), "generate_response": generate_response,
                "chat_request": chat_request, "prompt_tokens": len(prompt_ids), "prompt_token_ids": sent}
        answer = await self._post(DERENDER, body)
        auto = chat_request.get("tool_choice") in (None, "auto", "required")
        for choice in answer.get("choices") or ():
            # Chat completions answers "tool_calls" when its parser found calls for tool_choice auto/required;
            # vLLM 0.32's non-streaming derender passes generate's "stop" through (its streaming one rewrites).
            if auto and choice.get("finish_reason") == "stop" and (choice.get("message") or {}).get("tool_calls"):
                choice["finish_reason"] = "tool_calls"
        return answer


def merge_events(events: list[dict]) -> dict:
    """Several streamed generate events of the one choice as one: ids and logprobs joined, the last finish."""
    if len(events) == 1:
        return events[0]
    ids: list[int] = []
    content: list[dict] = []
    finish, stop = None, None
    for event in events:
        for choice in event.get("choices") or ():
            ids += choice.get("token_ids") or []
            content += (choice.get("logprobs") or {}).get("content") or []
            finish = choice.get("finish_reason") or finish
            stop = choice.get("stop_reason") if choice.get("finish_reason") else stop
    choice = {"index": 0, "token_ids": ids, "finish_reason": finish, "stop_reason": stop,
              "logprobs": {"content": content} if content else None}
    merged = {"request_id": events[0].get("request_id"), "choices": [choice]}
    usage = next((e["usage"] for e in reversed(events) if e.get("usage")), None)
    if usage is not None:
        merged["usage"] = usage
    return merged


@dataclass
class StreamDerender:
    """Streaming derender of one generation, batched: `push` generate events as they arrive; `chunks()` yields
    the chat.completion.chunk dicts. At most one derender call is in flight; events that arrive meanwhile go
    into the next call together (the server replays its parser over all output so far on every call)."""

    io: TokenIO
    chat_request: dict
    prompt_ids: list[int]
    model: str | None = None
    calls: int = 0
    _state: dict | None = None
    _pending: list[dict] = field(default_factory=list)
    _more: asyncio.Event = field(default_factory=asyncio.Event)
    _ended: bool = False

    def push(self, event: dict) -> None:
        self._pending.append(event)
        self._more.set()

    def end(self) -> None:
        self._ended = True
        self._more.set()

    async def chunks(self) -> AsyncIterator[dict]:
        while True:
            if not self._pending:
                if self._ended:
                    return
                self._more.clear()
                await self._more.wait()
                continue
            events, self._pending = self._pending, []
            body = {"stream": True, "model": self.model or self.chat_request.get("model"),
                    "generate_chunk": merge_events(events), "stream_state": self._state,
                    "chat_request": self.chat_request, "prompt_token_ids": self.io.derender_prompt(self.prompt_ids),
                    "prompt_tokens": len(self.prompt_ids)}
            answer = await self.io._post(DERENDER, body)
            self.calls += 1
            self._state = answer["stream_state"]
            yield answer["chunk"]


async def derender_stream(io: TokenIO, deltas: AsyncIterator[GeneratedDelta], chat_request: dict,
                          prompt_ids: list[int], model: str | None = None) -> AsyncIterator[dict]:
    """Generate deltas in, chat.completion.chunk dicts out, batched (StreamDerender): generation keeps reading
    while a derender call is in flight."""
    stream = StreamDerender(io, chat_request, prompt_ids, model)

    async def feed() -> None:
        try:
            async for delta in deltas:
                stream.push(delta.event)
        finally:
            stream.end()

    reader = asyncio.create_task(feed())
    try:
        async for chunk in stream.chunks():
            yield chunk
        await reader  # its error, if any
    finally:
        if not reader.done():
            reader.cancel()
