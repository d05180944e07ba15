"""The tool-call and reasoning parsers vLLM starts with, chosen from a model's own files (serve/parsers.py): each
family's format, the settings that override, and every chosen name one vLLM registers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning_cli.serve.parsers import choose_parsers

LLAMA3 = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"
CHATML = "{{ '<|im_start|>' + message['role'] }}{% if tools %}<tool_call>{% endif %}"
QWEN3_CODER = "<|im_start|>{% for tool in tools %}<function={{ tool.name }}>{% endfor %}"
R1 = "{{ '<｜Assistant｜><think>\\n' }}"


def model(tmp_path: Path, model_type: str | None, template: str | None, as_jinja: bool = False) -> Path:
    folder = tmp_path / f"{model_type}-{abs(hash(template)) % 10_000}"
    folder.mkdir()
    if model_type is not None:
        (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    if template is not None and as_jinja:
        (folder / "chat_template.jinja").write_text(template)
    elif template is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return folder


@pytest.mark.parametrize("model_type,template,as_jinja,tool,reasoning", [
    ("qwen2", CHATML, False, "hermes", None),                  # Qwen2.5(-Coder)-Instruct
    ("llama", CHATML, False, "hermes", None),                  # SmolLM2: a Llama body with a ChatML template
    ("llama", LLAMA3, False, "llama3_json", None),             # Llama 3.x Instruct
    ("qwen3_moe", QWEN3_CODER, True, "qwen3_coder", None),     # Qwen3-Coder: XML calls, template in its own file
    ("qwen3", CHATML + "<think>", False, "hermes", "qwen3"),   # Qwen3: hermes calls, thinks
    ("qwen2", R1, False, "hermes", "deepseek_r1"),             # an R1 distill on a Qwen2 base
    ("mistral", "[INST]", False, "mistral", None),
    ("gpt_oss", "<|channel|>", False, "openai", "openai_gptoss"),
    ("glm4_moe", "<|observation|>", False, "glm45", "glm45"),
    ("deepseek_v3", "<｜tool▁calls▁begin｜>", False, "deepseek_v3", "deepseek_v3"),
    ("some_new_family", None, False, "hermes", None),
])
def test_the_family_decides_the_parsers(tmp_path, model_type, template, as_jinja, tool, reasoning):
    choice = choose_parsers(model(tmp_path, model_type, template, as_jinja))
    assert (choice.tool_call_parser, choice.reasoning_parser) == (tool, reasoning)
    assert tool in choice.why and (model_type in choice.why)


def test_settings_override_and_a_folder_without_files_gets_hermes(tmp_path):
    llama3 = model(tmp_path, "llama", LLAMA3)
    forced = choose_parsers(llama3, tool_call_parser="pythonic", reasoning_parser="none")
    assert (forced.tool_call_parser, forced.reasoning_parser) == ("pythonic", None)
    assert "serve.tool_call_parser" in forced.why
    assert choose_parsers(model(tmp_path, "qwen3", CHATML + "<think>"), reasoning_parser="none").reasoning_parser is None
    bare = choose_parsers(tmp_path / "nowhere")
    assert bare.tool_call_parser == "hermes" and "no config.json" in bare.why


def test_every_name_chosen_is_one_the_installed_vllm_registers():
    pytest.importorskip("vllm")
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    from agentlightning_cli.serve import parsers

    tools, reasoning = set(ToolParserManager.list_registered()), set(ReasoningParserManager.list_registered())
    chosen_tools = set(parsers._BY_TYPE.values()) | {"hermes", "llama3_json", "qwen3_coder"}
    chosen_reasoning = set(parsers._REASONING_BY_TYPE.values()) | {"qwen3", "deepseek_r1"}
    assert chosen_tools <= tools, chosen_tools - tools
    assert chosen_reasoning <= reasoning, chosen_reasoning - reasoning


def test_vllm_starts_with_the_chosen_parsers(tmp_path):
    from agentlightning_cli.config import ServeSettings
    from agentlightning_cli.serve.vllm import build_command

    def flags(folder: Path, **settings) -> tuple[str, str | None]:
        cmd = build_command("python", folder, 8000, ServeSettings(**settings))
        reasoning = cmd[cmd.index("--reasoning-parser") + 1] if "--reasoning-parser" in cmd else None
        return cmd[cmd.index("--tool-call-parser") + 1], reasoning

    assert flags(model(tmp_path, "llama", LLAMA3)) == ("llama3_json", None)
    assert flags(model(tmp_path, "qwen3", CHATML + "<think>")) == ("hermes", "qwen3")
    assert flags(model(tmp_path, "qwen2", CHATML), tool_call_parser="pythonic") == ("pythonic", None)


def test_a_tool_calling_harness_is_warned_of_a_template_that_drops_tools(tmp_path):
    from agentlightning_cli.commands.context import tools_warning
    from agentlightning_cli.harness.recipe import load
    from agentlightning_cli.serve.parsers import template_renders_tools
    from agentlightning_cli.serve.tiny_model import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny")  # its ChatML template writes the tools into the system turn
    assert template_renders_tools(tiny) is True
    dropping = tmp_path / "drops-tools"
    dropping.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        (dropping / name).write_bytes((tiny / name).read_bytes())
    (dropping / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}<|im_start|>assistant\\n")
    assert template_renders_tools(dropping) is False
    assert template_renders_tools(tmp_path / "nowhere") is None
    mini, text = load("mini-swe-agent"), load("mini-swe-agent-text")
    assert tools_warning(mini, tiny) is None and tools_warning(text, dropping) is None  # text mode needs no tools
    warning = tools_warning(mini, dropping)
    assert "does not render tools" in warning and "mini-swe-agent-text" in warning
