"""`alight run --upstream URL [--upstream URL ...]`: probe each server once before the run, so its answers can be
planned for; several servers must serve the same model (the proxy keeps each episode on one of them).

Asks GET /v1/models for the model to use (proxy/probe.py), then one tiny chat completion with `return_token_ids` and
`logprobs`. A server that rejects those (hosted OpenAI-compatible APIs answer 400) still works, but the proxy
stops asking for them, calls are recorded without ids, and the summary says the run cannot be trained on.

A server that answers ids is then asked which logprobs it reports (proxy/logprobs_mode.py): a run that trains
compares the trainer's logprobs with vLLM's processed ones, so it stops before round 0 on a server started without
`--logprobs-mode processed_logprobs`, naming the flags; a run that only rolls out says so and goes on.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from agentlightning_cli import local_http
from agentlightning_cli.errors import AlightError

TIMEOUT_S = 30.0
# What a vLLM server alight did not start needs for its logprobs to be trained against (README, "--upstream").
SERVER_FLAGS = "--logprobs-mode processed_logprobs --generation-config vllm"
SERVER_COMMAND = ("python -m vllm.entrypoints.openai.api_server --model DIR --enable-lora " + SERVER_FLAGS
                  + " --port 8000")


@dataclass
class Probe:
    root: str
    model: str
    token_ids: bool
    why: str | None = None
    max_model_len: int | None = None
    """The served model's context, where the server says it (vLLM does in GET /v1/models)."""
    warning: str | None = None
    """Said before round 0 and in the summary: a server whose logprobs a later `alight train` could not use."""


def _request(method: str, url: str, body: dict | None = None, api_key: str | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with local_http.urlopen(req, timeout=TIMEOUT_S) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def probe_upstream(url: str, api_key: str | None = None) -> Probe:
    from agentlightning_cli.proxy.probe import probe_upstream as list_models

    info = list_models(url, api_key=api_key)  # AlightError when unreachable or not OpenAI-compatible
    if not info.models:
        raise AlightError(f"--upstream {url} lists no models (GET /v1/models)", "load a model on the server first")
    root, models = info.root_url, info.models
    model = models[0]
    context = info.max_model_len.get(model)
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "return_token_ids": True, "logprobs": True}
    status, text = _request("POST", f"{root}/v1/chat/completions", body, api_key)
    if status == 200:
        try:
            answer = json.loads(text)
            ok = bool(answer.get("prompt_token_ids")) or bool(answer["choices"][0].get("token_ids"))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            ok = False
        return Probe(root, model, ok, None if ok else "the server answered without token ids", context)
    if status in (400, 422):
        plain = {k: v for k, v in body.items() if k not in ("return_token_ids", "logprobs")}
        status2, text2 = _request("POST", f"{root}/v1/chat/completions", plain, api_key)
        if status2 == 200:
            return Probe(root, model, False, f"the server rejected return_token_ids/logprobs ({status}): {text[:200]}",
                         context)
        status, text = status2, text2
    raise AlightError(f"--upstream {url}: a test chat completion with model {model!r} answered {status}: {text[:300]}",
                      "check the server's log")


def check_logprobs(servers: list[tuple[str, str]], trains: bool, api_key: str | None = None,
                   fix: str = f"restart it with {SERVER_FLAGS}, e.g. `{SERVER_COMMAND}`") -> str | None:
    """Ask each (root, model) server which logprobs it reports. A server that does not report processed logprobs:
    AlightError when the run `trains`, else the warning to show (None when every server reports them)."""
    from agentlightning_cli.proxy.logprobs_mode import probe_logprobs_mode

    wrong = [(root, probe_logprobs_mode(root, model, api_key)) for root, model in servers]
    wrong = [(root, found) for root, found in wrong if found.mode != "processed"]
    if not wrong:
        return None
    what = "; ".join(f"{root} does not report processed logprobs: {found.detail}" if found.mode != "unknown" else
                     f"{root}: cannot tell which logprobs it reports: {found.detail}" for root, found in wrong)
    why = ("the trainer scores each sampled token against the logprobs vLLM reports after temperature, top-k, top-p"
           " and min-p (--logprobs-mode processed_logprobs)")
    if trains:
        raise AlightError(f"{what}. {why[0].upper()}{why[1:]}, so rounds trained against this server's logprobs "
                          "would train under another distribution without a sign", fix)
    return f"{what}: calls of this run cannot be trained on later ({why}); {fix}"


def probe_upstreams(urls: list[str], trains: bool = False, api_key: str | None = None) -> Probe:
    """probe_upstream for each server; one Probe for all (token ids only when every server answers them).
    AlightError when they serve different models or one appears twice, or, in a run that `trains`, when a server
    does not report processed logprobs (check_logprobs; otherwise Probe.warning says so)."""
    from agentlightning_cli.proxy.probe import server_root

    roots = [server_root(u) for u in urls]
    twice = sorted({r for r in roots if roots.count(r) > 1})
    if twice:
        raise AlightError(f"--upstream names the same server more than once: {', '.join(twice)}",
                          "give each server once")
    probes = [probe_upstream(u, api_key) for u in urls]
    differ = [f"{p.root} serves {p.model!r}" for p in probes if p.model != probes[0].model]
    if differ:
        raise AlightError(f"the --upstream servers serve different models ({probes[0].root} serves "
                          f"{probes[0].model!r}; {'; '.join(differ)})",
                          "start every server with the same model: the proxy sends each episode to one of them")
    known = [p.max_model_len for p in probes if p.max_model_len]
    context = min(known) if known else None  # the smallest server bounds what every episode may send
    without = [p for p in probes if not p.token_ids]
    if without:
        return Probe(probes[0].root, probes[0].model, False, f"{without[0].root}: {without[0].why}", context)
    warning = check_logprobs([(p.root, p.model) for p in probes], trains, api_key)
    return Probe(probes[0].root, probes[0].model, True, None, context, warning)


def upstream_continuation(urls: list[str], probe: Probe, asked: str | None, api_key: str | None, name: str) -> str:
    """The effective proxy.continuation for servers alight did not start (proxy/token_io_probe.py): AlightError
    when `exact` is asked of a server without render / generate / derender; the fallback's line on stderr."""
    import sys

    from agentlightning_cli.proxy.probe import server_root
    from agentlightning_cli.proxy.token_io_probe import resolve_continuation

    found = resolve_continuation(asked, [(server_root(u), probe.model) for u in urls], api_key, probe.token_ids)
    if found.note:
        print(f"{name}: {found.note}", file=sys.stderr, flush=True)
    return found.mode
