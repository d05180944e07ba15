"""The embedded default model: a tiny Qwen2-style causal LM with random weights and a locally trained tokenizer.

It exists so `alight run` / `alight serve` work offline with nothing downloaded: real vLLM serves it, the
proxy records real token ids, the trainer trains a real LoRA on it. Its outputs are noise, but with a
forcing `tool_choice` vLLM's structured outputs still make it emit valid tool calls.
Built in seconds, deterministic for a given seed, and cached once per version under ALIGHT_HOME/models/.
"""

from __future__ import annotations

import random
from importlib import resources
from pathlib import Path

from agentlightning_cli.errors import AlightError

# Bump when the output changes (tokenizer, template, config), so cached copies are rebuilt under a new name.
TINY_MODEL_VERSION = "2"
VOCAB_TARGET = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Not special: vLLM strips special tokens from text, and the hermes tool parser must see these.
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]

_WORDS = (
    "the a an of to in is it that for on with as by at from this be are was or not and but if then else "
    "file files line lines code function class def return import test tests error errors fix bug run python "
    "bash ls cat grep sed echo cd git diff commit patch repo issue task user assistant system tool tools call "
    "result output input read write edit open path name value type string number object array list dict key "
    "true false null none self args kwargs print raise except try while for yield async await lambda pass "
    "json yaml http request response model token tokens reward episode round policy adapter train server "
    "hello world please can you I we will now let me check the first next done found add remove update make"
).split()
_PUNCT = list(".,:;!?()[]{}<>=+-*/_'\"#@$%&|\\`~^") + ["\n", "\n\n", "    ", "\t"]


def _corpus(seed: int) -> list[str]:
    """A deterministic mix of prose, code-ish text and tool-call JSON: enough for a 4k-token byte-level BPE."""
    rng = random.Random(seed)
    docs = []
    for _ in range(6000):
        n = rng.randint(5, 40)
        words = [rng.choice(_WORDS) if rng.random() < 0.8 else rng.choice(_PUNCT) for _ in range(n)]
        docs.append(" ".join(words))
        name, arg = rng.choice(_WORDS), rng.choice(_WORDS)
        docs.append(f'<tool_call>\n{{"name": "{name}", "arguments": {{"{arg}": "{rng.choice(_WORDS)}"}}}}\n</tool_call>')
        docs.append(f"def {name}_{arg}({arg}):\n    return {arg} + {rng.randint(0, 99999)}\n")
        # Compound identifiers give BPE enough distinct words to fill its merges.
        a, b, c = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_WORDS)
        docs.append(f"{a}{b.capitalize()} = {a}_{b}_{c}.{c}{a}({rng.randint(0, 9999)})")
    return docs


def _train_tokenizer(seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET - len(TOOL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    return tok


def chat_template() -> str:
    return resources.files("agentlightning_cli.serve").joinpath("chat_template.jinja").read_text(encoding="utf-8")


def build_tiny_model(out: Path, seed: int = 0) -> Path:
    """Write tokenizer + config + random bf16 weights to `out` (created; must not exist or be empty)."""
    try:
        import torch
        from tokenizers import AddedToken
        from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    except ImportError as exc:
        raise AlightError(f"building the tiny model needs torch and transformers ({exc})",
                          "pip install 'agentlightning-cli[train]'") from exc

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    raw = _train_tokenizer(seed)
    raw.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        model_max_length=32768,
    )
    tokenizer.chat_template = chat_template()
    tokenizer.save_pretrained(out)

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64,  # padded like real checkpoints; extra rows never sampled much
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=131072,  # room for every harness's context (v2)
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        bos_token_id=eot,
        eos_token_id=im_end,
        pad_token_id=eot,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot, bos_token_id=eot)
    model.save_pretrained(out, safe_serialization=True)
    return out


def tiny_model_dir(home: Path) -> Path:
    return Path(home) / "models" / f"tiny-{TINY_MODEL_VERSION}"


def ensure_tiny_model(home: Path) -> Path:
    """The cached tiny model, built on first use (serve/model_cache.py: never half-written)."""
    from agentlightning_cli.serve.model_cache import build_once

    return build_once(tiny_model_dir(home), build_tiny_model)
