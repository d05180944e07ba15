"""Context that fits the harness: each recipe states the context its harness needs (`context_tokens`: its first
prompt plus room to work); `alight run` and `alight serve` start vLLM with at least that `max_model_len`, and
refuse up front, naming the setting, when the model itself cannot take it.

Why: a harness whose first prompt is longer than the server's context gets a 400 on its very first call (Codex's
first prompt is ~4k tokens with a real tokenizer, ~14k with the tiny model's; Claude Code's ~65k).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from agentlightning_cli.errors import AlightError

if TYPE_CHECKING:
    from agentlightning_cli.config import Settings
    from agentlightning_cli.harness.recipe import Recipe


def model_context(model: Path | None) -> int | None:
    """The longest context a local HF model declares (config.json max_position_embeddings), if any."""
    if model is None:
        return None
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings")
    return value if isinstance(value, int) else None


def size_for_harness(settings: Settings, recipe: Recipe, model: Path | None) -> None:
    """Raise serve.max_model_len to the recipe's context_tokens; AlightError when the model cannot take it."""
    need = recipe.context_tokens
    if not need:
        return
    limit = model_context(model)
    if limit is not None and limit < need:
        raise AlightError(
            f"harness '{recipe.name}' needs a context of {need} tokens (its recipe's context_tokens), but model "
            f"{model} takes at most {limit} (config.json max_position_embeddings)",
            f"choose a model with a longer context, or another harness; if its first prompt fits, set "
            f"harness.{recipe.name}.context_tokens (alight.yaml) or ALIGHT_HARNESS__{_env_name(recipe.name)}"
            f"__CONTEXT_TOKENS to at most {limit}")
    if settings.serve.max_model_len < need:
        settings.serve.max_model_len = need


def _env_name(name: str) -> str:
    return name.upper()


def size_for_serve(settings: Settings, model: Path | None) -> list[str]:
    """`alight serve` prints settings for every shipped harness: size vLLM for the largest need the model can
    take; returns one warning per harness that still does not fit."""
    from agentlightning_cli.harness.recipe import available, load_path

    needs = {name: load_path(path).context_tokens or 0 for name, path in available().items()}
    limit = model_context(model)
    want = max(needs.values(), default=0)
    if limit is not None:
        want = min(want, limit)
    if settings.serve.max_model_len < want:
        settings.serve.max_model_len = want
    have = settings.serve.max_model_len
    return [f"{name} needs a context of {need} tokens; serve.max_model_len is {have}"
            + (f" and the model takes at most {limit}" if limit is not None and limit < need else "")
            for name, need in sorted(needs.items()) if need > have]


def tools_warning(recipe: Recipe, model: Path | None) -> str | None:
    """A warning when a tool-calling harness meets a model whose chat template never shows the tools."""
    if not recipe.tool_calls or model is None:
        return None
    from agentlightning_cli.serve.parsers import template_renders_tools

    if template_renders_tools(model) is False:
        return (f"model {model}'s chat template does not render tools, and harness '{recipe.name}' offers its tools "
                "through the API: the model never sees them. Use a model whose template renders tools, a text-mode "
                "harness (mini-swe-agent-text), or serve.chat_template PATH")
    return None
