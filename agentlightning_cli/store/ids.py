"""Sortable unique ids: creation time first, then randomness counted up within a millisecond (so ORDER BY id is
creation order)."""

from __future__ import annotations

import os
import threading
import time

# Crockford base32: no I, L, O, U, so ids read unambiguously when a user copies one from a terminal.
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Every pair of digits (10 bits): half as many steps as a digit-by-digit divmod loop, and no bytes round trip
# (base64.b32encode is pure Python on 3.11). Ids are made on every stored call.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_RANDOM_BITS = 80
_lock = threading.Lock()
_last: tuple[int, str, int] = (-1, "", 0)  # (millis, its digits, the last id's random part)


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
    """`prefix-` + 10 chars of milliseconds + 16 chars (80 bits) of randomness, like a monotonic ULID: within one
    millisecond each id is the previous one plus 1, so ORDER BY id is creation order even when many ids share a
    millisecond (under load they do)."""
    global _last
    millis = time.time_ns() // 1_000_000
    with _lock:
        last = _last
        if millis > last[0]:  # a new millisecond: fresh randomness, the time encoded once
            last = (millis, _base32(millis, 10), int.from_bytes(os.urandom(10), "big") >> 1)
        else:  # the same millisecond (or the clock stepped back): keep the order, count up
            last = (last[0], last[1], (last[2] + 1) % (1 << _RANDOM_BITS))
        _last = last
    return f"{prefix}-{last[1]}{_base32(last[2], 16)}"
