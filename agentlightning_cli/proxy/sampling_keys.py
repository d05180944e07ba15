"""What a chat request tells vLLM about how to sample, as the trainer needs to know it.

Two facts decide whether a call's stored tokens and logprobs can be trained on (train/sampling.py, train/rows.py):

- Every setting the trainer reproduces is sent explicitly (`explicit_neutral`): a key the client left out goes
  upstream at vLLM's neutral value. A server started with `--generation-config auto` (vLLM's own default) would
  otherwise fill it from the model's generation_config.json (e.g. top_k 20, repetition_penalty 1.05), and the
  call would have been sampled from a distribution the recorded settings do not describe.
- Constraints (`constraints`): forced tool calls, structured outputs / guided decoding, logit bias, a minimum
  length (EOS masked for the first N tokens), allowed or banned tokens, forced end-of-thinking, beam search or
  watermarking change the distribution vLLM sampled from and reported processed logprobs for, in ways the trainer
  does not reproduce. The proxy records their names with the call; the trainer leaves such calls out, counted.
"""

from __future__ import annotations

from typing import Any

# vLLM's neutral value for every setting that changes the distribution tokens are sampled from (what it uses for a
# key neither the request nor a generation_config.json sets). top_k 0: no top-k (vLLM 0.32 takes 0 and -1 alike).
NEUTRAL: dict[str, float] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                             "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}

# structured_outputs' fields that constrain (the others are options of a constraint), and the pre-0.11 guided_*
# fields an older vLLM behind --upstream still honours.
_STRUCTURED = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
_GUIDED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_json_object", "structural_tag")
# Request fields that, whenever set to something other than their off value, change what vLLM samples from.
_SET = ("logit_bias", "allowed_token_ids", "bad_words", "thinking_token_budget", "vllm_xargs", "logits_processors")
_TRUE = ("use_beam_search", "watermarking")


def explicit_neutral(body: dict[str, Any]) -> None:
    """Give every sampling key the trainer models its neutral value where `body` (sent upstream) has none."""
    for key, value in NEUTRAL.items():
        if body.get(key) is None:
            body[key] = value


def constraints(body: dict[str, Any]) -> list[str]:
    """The fields of a chat request (as sent upstream) that constrain vLLM's sampling, by name; [] for none."""
    found = []
    choice = body.get("tool_choice")
    if choice == "required" or isinstance(choice, dict):  # a call of some / of the named tool is forced
        found.append("tool_choice")
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        found.append("response_format")
    structured = body.get("structured_outputs")
    if isinstance(structured, dict) and any(structured.get(k) not in (None, False) for k in _STRUCTURED):
        found.append("structured_outputs")
    found += [k for k in _GUIDED if body.get(k) not in (None, False) and k not in found]
    found += [k for k in _SET if body.get(k) not in (None, [], {}, "")]
    found += [k for k in _TRUE if body.get(k) is True]
    min_tokens = body.get("min_tokens")
    if isinstance(min_tokens, (int, float)) and min_tokens > 0:  # vLLM masks EOS and stop ids until then
        found.append("min_tokens")
    return found
