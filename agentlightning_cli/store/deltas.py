"""Delta frames for request bodies: a body stored against an earlier body of the same kind (its base).

Two frame kinds, told apart by their first byte:

- splice (first byte 1 or 2): body = base[:prefix] + middle + base[len(base) - suffix:]. Harnesses resend
  the previous request with new messages inserted before a constant tail (chat: messages, then tools;
  Anthropic: messages, then system/tools; Responses: input, then tools), so prefix and suffix cover nearly
  all of it and only the new messages are encoded. Finding them is a few memcmp's and the middle is
  compressed with the thread's reused zstd context: ~10x cheaper per call than a dictionary frame, whose
  compressor (and dictionary tables over the whole base) must be built anew for every body.
- dictionary (a zstd frame, first byte 0x28 of its magic number): zstd with the base as raw-content
  dictionary. Used when the harness rewrote history (much of the base is gone from the middle of the
  body), where back-references into the whole base still find the moved text. Every delta written before
  splice frames existed is of this kind, and still decodes.
"""

from __future__ import annotations

import struct

from agentlightning_cli.store import codec

_SPLICE_RAW, _SPLICE_ZSTD = 1, 2  # never 0x28, the first byte of every zstd frame
_HEADER = struct.Struct("<BII")  # kind, prefix length, suffix length (bodies are far below 4 GiB)
# A middle this short is stored as is: a zstd frame costs ~10 bytes of header and a few µs.
_MIN_COMPRESS = 128
# When more of the base than this is missing from the body (history rewritten, not just appended to),
# a dictionary frame is written: the new middle likely repeats much of what was removed.
MAX_REMOVED = 512


def encode(data: bytes, base: bytes) -> bytes:
    """A delta frame of `data` against `base`: a splice when only an insertion (plus small edits) separates
    them, else a dictionary frame."""
    if len(data) >= 2**32 or len(base) >= 2**32:
        return codec.compress_delta(data, base)
    prefix = common_prefix(data, base)
    suffix = common_suffix(data, base, min(len(data), len(base)) - prefix)
    if len(base) - prefix - suffix > MAX_REMOVED:
        return codec.compress_delta(data, base)
    middle = data[prefix : len(data) - suffix]
    if len(middle) >= _MIN_COMPRESS:
        packed = codec.compress(middle)
        if len(packed) < len(middle):
            return _HEADER.pack(_SPLICE_ZSTD, prefix, suffix) + packed
    return _HEADER.pack(_SPLICE_RAW, prefix, suffix) + middle


def decode(blob: bytes, base: bytes) -> bytes:
    """Inverse of `encode` (and of codec.compress_delta, the only delta kind older databases hold)."""
    kind = blob[0] if blob else None
    if kind not in (_SPLICE_RAW, _SPLICE_ZSTD):
        return codec.decompress_delta(blob, base)
    _, prefix, suffix = _HEADER.unpack_from(blob)
    middle = blob[_HEADER.size :]
    if kind == _SPLICE_ZSTD:
        middle = codec.decompress(middle)
    if prefix + suffix > len(base):
        raise ValueError(f"splice frame takes {prefix} + {suffix} bytes of a {len(base)}-byte base")
    view = memoryview(base)  # slices of a view are not copies: the join copies each byte once
    return b"".join((view[:prefix], middle, view[len(base) - suffix :]))


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix. Each probe is one memcmp (startswith on a memoryview slice:
    no copies), and each compares only the bytes not yet known equal: ~2 x the prefix length in all."""
    limit = min(len(a), len(b))
    view = memoryview(a)
    if b.startswith(view[:limit]):
        return limit
    lo, hi = 0, limit  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.startswith(view[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length (at most `limit`) of the longest common suffix; the caller passes the bytes left after the
    common prefix as `limit`, so prefix and suffix never overlap in either input."""
    view, la, lb = memoryview(a), len(a), len(b)
    if b.endswith(view[la - limit :]):
        return limit
    lo, hi = 0, limit  # a[la-lo:] == b[lb-lo:], a[la-hi:] != b[lb-hi:]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.startswith(view[la - mid : la - lo], lb - mid):
            lo = mid
        else:
            hi = mid
    return lo
