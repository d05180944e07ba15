"""Sortable unique ids: creation time first (so ORDER BY id is creation order), then randomness."""

from __future__ import annotations

import os
import time

# Crockford base32: no I, L, O, U, so ids read unambiguously when a user copies one from a terminal.
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Every pair of digits (10 bits): half as many steps as a digit-by-digit divmod loop, and no bytes round trip
# (base64.b32encode is pure Python on 3.11). Ids are made on every stored call.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_last: tuple[int, str] = (-1, "")  # (millis, its digits); one tuple so threads never see half an update


def _base32(value: int, width: int) -> str:
    """`value` (below 32**width) as `width` base-32 digits, most significant first."""
    parts = []
    for _ in range(width >> 1):
        parts.append(_PAIRS[value & 0x3FF])
        value >>= 10
    if width & 1:
        parts.append(_ALPHABET[value & 0x1F])
    return "".join(reversed(parts))


def new_id(prefix: str) -> str:
    """`prefix-` + 10 chars of milliseconds + 16 chars (80 bits) of randomness, like a ULID."""
    global _last
    millis = time.time_ns() // 1_000_000
    last = _last
    if millis != last[0]:  # many ids share a millisecond under load: encode it once
        last = _last = (millis, _base32(millis, 10))
    return f"{prefix}-{last[1]}{_base32(int.from_bytes(os.urandom(10), 'big'), 16)}"
