"""Models by name wherever a model is taken (--model, serve.model, alight serve --model, alight train
--base-model): a Hugging Face Hub id resolves to its cached snapshot without the network, and one that is neither
a folder nor cached fails, offline, with one clear error. No test reaches the Hub: HF_HUB_OFFLINE is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning_cli.commands.train import base_model_for
from agentlightning_cli.config import load_settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve.policy import resolve_model


def cached_snapshot(cache: Path, repo_id: str, revision: str = "0" * 40) -> Path:
    """The Hub cache layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<rev>/...}."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "qwen2"}')
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture
def offline_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_a_cached_hub_id_resolves_to_its_snapshot_everywhere(tmp_path, offline_cache, monkeypatch):
    snapshot = cached_snapshot(offline_cache, "Org/Some-Model-7B")
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={}, project_file=tmp_path / "none.yaml")
    assert resolve_model(settings, "Org/Some-Model-7B") == snapshot  # --model
    settings.serve.model = "Org/Some-Model-7B"
    assert resolve_model(settings) == snapshot  # serve.model (alight serve and alight run read it)
    assert base_model_for(settings, None, Path("Org/Some-Model-7B")) == (snapshot, "--base-model")  # alight train
    (tmp_path / "Org" / "Some-Model-7B").mkdir(parents=True)  # a local folder of that name wins
    assert resolve_model(settings, "Org/Some-Model-7B") == (tmp_path / "Org" / "Some-Model-7B").resolve()


def test_an_uncached_hub_id_offline_fails_clearly(tmp_path, offline_cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={}, project_file=tmp_path / "none.yaml")
    with pytest.raises(AlightError, match="not in the Hub cache") as err:
        resolve_model(settings, "Org/Not-Here")
    assert "HF_HUB_OFFLINE" in err.value.hint and "local model directory" in err.value.hint
