"""Which vLLM tool-call parser (and reasoning parser) a model needs, read from its own files.

vLLM turns a model's tool-call text into OpenAI `tool_calls` with a parser named at start-up; the right one depends
on the model family's format (Qwen2.5 and most ChatML models: `<tool_call>{json}</tool_call>` = hermes; Llama 3:
bare JSON = llama3_json; Mistral: [TOOL_CALLS]; Qwen3-Coder: XML `<function=...>`; gpt-oss: harmony). A wrong
parser leaves every tool call in the text, and a tool-calling harness sees a model that never acts. `auto` (the
`serve.tool_call_parser` default) picks by the model's config.json `model_type` and, where one type covers
several formats, by what its chat template writes; any other value is passed to vLLM as it is.

A reasoning parser splits `<think>` text from the answer for models that think; `serve.reasoning_parser: auto`
picks one for the families that need it and none otherwise. Neither changes what alight records: token ids and
logprobs come from vLLM as sampled, whatever the parser does to the text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# model_type -> vLLM's tool-call parser (names as vllm/tool_parsers/__init__.py registers them).
_BY_TYPE = {
    "gpt_oss": "openai",
    "mistral": "mistral", "mixtral": "mistral", "mistral3": "mistral",
    "llama4": "llama4_pythonic",
    "deepseek_v3": "deepseek_v3",
    "glm4_moe": "glm45",
    "granite": "granite", "granitemoe": "granite",
    "internlm2": "internlm",
    "jamba": "jamba",
    "kimi_k2": "kimi_k2",
    "minimax_m2": "minimax_m2",
    "seed_oss": "seed_oss",
    "olmo3": "olmo3",
}
# model_type -> reasoning parser, for families whose models think by default.
_REASONING_BY_TYPE = {"gpt_oss": "openai_gptoss", "glm4_moe": "glm45", "deepseek_v3": "deepseek_v3",
                      "kimi_k2": "kimi_k2", "minimax_m2": "minimax_m2", "seed_oss": "seed_oss"}


@dataclass(frozen=True)
class ParserChoice:
    tool_call_parser: str
    reasoning_parser: str | None
    why: str
    """One line for the log and the run's snapshot: what was read and what it gave."""


def model_facts(model_dir: Path | None) -> tuple[str | None, str]:
    """(config.json model_type, the chat template's text) of a local model folder; (None, "") when absent."""
    if model_dir is None or not Path(model_dir).is_dir():
        return None, ""
    folder = Path(model_dir)
    model_type = None
    config = folder / "config.json"
    if config.is_file():
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    template = ""
    if (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    elif (folder / "tokenizer_config.json").is_file():
        found = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
        if isinstance(found, list):  # named templates: the default one
            found = next((t.get("template") for t in found if t.get("name") == "default"), None)
        template = found if isinstance(found, str) else ""
    return model_type, template


def choose_parsers(model_dir: Path | None, tool_call_parser: str = "auto",
                   reasoning_parser: str = "auto") -> ParserChoice:
    """The parsers vLLM starts with for this model; a setting other than `auto` is kept as given ("none" turns the
    reasoning parser off)."""
    model_type, template = model_facts(model_dir)
    tool, why = (tool_call_parser, "serve.tool_call_parser") if tool_call_parser != "auto" else \
        _tool_parser(model_type, template)
    if reasoning_parser == "auto":
        reasoning = _REASONING_BY_TYPE.get(model_type or "")
        if reasoning is None and "<think>" in template and model_type in ("qwen3", "qwen3_moe"):
            reasoning = "qwen3"
        elif reasoning is None and "<think>" in template and model_type in ("qwen2", "llama"):
            reasoning = "deepseek_r1"  # the R1 distills: a thinking template on a Qwen2 or Llama base
    else:
        reasoning = None if reasoning_parser == "none" else reasoning_parser
    return ParserChoice(tool, reasoning, f"tool-call parser {tool} ({why})"
                        + (f", reasoning parser {reasoning}" if reasoning else ""))


def _tool_parser(model_type: str | None, template: str) -> tuple[str, str]:
    if model_type is None:
        return "hermes", "no config.json model_type: hermes, the ChatML <tool_call> format"
    if model_type in ("qwen3", "qwen3_moe") and "<function=" in template:
        return "qwen3_coder", f"model_type {model_type} with Qwen3-Coder's XML tool calls in its chat template"
    if model_type == "llama" and ("<|start_header_id|>" in template or "<|python_tag|>" in template):
        return "llama3_json", "model_type llama with Llama 3's chat template"
    if model_type in _BY_TYPE:
        return _BY_TYPE[model_type], f"model_type {model_type}"
    return "hermes", f"model_type {model_type}: hermes, the ChatML <tool_call> format (Qwen2.5, Qwen3, SmolLM, ...)"


PROBE_TOOL = "alight_probe_tool"


def template_renders_tools(model_dir: Path) -> bool | None:
    """Whether the model's chat template writes a request's tools into the prompt (a tool named PROBE_TOOL shows
    up in the rendered text); None when the tokenizer cannot be loaded here. A template that drops them leaves a
    tool-calling harness talking to a model that never learns its tools exist."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        tool = {"type": "function", "function": {"name": PROBE_TOOL, "description": "probe",
                                                 "parameters": {"type": "object", "properties": {}}}}
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[tool], tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - no tokenizer files, no template, a template that fails on tools: unknown
        return None
    return PROBE_TOOL in str(text)
