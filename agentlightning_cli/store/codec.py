"""Exact, compact encodings for what the calls table holds: token ids, logprobs and HTTP bodies.

Everything here round-trips bit-exactly; nothing is re-tokenised, rounded or re-serialised.
"""

from __future__ import annotations

import sys
import threading
from array import array

import zstandard

# Token ids as little-endian uint32: 4 bytes a token, no framing; every vocabulary in use fits in 32 bits.
_ID_TYPE = "I" if array("I").itemsize == 4 else "L"
# Logprobs as little-endian float64: exactly the Python floats the proxy parsed, nothing rounded.
_FLOAT_TYPE = "d"
_BIG_ENDIAN = sys.byteorder == "big"

# Level 3 is zstd's default: ~10x faster than high levels and, with the previous body as dictionary,
# the delta of a chat request is already tiny (only the new messages are encoded).
_LEVEL = 3
# Building a ZstdCompressor costs ~30 µs (context allocation), compressing a 2 KB body with one ~4 µs: plain
# frames reuse one context per thread (a context must not be used by two threads at once).
_contexts = threading.local()


def pack_ids(ids: list[int]) -> bytes:
    try:
        arr = array(_ID_TYPE, ids)
    except OverflowError as exc:
        raise ValueError("token ids must be integers in [0, 2**32)") from exc
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tobytes()


def unpack_ids(data: bytes) -> list[int]:
    arr = array(_ID_TYPE)
    arr.frombytes(data)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tolist()


def pack_floats(values: list[float]) -> bytes:
    arr = array(_FLOAT_TYPE, values)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tobytes()


def unpack_floats(data: bytes) -> list[float]:
    arr = array(_FLOAT_TYPE)
    arr.frombytes(data)
    if _BIG_ENDIAN:
        arr.byteswap()
    return arr.tolist()


def common_prefix_len(a: bytes, b: bytes, unit: int = 4) -> int:
    """Length in bytes (a multiple of `unit`) of the longest common prefix of two packed id arrays.

    Compares 16 KiB chunks (each a C memcmp), then bisects inside the first chunk that differs: a few
    hundred microseconds for a 100k-token prompt instead of a Python loop over every token.
    """
    n = min(len(a), len(b)) // unit * unit
    if a[:n] == b[:n]:
        return n
    chunk = 16384
    start = 0
    while a[start : start + chunk] == b[start : start + chunk]:
        start += chunk
    lo, hi = start // unit, min(start + chunk, n) // unit  # a[:lo] == b[:lo]; they differ before hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[start : mid * unit] == b[start : mid * unit]:
            lo = mid
        else:
            hi = mid
    return lo * unit


def text_in(value: object) -> object:
    """A str SQLite can store. Strings with lone surrogates (a non-UTF-8 path or header decoded with
    surrogateescape, a JSON "\\ud800" escape) cannot be encoded as TEXT; they are stored as their
    surrogatepass bytes instead, so one odd request can never make a write fail."""
    if isinstance(value, str) and not value.isascii():  # ASCII (nearly every value) is valid UTF-8: no encode
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return value


def text_out(value: object) -> object:
    """Inverse of text_in for a TEXT column (only text_in ever puts bytes there)."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def compress(data: bytes) -> bytes:
    compressor = getattr(_contexts, "compressor", None)
    if compressor is None:
        compressor = _contexts.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return compressor.compress(data)


def decompress(data: bytes) -> bytes:
    decompressor = getattr(_contexts, "decompressor", None)
    if decompressor is None:
        decompressor = _contexts.decompressor = zstandard.ZstdDecompressor()
    return decompressor.decompress(data)


def compress_delta(data: bytes, base: bytes) -> bytes:
    """zstd with `base` (an earlier body of the same kind) as raw-content dictionary.

    A chat request resends the whole conversation, so nearly all of it is found in the previous request
    and encoded as back-references; the frame holds little more than the new messages.
    """
    dictionary = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    # The window must reach back over the whole dictionary, or older parts of the conversation are missed.
    params = zstandard.ZstdCompressionParameters.from_level(
        _LEVEL, source_size=len(data), dict_size=len(base), window_log=_window_log(len(base) + len(data))
    )
    return zstandard.ZstdCompressor(dict_data=dictionary, compression_params=params).compress(data)


def decompress_delta(data: bytes, base: bytes) -> bytes:
    dictionary = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdDecompressor(dict_data=dictionary, max_window_size=2**31).decompress(data)


def _window_log(size: int) -> int:
    return min(max(size - 1, 1).bit_length(), 30) if size > 1024 else 10
