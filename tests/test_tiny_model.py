"""The embedded tiny model: a tokenizer vLLM's hermes parser can use, a tool-aware template, a loadable model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.serve.tiny_model import build_tiny_model, ensure_tiny_model, tiny_model_dir

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_tool_tokens_are_added_but_not_special(tiny: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    ids = tok.encode("<tool_call>\n{}\n</tool_call>", add_special_tokens=False)
    assert ids[0] == tok.convert_tokens_to_ids("<tool_call>") and ids[-1] == tok.convert_tokens_to_ids("</tool_call>")
    # skip_special_tokens must keep them: vLLM decodes with it, and the hermes parser looks for this text.
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>\n{}\n</tool_call>"
    added = {t["content"]: t for t in json.loads((tiny / "tokenizer.json").read_text())["added_tokens"]}
    assert added["<|im_end|>"]["special"] and added["<|im_start|>"]["special"] and added["<|endoftext|>"]["special"]
    assert not added["<tool_call>"]["special"] and not added["</tool_call>"]["special"]
    assert 3000 < len(tok) <= 4096


def test_template_renders_tools_calls_and_results(tiny: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]
    text = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nbe brief\n\n# Tools")
    assert json.dumps(TOOLS[0]) in text
    assert "<|im_start|>user\nlist files<|im_end|>" in text
    assert '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\na.py\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert plain == "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"


def test_model_loads_generates_and_is_deterministic(tiny: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    assert model.config.model_type == "qwen2" and model.config.num_hidden_layers == 4
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
    out = model.generate(torch.tensor([[1, 5, 6]]), max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 6)
    again = build_tiny_model(tmp_path / "again", seed=0)
    assert (again / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (tiny / "tokenizer.json").read_bytes()


def test_ensure_builds_once_into_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = ensure_tiny_model(home)
    assert first == tiny_model_dir(home) and (first / "config.json").is_file()
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model(home) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temp dirs left behind


def test_cli_builds_into_a_new_directory_only(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "m"
    done = subprocess.run([sys.executable, "-m", "agentlightning_cli", "model", "tiny", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out) and (out / "model.safetensors").is_file()
    again = subprocess.run([sys.executable, "-m", "agentlightning_cli", "model", "tiny", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "exists and is not empty" in again.stderr
