"""Which logprobs a vLLM server reports: after its sampling filters (`--logprobs-mode processed_logprobs`, what the
trainer's importance weights compare against) or before them (vLLM's default, raw_logprobs).

One chat completion of one token at temperature 1 with top_k=2 and the five most likely tokens' logprobs:

- processed: only the two tokens top-k kept have a finite logprob, and their probabilities sum to 1; vLLM reports
  every masked token at its floor, -9999.0. The sum is a float32 log_softmax over two values read back exactly,
  so it is 1 to a few 1e-7; 1e-4 is far above that and far below what any other mode gives.
- raw (or raw_logits): the third to fifth tokens keep finite logprobs, whatever the precision. This, not the sum,
  is what tells raw apart: a peaked model can put all but 1e-6 of its mass on two tokens.
- processed_logits: masked tokens at the floor, but the kept values are logits, which do not sum to 1.

Temperature 1 is sent, never left to the server: at temperature 0 vLLM takes its greedy path, which applies no
top-k, and processed logprobs would look raw. Every other sampling key is sent at its neutral value, so a
generation_config.json on the server cannot change what the probe sees.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from dataclasses import dataclass

from agentlightning_cli import local_http
from agentlightning_cli.proxy.sampling_keys import NEUTRAL

FLOOR = -9999.0  # vLLM's JSON value for a -inf logprob (chat_completion/serving.py: max(logprob, -9999.0))
TOLERANCE = 1e-4
TIMEOUT_S = 60.0


@dataclass
class LogprobsMode:
    mode: str
    """`processed` (processed_logprobs), `raw` (raw_logprobs or raw_logits), `logits` (processed_logits), or
    `unknown` (the server did not answer what the probe needs)."""
    detail: str


def probe_body(model: str) -> dict:
    return {**NEUTRAL, "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "temperature": 1.0, "top_k": 2, "logprobs": True, "top_logprobs": 5}


def classify(top_logprobs: list[float]) -> LogprobsMode:
    """The mode a server's five top logprobs under top_k=2 show (see the module docstring)."""
    if len(top_logprobs) < 3:
        return LogprobsMode("unknown", f"it answered {len(top_logprobs)} top logprobs where 5 were asked")
    kept = [lp for lp in top_logprobs if lp > FLOOR and math.isfinite(lp)]
    shown = ", ".join(f"{lp:.6g}" for lp in top_logprobs)
    if len(kept) == len(top_logprobs):
        return LogprobsMode("raw", f"under top_k=2 its 3rd to 5th most likely tokens kept finite logprobs ({shown}):"
                                   " they are reported before top-k, i.e. raw")
    mass = sum(math.exp(lp) for lp in kept)
    if abs(mass - 1.0) > TOLERANCE:
        return LogprobsMode("logits", f"the tokens top_k=2 kept have values whose probabilities sum to {mass:.6g},"
                                      f" not 1 ({shown}): they are logits, not logprobs")
    return LogprobsMode("processed", f"top_k=2 kept {len(kept)} tokens whose probabilities sum to {mass:.9f}")


def probe_logprobs_mode(root: str, model: str, api_key: str | None = None,
                        timeout_s: float = TIMEOUT_S) -> LogprobsMode:
    """Ask the server at `root` (no /v1) which logprobs it reports."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(f"{root}/v1/chat/completions", data=json.dumps(probe_body(model)).encode(),
                                     method="POST", headers=headers)
    try:
        with local_http.urlopen(request, timeout=timeout_s) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")[:200]
        return LogprobsMode("unknown", f"a chat completion with top_k and top_logprobs answered {exc.code}: {text}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return LogprobsMode("unknown", f"a chat completion with top_k and top_logprobs failed ({exc})")
    try:
        first = answer["choices"][0]["logprobs"]["content"][0]
        values = [float(entry["logprob"]) for entry in first["top_logprobs"]]
    except (KeyError, IndexError, TypeError, ValueError):
        return LogprobsMode("unknown", "its chat completion carried no top logprobs")
    return classify(values)
