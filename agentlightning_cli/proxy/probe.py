"""Checking an upstream model server before traffic goes to it: `GET /v1/models`.

`--upstream` may be given as the server root (`http://host:8000`) or as the base URL OpenAI clients and vLLM
print (`http://host:8000/v1`); `server_root` turns either into the root the proxy appends `/v1/...` and
`/tokenize` to. `probe_upstream` says plainly when the server is unreachable or not OpenAI-compatible, and
otherwise which models it serves. Synchronous (urllib): commands call it before their event loop starts, or
in a thread.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from agentlightning_cli import local_http
from agentlightning_cli.errors import AlightError, upstream_error_message

PROBE_TIMEOUT_S = 5.0
_HINT = "--upstream takes an OpenAI-compatible server's root or its /v1 base URL, e.g. http://127.0.0.1:8000/v1"


@dataclass
class UpstreamInfo:
    root_url: str
    """What the proxy sends to: `{root_url}/v1/chat/completions`, `{root_url}/tokenize`."""
    base_url: str
    """`{root_url}/v1`, the form OpenAI clients take."""
    models: list[str] = field(default_factory=list)
    """The model ids the server lists (for vLLM: the base model, then loaded LoRA adapters)."""
    max_model_len: dict[str, int] = field(default_factory=dict)
    """Context length per model, where the server says (vLLM does)."""

    def describe(self) -> str:
        return ", ".join(self.models) if self.models else "(no models listed)"


def server_root(url: str) -> str:
    """`http://h:8000`, `http://h:8000/`, `http://h:8000/v1` and `http://h:8000/v1/` -> `http://h:8000`
    (a path before /v1, as behind a reverse proxy, is kept)."""
    url = url.strip().rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def check_url(url: str) -> None:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AlightError(f"--upstream must be an http:// or https:// URL, got {url!r}",
                          "e.g. --upstream http://127.0.0.1:8000")


def probe_upstream(url: str, timeout_s: float = PROBE_TIMEOUT_S, api_key: str | None = None) -> UpstreamInfo:
    """`GET {root}/v1/models` (with `api_key`, vLLM's --api-key, when given); AlightError (message + hint) when the
    server cannot be used."""
    check_url(url)
    root = server_root(url)
    models_url = f"{root}/v1/models"
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    request = urllib.request.Request(models_url, headers={"Accept": "application/json", **auth})
    try:
        with local_http.urlopen(request, timeout=timeout_s) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = upstream_error_message(exc.read())
        if exc.code in (401, 403):
            raise AlightError(f"the upstream {root} wants an API key (GET /v1/models answered {exc.code}: {detail})",
                              "set serve.api_key (ALIGHT_SERVE__API_KEY) to the key the server was started with "
                              "(vLLM: --api-key or VLLM_API_KEY); alight sends it on every call" if not api_key else
                              "serve.api_key (ALIGHT_SERVE__API_KEY) is not the key the server was started with"
                              ) from exc
        raise AlightError(f"the upstream {root} is not an OpenAI-compatible server: GET /v1/models answered "
                          f"HTTP {exc.code}" + (f" ({detail})" if detail else ""), _HINT) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AlightError(f"the upstream {root} is unreachable ({reason})",
                          "start the model server first (e.g. `vllm serve MODEL --port 8000`), or check --upstream"
                          ) from exc
    try:
        data = json.loads(raw)
        entries = data["data"]
        models = [str(entry["id"]) for entry in entries]
    except (ValueError, KeyError, TypeError) as exc:
        raise AlightError(f"the upstream {root} is not an OpenAI-compatible server: GET /v1/models did not "
                          f"answer a model list (got {raw[:200]!r})", _HINT) from exc
    lengths = {str(e["id"]): e["max_model_len"] for e in entries
               if isinstance(e, dict) and isinstance(e.get("max_model_len"), int)}
    return UpstreamInfo(root_url=root, base_url=f"{root}/v1", models=models, max_model_len=lengths)
