"""Per-episode memory of the latest committed calls, so encoding a new call needs no decoding.

The cache is only a shortcut: before each write it is checked against the database (the latest seq and
its call id). When another process or Store wrote the episode in between, the new calls are read from
the database; every base the encoder uses is therefore a committed row, and any base is correct.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from agentlightning_cli.store.calls import (
    DELTA_KINDS,
    PROMPT_COLUMNS,
    BodyBase,
    CorruptCallError,
    resolve_body,
    resolve_prompt,
)

RECENT_CALLS = 4  # prompt-prefix candidates: the previous call first, then a few older ones (branches)
# Bounds memory: an entry holds a few packed prompts and the latest request bodies (MBs for long agent
# conversations). Evicting only costs one read of the episode's newest calls on its next write.
MAX_EPISODES = 256
MAX_BYTES = 256 * 1024 * 1024


@dataclass
class EpisodeState:
    last_seq: int = -1
    last_id: str | None = None
    recent_ids: list[tuple[int, bytes]] = field(default_factory=list)  # newest first
    bodies: dict[str, BodyBase] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(len(ids) for _, ids in self.recent_ids) + sum(len(b.raw) for b in self.bodies.values())


class EpisodeCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: OrderedDict[str, EpisodeState] = OrderedDict()
        # Sizes kept as states come and go: summing every cached state on each write cost O(episodes).
        self._sizes: dict[str, int] = {}
        self._total = 0

    def current(self, conn: sqlite3.Connection, episode_id: str) -> EpisodeState:
        """The state as of the latest committed call, read from the database where the cache is behind."""
        latest = conn.execute(
            "SELECT seq, id FROM calls WHERE episode_id = ? ORDER BY seq DESC LIMIT 1", (episode_id,)
        ).fetchone()
        with self._lock:
            state = self._states.get(episode_id)
        if latest is None:
            return EpisodeState()
        if state is not None and (state.last_seq, state.last_id) == tuple(latest):
            return state
        state = _catch_up(conn, episode_id, state)
        self._store(episode_id, state)
        return state

    def put(self, episode_id: str, state: EpisodeState) -> None:
        """Remember `state` (committed calls only; a stale state is caught up by `current`, never trusted)."""
        self._store(episode_id, state)

    def _store(self, episode_id: str, state: EpisodeState) -> None:
        with self._lock:
            self._set(episode_id, state)

    def _set(self, episode_id: str, state: EpisodeState) -> None:
        """Insert or replace as the newest entry, then evict the least recently used. Caller holds _lock."""
        self._drop(episode_id)
        self._states[episode_id] = state
        self._sizes[episode_id] = size = state.nbytes
        self._total += size
        while len(self._states) > 1 and (len(self._states) > MAX_EPISODES or self._total > MAX_BYTES):
            self._drop(next(iter(self._states)))

    def _drop(self, episode_id: str) -> None:
        if self._states.pop(episode_id, None) is not None:
            self._total -= self._sizes.pop(episode_id)


def advance(state: EpisodeState, seq: int, call_id: str, ids: bytes | None, bodies: dict[str, BodyBase]) -> EpisodeState:
    """The state after call `seq` (which directly follows `state`) with these packed ids and bodies."""
    recent = state.recent_ids if ids is None else [(seq, ids), *state.recent_ids][:RECENT_CALLS]
    merged = dict(state.bodies)
    for kind, base in bodies.items():
        merged[kind] = BodyBase(seq=seq, raw=base.raw, chain=base.chain, chain_bytes=base.chain_bytes)
    return EpisodeState(seq, call_id, recent, merged)


def _catch_up(conn: sqlite3.Connection, episode_id: str, state: EpisodeState | None) -> EpisodeState:
    """Read calls newer than `state` (or the whole episode) and derive the new state."""
    if state is not None:
        same = conn.execute(
            "SELECT id FROM calls WHERE episode_id = ? AND seq = ?", (episode_id, state.last_seq)
        ).fetchone()
        if same is None or same[0] != state.last_id:
            state = None
    after = -1 if state is None else state.last_seq
    known = {} if state is None else dict(state.recent_ids)
    rows = conn.execute(
        f"SELECT {PROMPT_COLUMNS}, id FROM calls WHERE episode_id = ? AND seq > ? ORDER BY seq",
        (episode_id, after),
    ).fetchall()
    if not rows:  # another thread committed (and cached) a newer call after our latest-seq query
        return state if state is not None else EpisodeState()
    recent = [] if state is None else list(state.recent_ids)
    for row in rows:
        if row[1] is not None and row[1] not in known:
            if state is None:
                raise CorruptCallError(f"call seq {row[0]} references seq {row[1]}, not an earlier call")
            return _catch_up(conn, episode_id, None)  # references a call the cache no longer holds
        if resolve_prompt(row[:6], known) is not None:
            recent = [(row[0], known[row[0]]), *recent][:RECENT_CALLS]
    last_seq, last_id = rows[-1][0], rows[-1][6]
    bodies = {} if state is None else dict(state.bodies)
    for kind in DELTA_KINDS:
        latest = conn.execute(
            f"SELECT seq, {kind}_chain, {kind}_chain_bytes FROM calls"
            f" WHERE episode_id = ? AND seq > ? AND {kind} IS NOT NULL ORDER BY seq DESC LIMIT 1",
            (episode_id, after),
        ).fetchone()
        if latest is None:
            continue
        old = bodies.get(kind)
        raw = resolve_body(conn, episode_id, kind, latest[0], {} if old is None else {old.seq: old.raw})
        bodies[kind] = BodyBase(seq=latest[0], raw=raw, chain=latest[1], chain_bytes=latest[2])
    return EpisodeState(last_seq, last_id, recent, bodies)

