"""Read-only summaries for browsing a store (`alight inspect`): lists that never decode a body or a token array.

Kept beside store.py (which mixes these methods in). A list of 10,000 episodes with their call counts and token
totals, or an episode's calls without their bodies, come from one query each: sizes are read from the row
and a covering index (migration m004), so nothing is decompressed until one call is opened.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from agentlightning_cli.store import codec
from agentlightning_cli.store.models import Episode

_EPISODE_COLUMNS = ", ".join(f"e.{name}" for name in Episode.__dataclass_fields__)
# Per-episode sums kept by migration m005's trigger: one short row per episode instead of a pass over every call.
_CALL_STATS = "s.calls, s.failed_calls, s.prompt_tokens, s.completion_tokens, s.first_call_at, s.last_call_at"
_CALL_SUMMARY_COLUMNS = (
    "id, episode_id, seq, protocol, method, path, status, http_status, stream, client_model, model, finish_reason,"
    " usage, sampling, dropped, started_at, first_byte_at, ended_at, error, prompt_len,"
    " completion_len, prompt_base_seq, prompt_prefix_len, client_request_size,"
    " response_size"
)


@dataclass(frozen=True)
class EpisodeSummary:
    """An episode with what a list shows about its calls: how many, how many failed, tokens, first/last time."""

    episode: Episode
    round_index: int | None  # the round's idx (0, 1, ...), None for episodes outside a round
    calls: int
    failed_calls: int  # calls whose status is not "ok"
    prompt_tokens: int  # summed over calls (each call resends its context)
    completion_tokens: int  # sampled tokens, summed over calls
    first_call_at: float | None
    last_call_at: float | None


@dataclass(frozen=True)
class CallSummary:
    """A stored call without its bodies, token ids or logprobs: what a call list needs, read in one query."""

    id: str
    episode_id: str
    seq: int
    protocol: str
    method: str
    path: str
    status: str
    http_status: int
    stream: bool
    client_model: str | None
    model: str | None  # the adapter that served it
    finish_reason: str | None
    usage: dict[str, Any] | None
    sampling: dict[str, Any] | None
    dropped: dict[str, Any] | None
    started_at: float
    first_byte_at: float | None
    ended_at: float
    error: str | None
    prompt_len: int | None  # None: the upstream reported no token ids
    completion_len: int | None
    prompt_base_seq: int | None  # the earlier call whose prompt + completion this prompt starts with
    prompt_prefix_len: int | None  # how many of that call's prompt + completion tokens it starts with
    request_size: int  # bytes of the client's request body
    response_size: int | None


class SummaryReads:
    """Mixed into Store: needs `self._conn()`."""

    def _conn(self) -> sqlite3.Connection:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def episode_summaries(self, run_id: str | None = None, round_id: str | None = None,
                          limit: int | None = None) -> list[EpisodeSummary]:
        """Episodes (ordered by id, i.e. creation) with their call counts and token totals, in one query;
        `limit`: only the first ones (a browser's first screen)."""
        where, args = [], []
        if run_id is not None:
            where, args = [*where, "e.run_id = ?"], [*args, run_id]
        if round_id is not None:
            where, args = [*where, "e.round_id = ?"], [*args, round_id]
        return self._episode_summaries(where, args, limit)

    def episode_summaries_by_id(self, episode_ids: list[str]) -> list[EpisodeSummary]:
        """The summaries of these episodes (unknown ids are left out), ordered by id."""
        marks = ", ".join("?" * len(episode_ids))
        return self._episode_summaries([f"e.id IN ({marks})"], [codec.text_in(i) for i in episode_ids])

    def _episode_summaries(self, where: list[str], args: list, limit: int | None = None) -> list[EpisodeSummary]:
        # One query: each episode, its round's idx and its row of episode_call_stats. Plain tuples, not
        # sqlite3.Row: ~3x cheaper per row.
        sql = (f"SELECT {_EPISODE_COLUMNS}, r.idx, {_CALL_STATS} FROM episodes e"
               " LEFT JOIN rounds r ON r.id = e.round_id LEFT JOIN episode_call_stats s ON s.episode_id = e.id"
               f"{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY e.id"
               f"{'' if limit is None else f' LIMIT {int(limit)}'}")
        cur = self._conn().cursor()
        cur.row_factory = None
        return [_summary(row) for row in cur.execute(sql, args)]

    def call_summaries(self, episode_id: str) -> list[CallSummary]:
        """An episode's calls in seq order, without bodies or token arrays."""
        rows = self._conn().execute(
            f"SELECT {_CALL_SUMMARY_COLUMNS} FROM calls WHERE episode_id = ? ORDER BY seq",
            (codec.text_in(episode_id),))
        return [_call_summary(row) for row in rows]

    def call_summaries_by_id(self, call_ids: list[str]) -> list[CallSummary]:
        """The summaries of these calls (unknown ids are left out), in the order of their episodes and seqs."""
        marks = ", ".join("?" * len(call_ids))
        rows = self._conn().execute(f"SELECT {_CALL_SUMMARY_COLUMNS} FROM calls WHERE id IN ({marks})"
                                    " ORDER BY episode_id, seq", [codec.text_in(i) for i in call_ids])
        return [_call_summary(row) for row in rows]

    def call_responses(self, episode_id: str) -> dict[int, bytes]:
        """seq -> the response body the client saw, for every call of the episode that has one. Responses are
        plain frames (no delta chain), so this is one zstd decode per call: cheap previews for a call list."""
        rows = self._conn().execute("SELECT seq, response FROM calls WHERE episode_id = ? AND response IS NOT NULL"
                                    " ORDER BY seq", (codec.text_in(episode_id),))
        return {seq: codec.decompress(blob) for seq, blob in rows}

    def episode_counts(self) -> dict[str | None, int]:
        """run_id -> how many episodes it has (None: ad-hoc episodes outside any run)."""
        return dict(self._conn().execute("SELECT run_id, COUNT(*) FROM episodes GROUP BY run_id").fetchall())

    def data_version(self) -> int:
        """Changes whenever another connection commits to the file: a viewer polls it to know when to reload
        (a write-ahead log makes a running `alight run` visible to readers as it commits)."""
        return self._conn().execute("PRAGMA data_version").fetchone()[0]


_EPISODE_FIELDS = list(Episode.__dataclass_fields__)
_N_EPISODE = len(_EPISODE_FIELDS)
_JSON = [_EPISODE_FIELDS.index("reward_detail"), _EPISODE_FIELDS.index("outcome_detail")]
_new = object.__new__


def _summary(row: tuple) -> EpisodeSummary:
    """`row`: the episode's columns in field order, the round's idx, then its _CALL_STATS (NULL: no calls yet)."""
    values = [v.decode("utf-8", "surrogatepass") if type(v) is bytes else v for v in row[:_N_EPISODE]]  # text_out
    for i in _JSON:
        if values[i] is not None:
            values[i] = json.loads(values[i])
    # Filled in directly rather than through the frozen dataclasses' __init__ (one object.__setattr__ per
    # field): half the cost, and a 10,000-episode list is built on every `inspect list`. Same objects.
    episode = _new(Episode)
    episode.__dict__.update(zip(_EPISODE_FIELDS, values))
    summary = _new(EpisodeSummary)
    n = _N_EPISODE
    summary.__dict__.update(episode=episode, round_index=row[n], calls=row[n + 1] or 0, failed_calls=row[n + 2] or 0,
                            prompt_tokens=row[n + 3] or 0, completion_tokens=row[n + 4] or 0,
                            first_call_at=row[n + 5], last_call_at=row[n + 6])
    return summary


def _call_summary(row: sqlite3.Row) -> CallSummary:
    return CallSummary(
        id=row["id"], episode_id=codec.text_out(row["episode_id"]), seq=row["seq"], protocol=row["protocol"],
        method=row["method"], path=codec.text_out(row["path"]), status=row["status"], http_status=row["http_status"],
        stream=bool(row["stream"]), client_model=codec.text_out(row["client_model"]), model=codec.text_out(row["model"]),
        finish_reason=codec.text_out(row["finish_reason"]),
        usage=_json(row["usage"]), sampling=_json(row["sampling"]), dropped=_json(row["dropped"]),
        started_at=row["started_at"], first_byte_at=row["first_byte_at"], ended_at=row["ended_at"],
        error=codec.text_out(row["error"]), prompt_len=row["prompt_len"], completion_len=row["completion_len"],
        prompt_base_seq=row["prompt_base_seq"], prompt_prefix_len=row["prompt_prefix_len"],
        request_size=row["client_request_size"], response_size=row["response_size"])


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)
