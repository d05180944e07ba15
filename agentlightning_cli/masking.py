"""Values that look like secrets (API keys, tokens) and how alight shows them: masked.

A recipe is data that gets shared and committed, so a literal key in its `env` is almost always a mistake;
alight warns when it loads one and masks it wherever it prints or records the environment. Templates
(`{{ api_key }}`) are not literals: alight fills them per episode with a key it made itself.

Imports nothing of alight (bottom layer).
"""

from __future__ import annotations

import math
import re
from collections import Counter

# Well-known key shapes: OpenAI/Anthropic-style sk-..., GitHub, Slack, AWS access keys, Hugging Face, Google.
_KNOWN = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{20,}|AIza[0-9A-Za-z_\-]{30,})"
)
_TOKEN = re.compile(r"[A-Za-z0-9_\-+/=.]{32,}")
MIN_BITS_PER_CHAR = 3.5
"""Shannon entropy of a long random token (hex: ~4, base64: ~5-6); words, paths and repeated text stay lower."""


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_like_secret(value: str) -> bool:
    """A known key shape, or a long random-looking token (>= 32 chars, mixed letters and digits, high entropy).
    Template text ({{ ... }}) and paths or URLs are not secrets."""
    if "{{" in value or "{%" in value:
        return False
    if _KNOWN.search(value):
        return True
    for token in _TOKEN.findall(value):
        if "/" in token and not re.search(r"[+=]", token):
            continue  # a path or URL piece
        has_digit, has_alpha = any(c.isdigit() for c in token), any(c.isalpha() for c in token)
        if has_digit and has_alpha and _entropy(token) >= MIN_BITS_PER_CHAR:
            return True
    return False


def mask(value: str) -> str:
    """The first 4 characters, then a fixed marker: enough to tell two keys apart, nothing to use."""
    return f"{value[:4]}…(masked)"


def masked_env(env: dict[str, str]) -> dict[str, str]:
    """The same mapping with secret-looking values masked (for printing and records)."""
    return {name: mask(value) if looks_like_secret(value) else value for name, value in env.items()}
