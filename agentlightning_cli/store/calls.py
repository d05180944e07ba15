"""Encoding a CallRecord into a calls row (delta token ids, delta-compressed bodies) and back, exactly.

A call's prompt ids reference an earlier call of the same episode (`prompt_base_seq`): the prompt is the
first `prompt_prefix_len` tokens of that call's prompt + completion, followed by `prompt_tail`.
Request bodies are delta frames (store/deltas.py) against an earlier body of the same kind (`*_base_seq`),
or plain zstd keyframes.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from typing import Any

import orjson

from agentlightning_cli.store import codec, deltas
from agentlightning_cli.store.models import Call, CallRecord

DELTA_KINDS = ("client_request", "upstream_request")  # bodies that resend the whole conversation
PLAIN_KINDS = ("response", "upstream_response")  # bodies that hold only the new turn
_JSON_FIELDS = ("client_headers", "usage", "sampling", "dropped", "continuation")
_SCALAR_FIELDS = (
    "id", "episode_id", "seq", "protocol", "method", "path", "status", "http_status", "finish_reason",
    "client_model", "model", "started_at", "first_byte_at", "ended_at", "error",
)  # fmt: skip
PROMPT_COLUMNS = "seq, prompt_base_seq, prompt_prefix_len, prompt_tail, prompt_len, completion_ids"


class CorruptCallError(RuntimeError):
    """A stored call does not decode to what was written (sizes or lengths disagree)."""


@dataclass(frozen=True)
class BodyBase:
    """A committed body that later bodies of the same kind may be delta-encoded against."""

    seq: int
    raw: bytes
    chain: int  # bodies decoded to read this one
    chain_bytes: int  # their total size


@dataclass(frozen=True)
class KeyframePolicy:
    """When to stop delta-encoding and write a plain frame: bounds the bytes decoded to read one body."""

    max_chain: int = 256
    max_chain_bytes: int = 64 * 1024 * 1024


def encode_call(
    record: CallRecord, recent_ids: list[tuple[int, bytes]], bodies: dict[str, BodyBase], policy: KeyframePolicy
) -> tuple[dict[str, Any], bytes | None, dict[str, BodyBase]]:
    """Row values (without id/seq) for `record`, given committed calls of its episode as delta bases.

    `recent_ids` is [(seq, packed prompt + completion ids)], newest first. Returns the row, this call's
    packed prompt + completion ids, and its bodies as future bases (their seq filled in by the caller).
    """
    row: dict[str, Any] = {
        name: codec.text_in(getattr(record, name)) for name in _SCALAR_FIELDS if name not in ("id", "seq")
    }
    row["stream"] = int(bool(record.stream))
    for name in _JSON_FIELDS:
        value = getattr(record, name)
        row[name] = None if value is None else json_text(value)
    row["client_headers"] = row["client_headers"] or "{}"
    full_ids = _encode_ids(record, recent_ids, row)
    new_bases: dict[str, BodyBase] = {}
    for kind in DELTA_KINDS:
        raw = getattr(record, kind)
        base = None if raw is None else _encode_body(kind, bytes(raw), bodies.get(kind), policy, row)
        if raw is None:
            row.update({kind: None, f"{kind}_size": None, f"{kind}_base_seq": None})
            row.update({f"{kind}_chain": None, f"{kind}_chain_bytes": None})
        else:
            new_bases[kind] = base
    for kind in PLAIN_KINDS:
        raw = getattr(record, kind)
        row[kind] = None if raw is None else codec.compress(bytes(raw))
        row[f"{kind}_size"] = None if raw is None else len(raw)
    return row, full_ids, new_bases


def json_text(value: Any) -> str:
    """JSON for a TEXT column that json.loads reads back equal. orjson (~5x cheaper) unless the value holds
    what it would change or refuses: NaN/Infinity (it writes null), lone surrogates, non-str keys, ints past
    64 bits; those take json.dumps, whose ensure_ascii turns surrogates into \\u escapes that load back."""
    if _finite(value):
        try:
            return orjson.dumps(value).decode()
        except TypeError:
            pass
    return json.dumps(value, ensure_ascii=True)


def _finite(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(_finite(v) for v in value.values())
    if kind is list or kind is tuple:
        return all(_finite(v) for v in value)
    return kind in _SAFE_TYPES or not isinstance(value, float)


_SAFE_TYPES = (str, int, bool, type(None))
_INSERT_SQL: dict[tuple[str, ...], str] = {}


def insert_sql(row: dict[str, Any]) -> str:
    """The INSERT for this row's columns, built once per column set (the same few every time)."""
    columns = tuple(row)
    sql = _INSERT_SQL.get(columns)
    if sql is None:
        sql = _INSERT_SQL[columns] = f"INSERT INTO calls ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    return sql


def _encode_body(kind: str, raw: bytes, base: BodyBase | None, policy: KeyframePolicy, row: dict[str, Any]) -> BodyBase:
    """Delta-compress against `base` unless the chain would get too long to read back cheaply."""
    if base is not None and base.chain < policy.max_chain and base.chain_bytes + len(raw) <= policy.max_chain_bytes:
        blob, base_seq = deltas.encode(raw, base.raw), base.seq
        chain, chain_bytes = base.chain + 1, base.chain_bytes + len(raw)
    else:  # keyframe
        blob, base_seq, chain, chain_bytes = codec.compress(raw), None, 1, len(raw)
    row.update({kind: blob, f"{kind}_size": len(raw), f"{kind}_base_seq": base_seq})
    row.update({f"{kind}_chain": chain, f"{kind}_chain_bytes": chain_bytes})
    return BodyBase(seq=-1, raw=raw, chain=chain, chain_bytes=chain_bytes)


def _encode_ids(record: CallRecord, recent_ids: list[tuple[int, bytes]], row: dict[str, Any]) -> bytes | None:
    completion = None if record.completion_token_ids is None else codec.pack_ids(record.completion_token_ids)
    row["completion_ids"] = completion
    row["completion_len"] = None if completion is None else len(completion) // 4  # m004: lists read this column
    logprobs = record.completion_logprobs
    row["completion_logprobs"] = None if logprobs is None else codec.pack_floats(logprobs)
    if record.prompt_token_ids is None:
        row.update(prompt_base_seq=None, prompt_prefix_len=None, prompt_tail=None, prompt_len=None)
        return None
    prompt = codec.pack_ids(record.prompt_token_ids)
    best_seq, best_len = None, 0
    # Newest first, so the previous call wins ties. All candidates are compared (a few memcmp's): an older
    # call can share more, e.g. when the previous call was a retry with a shorter completion.
    for seq, ids in recent_ids:
        common = codec.common_prefix_len(prompt, ids)
        if common > best_len:
            best_seq, best_len = seq, common
    row.update(
        prompt_base_seq=best_seq,
        prompt_prefix_len=best_len // 4 if best_seq is not None else None,
        prompt_tail=prompt[best_len:],
        prompt_len=len(prompt) // 4,
    )
    return prompt + (completion or b"")


def resolve_prompt(row: sqlite3.Row | tuple, known: dict[int, bytes]) -> bytes | None:
    """Full packed prompt of a row given by PROMPT_COLUMNS; records its prompt + completion in `known`."""
    seq, base_seq, prefix_len, tail, prompt_len, completion = tuple(row)
    if prompt_len is None:
        return None
    prompt = tail if base_seq is None else known[base_seq][: prefix_len * 4] + tail
    if len(prompt) != prompt_len * 4:
        raise CorruptCallError(f"call seq {seq}: prompt has {len(prompt) // 4} ids, expected {prompt_len}")
    known[seq] = prompt + (completion or b"")
    return prompt


def resolve_prompt_chain(conn: sqlite3.Connection, episode_id: str, seq: int, known: dict[int, bytes]) -> bytes | None:
    """Full packed prompt of one call, decoding only the calls its reference chain passes through."""
    rows = {
        r[0]: r
        for r in conn.execute(
            f"SELECT {PROMPT_COLUMNS} FROM calls WHERE episode_id = ? AND seq <= ?", (episode_id, seq)
        )
    }
    chain, cursor = [seq], rows[seq][1]
    while cursor is not None and cursor not in known:
        chain.append(cursor)
        cursor = rows[cursor][1]
    prompt = None
    for s in reversed(chain):
        prompt = resolve_prompt(rows[s], known)
    return prompt


def resolve_body(conn: sqlite3.Connection, episode_id: str, kind: str, seq: int, known: dict[int, bytes]) -> bytes:
    """Decode body `kind` of call `seq`, walking back to a keyframe or a body already in `known`."""
    chain, cursor = [], seq
    while cursor not in known:
        blob, base_seq, size = conn.execute(
            f"SELECT {kind}, {kind}_base_seq, {kind}_size FROM calls WHERE episode_id = ? AND seq = ?",
            (episode_id, cursor),
        ).fetchone()
        chain.append((cursor, blob, base_seq, size))
        if base_seq is None:
            break
        cursor = base_seq
    for s, blob, base_seq, size in reversed(chain):
        raw = codec.decompress(blob) if base_seq is None else deltas.decode(blob, known[base_seq])
        if len(raw) != size:
            raise CorruptCallError(f"call seq {s}: {kind} decoded to {len(raw)} bytes, expected {size}")
        known[s] = raw
    return known[seq]


def row_to_call(
    row: sqlite3.Row, prompt: bytes | None, bodies: dict[str, bytes | None]
) -> Call:
    """Build a Call from a full calls row plus its already-resolved prompt ids and delta bodies."""
    values: dict[str, Any] = {name: codec.text_out(row[name]) for name in _SCALAR_FIELDS}
    values["stream"] = bool(row["stream"])
    for name in _JSON_FIELDS:
        values[name] = None if row[name] is None else json.loads(row[name])
    for kind in DELTA_KINDS:
        values[kind] = bodies.get(kind)
    for kind in PLAIN_KINDS:
        blob = row[kind]
        values[kind] = None if blob is None else codec.decompress(blob)
        if values[kind] is not None and len(values[kind]) != row[f"{kind}_size"]:
            raise CorruptCallError(f"call {row['id']}: {kind} has the wrong size")
    values["prompt_token_ids"] = None if prompt is None else codec.unpack_ids(prompt)
    completion = row["completion_ids"]
    values["completion_token_ids"] = None if completion is None else codec.unpack_ids(completion)
    logprobs = row["completion_logprobs"]
    values["completion_logprobs"] = None if logprobs is None else codec.unpack_floats(logprobs)
    return Call(**values)
