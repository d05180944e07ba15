"""train.lora_rank holds from round 0: the zero adapter vLLM serves first is made at the training rank (with the
trainer's alpha and target modules), vLLM's --max-lora-rank is raised to serve it, and a resumed run's round-0
adapter keeps its rank. vLLM itself is not started here (the vLLM tests serve real adapters); its command is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.config import load_settings
from agentlightning_cli.errors import AlightError
from agentlightning_cli.serve.adapters import adapter_rank, rank_limit_for, training_rank
from agentlightning_cli.serve.policy import PolicyServer
from agentlightning_cli.serve.tiny_model import build_tiny_model
from agentlightning_cli.serve.vllm import build_command


class Stop(Exception):
    """Raised where vLLM would start: everything before it (the adapter, the rank limit) has happened."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def started_until_vllm(settings, run_dir: Path, model: Path, monkeypatch) -> PolicyServer:
    policy = PolicyServer(settings, run_dir, model)

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(policy.vllm, "start", stop)
    with pytest.raises(Stop):
        policy.start()
    return policy


def test_the_zero_adapter_is_made_at_the_training_rank_and_vllm_serves_it(tmp_path, tiny, monkeypatch):
    settings = load_settings(flags={"train": {"lora_rank": 16, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}},
                             environ={}, project_file=tmp_path / "none.yaml")
    assert settings.serve.max_lora_rank == 8  # the default, too small for rank 16
    policy = started_until_vllm(settings, tmp_path / "run", tiny, monkeypatch)
    r0 = policy.adapter_dir(0)
    config = json.loads((r0 / "adapter_config.json").read_text())
    assert config["r"] == 16 and config["lora_alpha"] == 8 and sorted(config["target_modules"]) == ["q_proj", "v_proj"]
    assert settings.serve.max_lora_rank == 16
    command = build_command("python", tiny, 8000, settings.serve)
    assert command[command.index("--max-lora-rank") + 1] == "16"

    # A resumed run finds its round-0 adapter and serves it at its own rank, whatever the settings say now.
    again = load_settings(environ={}, project_file=tmp_path / "none.yaml")
    assert training_rank(tiny, again) == 8
    policy = started_until_vllm(again, tmp_path / "run", tiny, monkeypatch)
    assert adapter_rank(policy.adapter_dir(0)) == 16 and again.serve.max_lora_rank == 16


def test_a_real_models_default_rank_is_32_the_tiny_models_8(tmp_path, tiny):
    settings = load_settings(environ={}, project_file=tmp_path / "none.yaml")
    real = tmp_path / "some-model"
    real.mkdir()
    assert training_rank(real, settings) == 32 and training_rank(tiny, settings) == 8
    assert [rank_limit_for(r) for r in (1, 8, 9, 32, 33, 300, 512)] == [8, 8, 16, 32, 64, 320, 512]
    with pytest.raises(AlightError, match="train.lora_rank"):
        rank_limit_for(1024)
