"""Does a vLLM server answer render / token-in-token-out generate / derender, and so which `proxy.continuation`
a run gets (issue 34).

vLLM >= 0.30 registers these routes only under `--enable-scale-out`; without it each answers 403
(PermissionDeniedError, "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out ..."), and a
server older than 0.24, or one that is not vLLM, answers 404. The probe walks the real path once, as exact
continuation will: render a one-message chat, generate one token from the rendered request, derender the answer
(with the chat request: a server with a tool or reasoning parser refuses derender without it). Synchronous
(urllib), like proxy/logprobs_mode.py: commands call it before their event loop starts.

End-of-turn ids (`server_end_of_turn_ids`): exact continuation splits prompts into turns at them. Where the
proxy has no local tokenizer (a server alight did not start, `alight proxy --upstream`), the server says which
they are: the template's own end-of-turn token (the id right after an assistant turn's text in a render of a
two-turn chat) and the usual end-of-turn names that are one token in its vocabulary (/tokenize).

Resolution (`resolve_continuation`): `render` asked -> render, nothing probed; `exact` asked -> exact, or
AlightError naming the flag when a server lacks the endpoints; unset -> exact where every server answers them,
else render with one line saying why.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from agentlightning_cli import local_http
from agentlightning_cli.errors import AlightError, upstream_error_message
from agentlightning_cli.proxy.sampling_keys import NEUTRAL

TIMEOUT_S = 60.0
FLAG = "--enable-scale-out"
RENDER, GENERATE, DERENDER = "/v1/chat/completions/render", "/inference/v1/generate", "/v1/chat/completions/derender"


@dataclass
class TokenEndpoints:
    available: bool
    detail: str
    """Why not, in words (the endpoint, its status and vLLM's message); empty when available."""
    switched_off: bool = False
    """A 403: the endpoints exist and `--enable-scale-out` turns them on."""


@dataclass
class Continuation:
    mode: str
    """`exact` or `render`: what the proxy does."""
    note: str | None = None
    """One line for stderr when the default fell back to `render`."""


def _post(root: str, path: str, body: dict, api_key: str | None, timeout_s: float) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    request = urllib.request.Request(f"{root}{path}", data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with local_http.urlopen(request, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def probe_token_endpoints(root: str, model: str, api_key: str | None = None,
                          timeout_s: float = TIMEOUT_S) -> TokenEndpoints:
    """Render, generate (one token) and derender one tiny chat on the server at `root` (no /v1) under `model`."""
    chat = {**NEUTRAL, "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "logprobs": True}
    try:
        status, text = _post(root, RENDER, chat, api_key, timeout_s)
        if status == 200:
            rendered = json.loads(text)
            status, text = _post(root, GENERATE, rendered, api_key, timeout_s)
            path = GENERATE
            if status == 200:
                answer = json.loads(text)
                status, text = _post(root, DERENDER, {"model": model, "generate_response": answer, "chat_request": chat,
                                                      "prompt_tokens": len(rendered["token_ids"]),
                                                      "prompt_token_ids": rendered["token_ids"]}, api_key, timeout_s)
                path = DERENDER
                if status == 200 and json.loads(text).get("object") == "chat.completion":
                    return TokenEndpoints(True, "")
        else:
            path = RENDER
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
        return TokenEndpoints(False, f"probing {RENDER} / {GENERATE} / {DERENDER} failed ({exc})")
    said = upstream_error_message(text, 200)
    if status == 403:
        return TokenEndpoints(False, f"POST {path} answered 403 ({said}): the server was started without {FLAG}",
                              switched_off=True)
    if status == 404:
        return TokenEndpoints(False, f"POST {path} answered 404: the server has no such endpoint (vLLM >= 0.30 "
                                     f"with {FLAG} has it)")
    return TokenEndpoints(False, f"POST {path} answered {status}: {said}")


def resolve_continuation(asked: str | None, servers: list[tuple[str, str]], api_key: str | None = None,
                         token_ids: bool = True, fix: str | None = None) -> Continuation:
    """The effective `proxy.continuation` for `servers` [(root, model)]. `asked`: the setting (None: unset);
    `token_ids`: the servers answer ids at all (hosted APIs do not: render only); `fix`: the hint when `exact` is
    asked on a server without the endpoints (default: the flag to restart it with)."""
    if asked == "render":
        return Continuation("render")
    if not token_ids:
        why = "the upstream answers no token ids"
        if asked == "exact":
            raise AlightError(f"proxy.continuation is exact, but {why}", "set proxy.continuation: render")
        return Continuation("render", f"proxy.continuation: render ({why})")
    missing = [(root, found) for root, model in servers
               if not (found := probe_token_endpoints(root, model, api_key)).available]
    if not missing:
        return Continuation("exact")
    what = "; ".join(f"{root}: {found.detail}" for root, found in missing)
    if asked == "exact":
        raise AlightError(f"proxy.continuation is exact, but the upstream has no render / generate / derender "
                          f"endpoints ({what})",
                          fix or f"restart vLLM with {FLAG} (vLLM >= 0.30), or set proxy.continuation: render")
    return Continuation("render", f"proxy.continuation: render, not exact ({what}); start vLLM with {FLAG} for "
                                  "exact continuation")


TOKENIZE = "/tokenize"


def _ids(root: str, path: str, body: dict, api_key: str | None, timeout_s: float, key: str) -> list[int] | None:
    status, text = _post(root, path, body, api_key, timeout_s)
    if status != 200:
        return None
    ids = json.loads(text).get(key)
    return ids if isinstance(ids, list) and all(isinstance(i, int) for i in ids) else None


def server_end_of_turn_ids(root: str, model: str, names: tuple[str, ...], api_key: str | None = None,
                           timeout_s: float = TIMEOUT_S) -> frozenset[int]:
    """The end-of-turn ids of the model served at `root` as `model`, asked of the server (empty when it cannot
    say): each of `names` that is a single token of its vocabulary, and the token the chat template closes an
    assistant turn with, read from a render of [user, assistant] against the render of [user] + the generation
    prompt (the assistant text's own ids between them, then the closing token)."""
    found: set[int] = set()
    try:
        for name in names:
            ids = _ids(root, TOKENIZE, {"model": model, "prompt": name, "add_special_tokens": False}, api_key,
                       timeout_s, "tokens")
            if ids is not None and len(ids) == 1:
                found.add(ids[0])
        user = [{"role": "user", "content": "hi"}]
        text = "ok"
        opened = _ids(root, RENDER, {"model": model, "messages": user, "add_generation_prompt": True}, api_key,
                      timeout_s, "token_ids")
        closed = _ids(root, RENDER, {"model": model, "messages": [*user, {"role": "assistant", "content": text}],
                                     "add_generation_prompt": False}, api_key, timeout_s, "token_ids")
        own = _ids(root, TOKENIZE, {"model": model, "prompt": text, "add_special_tokens": False}, api_key, timeout_s,
                   "tokens")
        if opened and closed and own and closed[:len(opened)] == opened:
            after = closed[len(opened):]
            if after[:len(own)] == own and len(after) > len(own):
                found.add(after[len(own)])
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AlightError(f"asking {root} for the model's end-of-turn tokens failed ({exc})",
                          "check that the upstream is up, or set proxy.continuation: render") from exc
    return frozenset(found)
