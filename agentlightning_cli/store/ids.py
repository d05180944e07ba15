"""Sortable unique ids: creation time first (so ORDER BY id is creation order), then randomness."""

from __future__ import annotations

import os
import time

# Crockford base32: no I, L, O, U, so ids read unambiguously when a user copies one from a terminal.
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _base32(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """`prefix-` + 10 chars of milliseconds + 16 chars (80 bits) of randomness, like a ULID."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}-{_base32(millis, 10)}{_base32(rand, 16)}"
