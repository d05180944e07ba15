"""Render and derender in the proxy's process, for request shapes the server has confirmed (issue 34, the latency
exact continuation adds).

Exact continuation asks the server three times a call: render (the plain prompt ids and the effective sampling
params), generate, derender (the sampled ids back to a chat answer). On a server alight started, the render of a
conversation (text, or tool calls and results) and the derender of a whole text answer are the served template and
tokenizer applied in-process (serve/chat_render.py, handed in as `LocalTokens`): ~0.3 ms at short prompts instead
of an HTTP round trip each.

Trust is earned per **shape**: the request's keys other than its messages, seed and max_tokens (model, sampling
settings, logprobs...), the route (render with or without a generation prompt) and what the client asked (ids,
logprobs). The first request of a shape goes to the server as before, and the local result is compared with its
answer: the same prompt ids and sampling params for render; for derender, the same answer in every field but its
id and creation time. Render is confirmed per message **structure** too (`structure`: the roles, and which come
first and last — the template branches a conversation takes), so a conversation's first call ([system, user])
does not vouch for its second ([system, user, assistant, user]), whose earlier assistant turn a template may
rewrite; a message other than a text turn adds what decides how the server prepares it (served_messages.kind: the
content's form, tool calls, a tool_call_id). Only what matched is answered locally after that, and every
`RECHECK_EVERY`-th call of a shape goes to the server again and is compared; one difference and the shape goes to
the server for good (logged once, counted in `stats`). What the local path takes at all:

- render: text turns of roles system / user / assistant as sent; or, with tools, tool calls, tool results or text
  content parts, the messages and tools prepared as the server prepares them for its template
  (proxy/served_messages.py). The server's content format ("openai" or "string", detected from its template) is
  not known here: both forms are compared with the server's renders and only what matched stays a candidate. Only
  the request keys in `LOCAL_KEYS` (none that changes the prompt: chat_template_kwargs, documents, ...);
- derender: a whole answer (not a stream), the client asked no logprobs (the local answer has none), the text has
  none of the tool parser's trigger strings (the server's parser would act on it) and does not end inside a
  character (the server holds such bytes back).

The generate call is never local: sampling stays on the server under the policy adapter.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from agentlightning_cli.proxy.served_messages import (CONTENT_FORMATS, NotLocal, kind, plain, served_conversation,
                                                      served_tools)
from agentlightning_cli.proxy.token_io import Rendered

log = logging.getLogger(__name__)

RECHECK_EVERY = 64
"""One call in this many of a confirmed shape is still sent to the server and compared."""

# Chat keys the local render supports: sampling settings (in the shape, so the server's params for them are reused)
# and alight's own (logprobs, return_token_ids). A key outside this set (tools, chat_template_kwargs, documents,
# add_special_tokens, response_format, ...) sends the request to the server.
LOCAL_KEYS = frozenset({
    "model", "messages", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "max_tokens", "max_completion_tokens", "n", "logprobs", "top_logprobs",
    "return_token_ids", "stop", "user", "tool_choice", "add_generation_prompt", "continue_final_message", "tools",
    "parallel_tool_calls"})
_PER_CALL = ("messages", "seed", "max_tokens", "max_completion_tokens")  # set per call, not part of the shape


class LocalTokens(Protocol):
    """The served model's template and tokenizer (serve/chat_render.ServedChatRender)."""

    parser_triggers: tuple[str, ...]

    def render_ids(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None = None
                   ) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass
class _Shape:
    render: Rendered | None = None
    """The server's render of this shape's first request: its generate request is the base of local ones."""
    structures: set = field(default_factory=set)
    """Message structures (`structure`) whose render matched the server's: only those render locally."""
    answer: dict | None = None
    """The server's derender of this shape's first answer: the form of local answers."""
    id_from_generate: bool = False
    render_refused: str | None = None
    derender_refused: str | None = None
    calls: Counter = field(default_factory=Counter)
    """Local-eligible calls so far, by `render` / `derender` (the recheck count)."""


def structure(messages: list[dict]) -> frozenset:
    """What decides which branches of a template a conversation takes: each role, and whether it comes first or
    last (templates special-case the first system turn and the last turn). [system, user] and [system, user,
    assistant, user] differ; every longer alternation of the second is the same structure."""
    last = len(messages) - 1
    return frozenset((m["role"], i == 0, i == last, *kind(m)) for i, m in enumerate(messages))


def _client_max_tokens(body: dict) -> int | None:
    value = body.get("max_tokens")
    return value if value is not None else body.get("max_completion_tokens")


def _prepared(chat_body: dict, content_format: str) -> tuple[list[dict], list[dict] | None]:
    """The messages and tools the template gets: text turns without tools as sent, anything else as the server
    prepares it in `content_format` (NotLocal: never local)."""
    messages, tools = chat_body.get("messages"), chat_body.get("tools")
    if tools is None and plain(messages):
        return messages, None
    return served_conversation(messages, content_format), None if tools is None else served_tools(tools)


@dataclass
class LocalTokenIO:
    tokens: LocalTokens
    recheck_every: int = RECHECK_EVERY
    shapes: dict[str, _Shape] = field(default_factory=dict)
    stats: Counter = field(default_factory=Counter)
    """local_render, server_render, render_mismatch, local_derender, server_derender, derender_mismatch."""
    formats: tuple[str, ...] = CONTENT_FORMATS
    """The server's content format, as far as its renders tell: each one that any prepared request rendered
    differently in is dropped (requests as sent, text turns without tools, do not tell)."""

    # ---- which shape, and whether this call may be local ---------------------------------------------------------

    def shape_key(self, chat_body: dict, want_token_ids: bool, want_logprobs: bool) -> str | None:
        """The shape of a chat body (as it goes upstream), or None: never local (see the module's list)."""
        if not chat_body.keys() <= LOCAL_KEYS:
            return None
        try:
            _prepared(chat_body, self.formats[0])
        except NotLocal:
            return None
        if chat_body.get("continue_final_message") or chat_body.get("tool_choice") not in (None, "none", "auto"):
            return None
        if (chat_body.get("n") or 1) != 1:
            return None
        rest = {k: v for k, v in chat_body.items() if k not in _PER_CALL}
        rest["_client"] = [want_token_ids, want_logprobs, _client_max_tokens(chat_body) is not None]
        return json.dumps(rest, sort_keys=True, separators=(",", ":"))

    def _learning(self, key: str | None, what: str) -> _Shape | None:
        """The shape a server answer of `what` (render / derender) is compared for; None: nothing to compare
        (never local, or already refused)."""
        if key is None:
            return None
        self.stats[f"server_{what}"] += 1
        shape = self.shapes.setdefault(key, _Shape())
        return None if getattr(shape, f"{what}_refused") else shape

    def _due(self, shape: _Shape, what: str) -> bool:
        """A confirmed shape's call that goes to the server anyway, to be compared (every recheck_every-th)."""
        shape.calls[what] += 1
        return shape.calls[what] % self.recheck_every == 0

    # ---- render ---------------------------------------------------------------------------------------------------

    def _local_ids(self, chat_body: dict, content_format: str) -> list[int]:
        messages, tools = _prepared(chat_body, content_format)
        return self.tokens.render_ids(messages, chat_body.get("add_generation_prompt", True) is not False, tools)

    def render(self, key: str | None, chat_body: dict) -> Rendered | None:
        """The render of `chat_body` in-process, when its shape is confirmed (else None: ask the server, then
        `learn_render` its answer)."""
        shape = self.shapes.get(key) if key is not None else None
        if shape is None or shape.render is None or shape.render_refused \
                or structure(chat_body["messages"]) not in shape.structures or self._due(shape, "render"):
            return None
        try:
            ids = self._local_ids(chat_body, self.formats[0])
        except Exception:  # noqa: BLE001 - the server renders it, and learn_render says why the shape is refused
            return None
        rendered = self.render_from(shape.render, chat_body, ids)
        self.stats["local_render"] += 1
        return rendered

    def learn_render(self, key: str | None, chat_body: dict, served: Rendered) -> None:
        """Compare the server's render with the local one; a match confirms the shape (the first time), a
        difference refuses it for good."""
        shape = self._learning(key, "render")
        if shape is None:
            return
        as_sent = chat_body.get("tools") is None and plain(chat_body.get("messages"))  # the same in both formats
        renders: dict[str, list[int]] = {}
        failed: Exception | None = None
        for f in self.formats[:1] if as_sent else self.formats:
            try:
                renders[f] = self._local_ids(chat_body, f)
            except Exception as exc:  # noqa: BLE001 - e.g. a template that adds content to a string: not this form
                failed = exc
        if not renders:  # a template that fails here but not on the server: server only
            return self._refuse_render(shape, f"the local render failed ({failed!r})")
        if as_sent:
            renders = dict.fromkeys(self.formats, renders[self.formats[0]])
        matched = tuple(f for f in self.formats if renders.get(f) == served.prompt_ids)
        if not matched:
            ids = next(iter(renders.values()))
            where = next((i for i, (a, b) in enumerate(zip(ids, served.prompt_ids)) if a != b),
                         min(len(ids), len(served.prompt_ids)))
            return self._refuse_render(shape, f"prompt ids differ from the server's at {where} (local {len(ids)} "
                                              f"ids, server {len(served.prompt_ids)})")
        if matched != self.formats:
            log.info("exact continuation: the server prepares messages in the %s content format", matched[0])
            self.formats = matched
        ids = served.prompt_ids
        if shape.render is not None:
            local = self.render_from(shape.render, chat_body, ids)
            for name, a, b in (("sampling params", local.sampling_params, _comparable(served.sampling_params,
                                                                                       chat_body)),
                               ("generate request", _request_rest(local.generate_request),
                                _request_rest(served.generate_request))):
                if a != b:
                    return self._refuse_render(shape, f"{name} differ from the server's ({a} != {b})")
        else:
            shape.render = Rendered(served.prompt_ids, _comparable(served.sampling_params, chat_body),
                                    served.generate_request)
        shape.structures.add(structure(chat_body["messages"]))

    def render_from(self, base: Rendered, chat_body: dict, ids: list[int]) -> Rendered:
        """A render of `chat_body` (prompt `ids`) on the server's render of its shape: the same request, with this
        call's seed and max_tokens. A client's max_tokens goes as sent: the server caps it at the context left,
        and generate stops there anyway (the engine ends a sequence at max_model_len), so the same tokens are
        sampled. None sent: left out, and generate resolves it for the prompt it gets, as render would."""
        params = _comparable(base.sampling_params, chat_body)
        request = {**base.generate_request, "token_ids": ids, "sampling_params": params}
        if "request_id" in request:  # render mints one per request: never send a shape's first one again
            request["request_id"] = uuid.uuid4().hex
        return Rendered(ids, params, request)

    def _refuse_render(self, shape: _Shape, why: str) -> None:
        shape.render_refused = why
        self.stats["render_mismatch"] += 1
        log.warning("exact continuation: this request shape renders through the server from now on: %s", why)

    # ---- derender -------------------------------------------------------------------------------------------------

    def _text(self, ids: list[int]) -> str | None:
        """The answer's text, or None when the server's answer could differ: a parser trigger in it, a character
        cut at the end, nothing."""
        text = self.tokens.decode(ids)
        if not text or text.endswith("\ufffd") or any(t in text for t in self.tokens.parser_triggers):
            return None
        return text

    def derender(self, key: str | None, generate_response: dict, prompt_ids: list[int]) -> dict | None:
        """The chat.completion for a generate answer in-process (the same fields the server's derender writes),
        when the shape's derender is confirmed; else None."""
        shape = self.shapes.get(key) if key is not None else None
        if shape is None or shape.answer is None or shape.derender_refused or self._due(shape, "derender"):
            return None
        answer = self._answer(shape, generate_response, prompt_ids)
        if answer is not None:
            self.stats["local_derender"] += 1
        return answer

    def _answer(self, shape: _Shape, generate_response: dict, prompt_ids: list[int]) -> dict | None:
        choices = generate_response.get("choices") or ()
        if len(choices) != 1:
            return None
        choice = choices[0]
        ids = choice.get("token_ids") or []
        text = self._text(ids)
        if text is None:
            return None
        form = shape.answer
        assert form is not None
        # The form's nested dicts are copied one level each (what is set below), never the whole answer.
        answer = {**form, "choices": [{**form["choices"][0], "message": {**form["choices"][0]["message"]}}]}
        rid = generate_response.get("request_id")
        answer["id"] = rid if shape.id_from_generate and rid else f"chatcmpl-{uuid.uuid4().hex}"
        answer["created"] = int(time.time())
        out = answer["choices"][0]
        out["message"]["content"] = text
        # No tool calls and no reasoning in a local answer, whatever the form had: a served answer with either
        # then differs from the local one and refuses the shape.
        if isinstance(out["message"].get("tool_calls"), list):
            out["message"]["tool_calls"] = []
        if "reasoning" in out["message"]:
            out["message"]["reasoning"] = None
        out["finish_reason"], out["stop_reason"] = choice.get("finish_reason"), choice.get("stop_reason")
        if out.get("token_ids") is not None:
            out["token_ids"] = list(ids)
        out["logprobs"] = None
        if isinstance(form.get("usage"), dict):
            answer["usage"] = {**form["usage"], "prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                               "total_tokens": len(prompt_ids) + len(ids)}
        return answer

    def learn_derender(self, key: str | None, generate_response: dict, prompt_ids: list[int], served: dict) -> None:
        """Compare the server's derender with the local answer (id, creation time and logprobs aside); the first
        match makes the server's answer the shape's form, a difference refuses the shape's derender for good."""
        shape = self._learning(key, "derender")
        if shape is None:
            return
        choices = served.get("choices") or ()
        if len(choices) != 1 or not isinstance(choices[0].get("message"), dict):
            return self._refuse_derender(shape, "the server's answer has no single message")
        if shape.answer is None:
            rid = generate_response.get("request_id")
            first = _Shape(answer=served, id_from_generate=bool(rid) and served.get("id") == rid)
            local = self._answer(first, generate_response, prompt_ids)
            if local is None:
                return  # not a local answer (a trigger, a cut character): confirms nothing yet
            if _comparable_answer(local) != _comparable_answer(served):
                return self._refuse_derender(shape, _difference(local, served))
            # Kept without its logprobs (a local answer has none): the form is copied on every local answer.
            form = {**served, "choices": [{**choices[0], "logprobs": None}]}
            shape.answer, shape.id_from_generate = form, first.id_from_generate
            return
        local = self._answer(shape, generate_response, prompt_ids)
        if local is not None and _comparable_answer(local) != _comparable_answer(served):
            self._refuse_derender(shape, _difference(local, served))

    def _refuse_derender(self, shape: _Shape, why: str) -> None:
        shape.derender_refused = why
        self.stats["derender_mismatch"] += 1
        log.warning("exact continuation: this request shape derenders through the server from now on: %s", why)


def _comparable(params: dict, chat_body: dict) -> dict:
    """Sampling params as the local render writes them: the server's max_tokens only where the client sent one
    (then the client's value), the call's seed."""
    out = {k: v for k, v in params.items() if k not in ("seed", "max_tokens")}
    if chat_body.get("seed") is not None:
        out["seed"] = chat_body["seed"]
    client_max = _client_max_tokens(chat_body)
    if client_max is not None:
        out["max_tokens"] = client_max
    return out


def _request_rest(request: dict) -> dict:
    return {k: v for k, v in request.items()
            if k not in ("token_ids", "sampling_params", "token_offsets", "request_id")}


def _comparable_answer(answer: dict) -> dict:
    out = {k: v for k, v in answer.items() if k not in ("id", "created")}
    out["choices"] = [{**c, "logprobs": None} for c in answer.get("choices") or ()]
    return out


def _difference(local: dict, served: dict) -> str:
    a, b = _comparable_answer(local), _comparable_answer(served)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    if keys == ["choices"]:
        ca, cb = a["choices"][0], b["choices"][0]
        keys = [f"choices[0].{k}" for k in sorted(ca.keys() | cb.keys()) if ca.get(k) != cb.get(k)]
        if "choices[0].message" in keys:
            ma, mb = ca.get("message") or {}, cb.get("message") or {}
            keys = [f"message.{k}: {ma.get(k)!r} != {mb.get(k)!r}" for k in sorted(ma.keys() | mb.keys())
                    if ma.get(k) != mb.get(k)] + [k for k in keys if k != "choices[0].message"]
    return "the local answer differs from the server's derender in " + ", ".join(keys)
