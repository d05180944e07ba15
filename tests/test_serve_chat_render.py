"""Which servers get in-process render / derender (serve/chat_render.py, commands/lifecycle.local_chat_render):
only a server alight started, whose template, tokenizer and parsers it chose, and only where the local result can
be the server's. Whether it then *is* the server's is tests/test_continuation_proxy.py's work, on a real vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentlightning_cli.commands.lifecycle import local_chat_render
from agentlightning_cli.config import ProxySettings, ServeSettings
from agentlightning_cli.serve.chat_render import ServedChatRender, served_chat_render
from agentlightning_cli.serve.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("chat-render") / "tiny")


def test_only_a_byte_level_model_without_a_reasoning_parser_and_with_a_known_tool_parser(tiny, tmp_path):
    local = served_chat_render(tiny, None, "hermes", None)
    assert isinstance(local, ServedChatRender) and local.parser_triggers == ("<tool_call>",)
    ids = local.render_ids([{"role": "user", "content": "hi"}], True)
    assert ids and local.decode(ids).endswith("<|im_start|>assistant\n")  # the template's generation prompt
    assert served_chat_render(tiny, None, "hermes", "qwen3") is None  # the server splits reasoning by token state
    assert served_chat_render(tiny, None, "llama3_json", None) is None  # its trigger text is not known here
    assert served_chat_render(tmp_path / "nowhere", None, "hermes", None) is None
    metaspace = tmp_path / "metaspace"  # decoding depends on the ids before (the leading space)
    metaspace.mkdir()
    for f in tiny.iterdir():
        (metaspace / f.name).write_bytes(f.read_bytes())
    spec = json.loads((tiny / "tokenizer.json").read_text())
    spec["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    (metaspace / "tokenizer.json").write_text(json.dumps(spec))
    assert served_chat_render(metaspace, None, "hermes", None) is None
    template = tmp_path / "t.jinja"  # --chat-template's file, read as vLLM reads it
    template.write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    given = served_chat_render(tiny, template, "hermes", None)
    assert given.decode(given.render_ids([{"role": "user", "content": "x"}], True)) == "[x]"


def test_encoding_between_special_tokens_once_gives_the_tokenizers_ids(tiny):
    """SegmentEncoder (each text between special tokens encoded once, then reused) against the tokenizer itself on
    text full of special tokens, their fragments, non-ASCII and whitespace."""
    import random

    local = served_chat_render(tiny, None, "hermes", None)
    assert local._segments is not None
    rng = random.Random(0)
    alphabet = [*"ab <|>_\n\t imendstar日🙂é", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|", "im_end|>"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    for text in [*texts, *texts[:50]]:  # the second time from the cache
        assert local._segments.encode(text) == local._backend.encode(text, add_special_tokens=False).ids, text


def policy(model: Path, extra_args: list[str] | None = None, starts: bool = True):
    serve = ServeSettings(extra_args=extra_args or [])
    return SimpleNamespace(starts_servers=starts, model=model, settings=SimpleNamespace(serve=serve),
                           vllm=SimpleNamespace(chat_template=None))


def test_the_proxy_gets_it_for_servers_alight_started_and_chose_the_template_of(tiny):
    on = ProxySettings(continuation="exact")
    assert isinstance(local_chat_render(on, policy(tiny)), ServedChatRender)
    assert local_chat_render(ProxySettings(continuation="exact", local_render=False), policy(tiny)) is None
    assert local_chat_render(on, policy(tiny, starts=False)) is None  # a server alight did not start
    assert local_chat_render(on, None) is None
    for args in (["--chat-template", "/x.jinja"], ["--tool-call-parser=llama3_json"], ["--tokenizer", "/t"]):
        assert local_chat_render(on, policy(tiny, args)) is None, args  # the server renders with what it was given


def test_only_with_in_process_tokens_does_derender_get_the_prompts_tail(tiny):
    """The proxy's derender calls carry the prompt's last ids only where it has the served tokens (a server alight
    started without a reasoning parser); any other upstream gets every prompt id, as a reasoning parser needs."""
    from agentlightning_cli.proxy.continued import ExactContinuation
    from agentlightning_cli.proxy.token_io import DETOKENISER_WINDOW

    on = ProxySettings(continuation="exact")
    started = ExactContinuation(None, (), local_chat_render(on, policy(tiny)))  # type: ignore[arg-type]
    other = ExactContinuation(None, (), local_chat_render(on, policy(tiny, starts=False)))  # type: ignore[arg-type]
    assert started.io("e").prompt_tail == DETOKENISER_WINDOW and other.io("e").prompt_tail is None
    ids = list(range(1000))
    assert started.io("e").derender_prompt(ids) == ids[-DETOKENISER_WINDOW:]
    assert other.io("e").derender_prompt(ids) is ids
    assert started.io("e").derender_prompt(ids[:5]) == ids[:5]
