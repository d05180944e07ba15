"""Helper calls: the calls a harness makes beside its agent's turns, under model names of their own.

Gemini CLI (and Qwen Code, its fork) checks who speaks next, detects loops, compresses the chat and corrects
edits with fast models (`gemini-3-flash-preview`, ...), while the agent's turns ask for the recipe's `model`.
Under `alight run` the proxy maps every name to the policy, so both are sampled from it; but a helper's reply is
not the agent's action and its reward says nothing about it, so the trainer leaves helper calls out unless
`train.helper_calls: train`.

The label is computed where it is used (trainer, inspect), from two recorded facts: the name the client asked
for (the call's `client_model`: for Gemini the model in the URL path) and the name the harness's own calls use
(`harness_model` in the run's snapshot, the recipe's `model`). Nothing is stored per call: the rule can change
without a migration. A run with no recorded harness model (ad-hoc `alight serve`/`alight proxy` traffic, runs
recorded before `harness_model` was) has no helper calls.
"""

from __future__ import annotations

from typing import Any


def harness_model(run_config: dict[str, Any] | None) -> str | None:
    """The model name the run's harness asks for (commands/run.py records it), None when not recorded."""
    value = (run_config or {}).get("harness_model")
    return value if isinstance(value, str) and value else None


def is_helper(call: Any, harness: str | None) -> bool:
    """A call that asked for another model name than the harness's own (`harness`); False when either is unknown."""
    asked = getattr(call, "client_model", None)
    return harness is not None and asked is not None and asked != harness
