"""The text of a call's sampled tokens, where the store has it: vLLM reports each sampled token's string beside its
logprob (`choices[0].logprobs.content[i].token`), and the proxy keeps vLLM's whole answer for non-streamed calls
(`upstream_response`). A streamed call keeps only ids unless the client itself asked for logprobs (then they are in
the stream it saw). Where the text was not stored, views show ids; on request (`d` in the call view) they are
decoded with the run's own tokenizer when its tokenizer.json is on this machine, loaded then and only then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentlightning_cli.inspect.conversation import _events
from agentlightning_cli.store import Call


def _tokens(choice: dict[str, Any]) -> list[str]:
    content = (choice.get("logprobs") or {}).get("content") or []
    return [entry.get("token", "") for entry in content if isinstance(entry, dict)]


def completion_token_texts(call: Call) -> list[str] | None:
    """One string per completion token id, or None when the stored bodies do not carry them (or do not line up
    with the ids: then they would mislabel tokens)."""
    ids = call.completion_token_ids or []
    if not ids:
        return None
    texts: list[str] = []
    try:
        if call.upstream_response:
            data = json.loads(call.upstream_response)
            choice = next((c for c in data.get("choices") or [] if c.get("index", 0) == 0), None)
            texts = _tokens(choice) if choice else []
        elif call.stream and call.protocol == "openai-chat" and call.response:
            for _, chunk in _events(call.response):
                for choice in chunk.get("choices") or []:
                    if choice.get("index", 0) == 0:
                        texts += _tokens(choice)
    except (ValueError, AttributeError, TypeError):
        return None
    return texts if len(texts) == len(ids) else None


def run_tokenizer_file(run_config: dict[str, Any] | None) -> Path | None:
    """The tokenizer.json of the model the run served, when it is on this machine: `serve.model` of the run's
    settings snapshot (run_snapshot.py), else the embedded tiny model under the run's ALIGHT_HOME. None when
    neither is here: nothing is downloaded."""
    from agentlightning_cli.run_snapshot import recorded_home, served_model

    served, home = served_model(run_config), recorded_home(run_config)
    if served:
        path = Path(served) / "tokenizer.json"
        return path if path.is_file() else None
    if home:
        from agentlightning_cli.serve.tiny_model import tiny_model_dir

        path = tiny_model_dir(Path(home)) / "tokenizer.json"
        return path if path.is_file() else None
    return None


class LazyDecoder:
    """Token ids -> text with the run's own tokenizer, loaded on first use only (the `tokenizers` library reads
    tokenizer.json in a fraction of a second; transformers is not imported). Each id is decoded alone, special
    tokens kept: a byte-level piece that is only part of a character shows as U+FFFD."""

    _loaded: dict[Path, LazyDecoder] = {}  # one per tokenizer file for the process: loaded once

    def __init__(self, path: Path):
        self.path = path
        self._tokenizer: Any = None

    @classmethod
    def for_file(cls, path: Path) -> LazyDecoder:
        return cls._loaded.setdefault(path, cls(path))

    def texts(self, ids: list[int]) -> list[str]:
        if self._tokenizer is None:
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise RuntimeError("decoding needs the `tokenizers` package (the `train` extra installs it)") from exc
            self._tokenizer = Tokenizer.from_file(str(self.path))
        tok = self._tokenizer
        return [tok.decode([i], skip_special_tokens=False) for i in ids]


def end_of_turn_ids(tokenizer_file: Path) -> frozenset[int]:
    """The ids the trainer's splice rule cuts after (train/round_step.row_context): the model's eos token and the
    usual end-of-turn tokens its vocabulary has, read from tokenizer.json (+ tokenizer_config.json for the eos
    token) without loading a tokenizer."""
    from agentlightning_cli.train.rows import END_OF_TURN_TOKENS

    data = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    known = {t["content"]: t["id"] for t in data.get("added_tokens") or [] if "content" in t and "id" in t}
    vocab = (data.get("model") or {}).get("vocab")
    names = list(END_OF_TURN_TOKENS)
    config = tokenizer_file.with_name("tokenizer_config.json")
    if config.is_file():
        eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        if isinstance(eos, str):
            names.append(eos)
    ids = {known.get(name, vocab.get(name) if isinstance(vocab, dict) else None) for name in names}
    return frozenset(i for i in ids if isinstance(i, int))
