"""How exact continuation treated one call (issue 34; store m009 `calls.continuation`), for `alight inspect`'s call
view and its text and JSON exports.

The proxy records its decision: `continue` (the chain's ids + its sampled ids + the new turns), `fork` with its
reason (a retry, a dropped reply, an edit, a parallel request; the parent's sampled tokens masked), `start` (a new
conversation) or `fallback` with its reason (the plain render sent); the normalisations that fired when comparing
the request with the chain; how many turns after the system text it shares; where the continued prompt differs
from the plain render of the same messages (first token, the differing turn segments as [start, end) token ranges
of each, the render's length); the end-of-turn id added after the previous reply where it was cut without one
(`closed_reply`: max_tokens, a stop string); the sampling params sent to generate; and what alight did in its own
process instead of asking the server (`local`: render, history, derender; proxy/local_token_io.py). A call rendered from its
messages (render mode, or relayed: several choices, prompt logprobs) has none: `null` in JSON.
"""

from __future__ import annotations

import json
from typing import Any

from agentlightning_cli.store import Call

_KEYS = ("mode", "kind", "reason", "chain", "parent", "normalisations", "shared_messages", "first_difference",
         "differs", "plain_len", "sampling_params", "sampled_spans", "masked_spans", "mismatch", "closed_reply")


def continuation_json(call: Call, raw: bool = False) -> dict[str, Any] | None:
    """The call's decision in the `show CALL --json` shape; `raw` adds each differing segment's prompt ids."""
    stored = call.continuation
    if not isinstance(stored, dict):
        return None
    out = {k: stored.get(k) for k in _KEYS}
    out["normalisations"] = dict(out["normalisations"] or {})
    out["shared_turns"] = out.pop("shared_messages")
    out["differs"] = [dict(d) for d in out["differs"] or []]
    out["closed_reply"] = list(out["closed_reply"] or [])  # absent in calls recorded before it existed
    if "local" in stored:  # recorded since in-process render / derender; absent before
        out["local"] = list(stored["local"] or [])
    if raw and call.prompt_token_ids:
        for d in out["differs"]:
            start, end = d["prompt"]
            d["prompt_ids"] = list(call.prompt_token_ids[start:end])
    return out


def continuation_lines(cont: dict[str, Any] | None) -> list[str]:
    """Text lines for a call's continuation (the call view and `show CALL`)."""
    if cont is None:
        return ["continuation: none (rendered from the messages: render mode, or a relayed call)"]
    why = f" ({cont['reason']})" if cont.get("reason") else ""
    chain = f"  chain {cont['chain']}" if cont.get("chain") else ""
    parent = f"  parent {cont['parent']}" if cont.get("parent") else ""
    lines = [f"continuation: {cont.get('mode')} · {cont.get('kind')}{why}{chain}{parent}"
             f"  shared turns {cont.get('shared_turns')}"]
    fired = cont.get("normalisations") or {}
    lines.append("  normalisations: " + (", ".join(f"{k}: {v}" for k, v in fired.items()) or "none fired"))
    if cont.get("first_difference") is None:
        lines.append(f"  prompt = the plain render ({cont.get('plain_len')} tokens)")
    else:
        segments = ", ".join(f"turn {d['segment']} at {d['prompt'][0]}..{d['prompt'][1]} (render"
                             f" {d['plain'][0]}..{d['plain'][1]})" for d in cont.get("differs") or [])
        lines.append(f"  differs from the plain render ({cont.get('plain_len')} tokens) from token"
                     f" {cont['first_difference']}: {segments or 'after the shared turns'}")
    if cont.get("closed_reply"):
        lines.append(f"  closed the previous reply (cut without an end-of-turn token) with {cont['closed_reply']}:"
                     " context, not trained")
    if cont.get("masked_spans"):
        lines.append(f"  masked (the parent's sampled tokens): {cont['masked_spans']}")
    if cont.get("sampling_params") is not None:
        lines.append(f"  sent to generate: {json.dumps(cont['sampling_params'], sort_keys=True)}")
    if "local" in cont:  # recorded since in-process render / derender (proxy/local_token_io.py)
        done = cont["local"] or []
        lines.append("  in alight's process: " + (", ".join(done) if done else "nothing (the server rendered and "
                                                                                "derendered)"))
    return lines
