"""The served model's chat template and tokenizer in alight's own process: what the proxy needs to render a
conversation (text turns, or tools, tool calls and results prepared as the server prepares them:
proxy/served_messages.py) to prompt ids, and to turn sampled ids back into text, without a round trip to vLLM (issue 34:
exact continuation's render and derender calls cost ~6-15 ms a call, most of the latency it adds at short prompts).

Only for servers alight started: it knows their model folder, the `--chat-template` it passed and the parsers it
chose (serve/parsers.py), and they run in the same environment, so vLLM renders with this transformers and this
tokenizer.json. `served_chat_render` answers None where the in-process result could differ from the server's
beyond what the proxy checks (proxy/local_token_io.py verifies every request shape against the server before
trusting it): a reasoning parser (the server splits reasoning by token state), a tool parser whose trigger text is
not known here, a tokenizer whose decoding depends on the preceding ids (Metaspace: the leading space), or a
tokenizer or template that does not load.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

log = logging.getLogger(__name__)

# Tool-call parser -> the text whose presence makes it act on an answer (vLLM runs the tool parser on every answer
# when auto tool choice is on, tools offered or not). An answer without it is the decoded text unchanged.
PARSER_TRIGGERS = {"hermes": ("<tool_call>",)}


class ServedChatRender:
    """render_ids / decode with the served model's tokenizer and template (the proxy's LocalTokens)."""

    def __init__(self, model_dir: Path, chat_template: Path | None, parser_triggers: tuple[str, ...]):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        # vLLM reads --chat-template's file, else the model's own template (tokenizer_config / chat_template.jinja).
        self.template = chat_template.read_text(encoding="utf-8") if chat_template else self.tokenizer.chat_template
        if not isinstance(self.template, str) or not self.template:
            raise ValueError(f"no chat template for {model_dir}")
        self.parser_triggers = parser_triggers
        self._backend = self.tokenizer.backend_tokenizer  # the Rust tokenizer: encode without Python wrapping
        self._segments = SegmentEncoder.of(model_dir / "tokenizer.json", self._backend)

    def render_ids(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None = None
                   ) -> list[int]:
        """The prompt ids chat completions would use: the template rendered as text, encoded without special
        tokens added (vLLM's chat path adds none: the template writes them). `messages` and `tools` as the server
        hands them to the template (proxy/served_messages.py)."""
        text = self.tokenizer.apply_chat_template(messages, tools=tools, chat_template=self.template, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)
        if self._segments is not None:
            return self._segments.encode(text)
        return self._backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """The text of sampled ids, special tokens kept (vLLM keeps them whenever a parser is configured)."""
        return self._backend.decode(ids, skip_special_tokens=False)


class SegmentEncoder:
    """encode(text) as the tokenizer gives it, with each text between special tokens encoded once per conversation.

    A tokenizer cuts its input at added tokens first and encodes each piece between them on its own; with no
    normalizer and added tokens that neither strip nor match single words, encode(text) is the pieces' ids joined
    by the added tokens' ids. A conversation's turns are such pieces (ChatML and the like end every turn with a
    special token), so a conversation's next render encodes only its new turns (~0.15 ms at 150 prompt tokens,
    milliseconds at thousands). The proxy still compares renders with the server's (proxy/local_token_io.py)."""

    LIMIT = 20_000  # pieces kept; the cache starts over past it

    def __init__(self, added: dict[str, int], backend) -> None:
        self._ids = added
        # Longest first: at one position the longest added token wins, as the tokenizer's leftmost-longest match.
        self._split = re.compile("|".join(re.escape(t) for t in sorted(added, key=len, reverse=True)))
        self._backend = backend
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def of(cls, tokenizer_json: Path, backend) -> "SegmentEncoder | None":
        """None where pieces are not independent (a normalizer, added tokens that strip or match single words)."""
        spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        added = spec.get("added_tokens") or []
        if spec.get("normalizer") is not None or not added or any(
                t.get("lstrip") or t.get("rstrip") or t.get("single_word") or t.get("normalized") for t in added):
            return None
        return cls({t["content"]: t["id"] for t in added}, backend)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        start = 0
        for match in self._split.finditer(text):
            if match.start() > start:
                ids += self._piece(text[start:match.start()])
            ids.append(self._ids[match.group()])
            start = match.end()
        if start < len(text):
            ids += self._piece(text[start:])
        return ids

    def _piece(self, piece: str) -> list[int]:
        found = self._cache.get(piece)
        if found is None:
            if len(self._cache) >= self.LIMIT:
                self._cache.clear()
            found = self._cache[piece] = self._backend.encode(piece, add_special_tokens=False).ids
        return found


def _byte_level(model_dir: Path) -> bool:
    """Whether decoding is context-free: byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM) decodes a suffix of ids to
    the suffix of the text, so no prompt ids are needed to decode a completion."""
    try:
        decoder = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8")).get("decoder") or {}
    except (OSError, ValueError):
        return False
    return decoder.get("type") == "ByteLevel"


def served_chat_render(model_dir: Path | str | None, chat_template: Path | None, tool_call_parser: str | None,
                       reasoning_parser: str | None) -> ServedChatRender | None:
    """The in-process renderer for a server alight started with these parsers, or None (the proxy then asks the
    server for every render and derender), with the reason logged."""
    if model_dir is None or not Path(model_dir).is_dir():
        return None
    folder = Path(model_dir)
    why = None
    if reasoning_parser:
        why = f"reasoning parser {reasoning_parser}"
    elif tool_call_parser not in PARSER_TRIGGERS:
        why = f"tool-call parser {tool_call_parser} (its trigger text is not known here)"
    elif not _byte_level(folder):
        why = "a tokenizer that is not byte-level BPE"
    if why is None:
        try:
            return ServedChatRender(folder, chat_template, PARSER_TRIGGERS[tool_call_parser])  # type: ignore[index]
        except Exception as exc:  # noqa: BLE001 - no tokenizer, no template: the server renders, as before
            why = f"the tokenizer or template did not load here ({exc})"
    log.info("exact continuation renders through the server: %s", why)
    return None
