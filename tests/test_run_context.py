"""Context that fits the harness: recipes state what they need, run and serve size vLLM for it, and a model
that cannot take it is refused up front, naming the setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.commands.context import model_context, size_for_harness, size_for_serve
from agentlightning_cli.config import Settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.harness.recipe import available, load, load_path


def _model(tmp_path: Path, positions: int) -> Path:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"max_position_embeddings": positions}))
    return tmp_path / "m"


def test_every_shipped_recipe_states_its_context():
    for name, path in available().items():
        assert load_path(path).context_tokens, name


def test_run_raises_max_model_len_to_what_the_harness_needs(tmp_path):
    settings = Settings()
    recipe = load("codex")
    size_for_harness(settings, recipe, _model(tmp_path, 131072))
    assert settings.serve.max_model_len == recipe.context_tokens > 4096


def test_a_model_too_short_for_the_harness_is_refused_naming_the_setting(tmp_path):
    with pytest.raises(AlightError) as err:
        size_for_harness(Settings(), load("claude-code"), _model(tmp_path, 32768))
    assert "context_tokens" in err.value.message and "max_position_embeddings" in err.value.message
    assert "32768" in err.value.message
    assert "harness.claude-code.context_tokens" in err.value.hint, err.value.hint


def test_a_harness_context_override_lets_a_shorter_model_run_it(tmp_path, monkeypatch):
    """harness.NAME.context_tokens replaces the recipe's need (Codex's first prompt fits SmolLM2's 8k)."""
    from agentlightning_cli.commands.run_checks import recipe_and_install
    from agentlightning_cli.config import load_settings

    monkeypatch.setenv("ALIGHT_HARNESS__CODEX__CONTEXT_TOKENS", "8192")
    monkeypatch.setattr("agentlightning_cli.harness.install.require_installed", lambda recipe, home, version: None)
    settings = load_settings()
    recipe, _ = recipe_and_install(settings, "codex")
    assert recipe.context_tokens == 8192 != load("codex").context_tokens
    size_for_harness(settings, recipe, _model(tmp_path, 8192))
    assert settings.serve.max_model_len == 8192


def test_serve_defaults_hold_every_harness_the_banner_prints_with_the_tiny_model(tmp_path):
    from agentlightning_cli.serve.tiny_model import ensure_tiny_model

    model = ensure_tiny_model(tmp_path / "home")
    settings = Settings()
    assert size_for_serve(settings, model) == []
    assert model_context(model) >= settings.serve.max_model_len >= max(
        load_path(p).context_tokens for p in available().values())


def test_serve_warns_for_harnesses_a_short_model_cannot_hold(tmp_path):
    settings = Settings()
    warnings = size_for_serve(settings, _model(tmp_path, 40000))
    assert settings.serve.max_model_len == 40000
    # One warning per shipped recipe that needs more than 40k (Claude Code's 96k, Qwen Code's 64k), naming it.
    over = sorted(p.stem for p in available().values() if (load_path(p).context_tokens or 0) > 40000)
    assert "claude-code" in over and "qwen-code" in over
    assert sorted(w.split(" needs a context of")[0] for w in warnings) == over, warnings
