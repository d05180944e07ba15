"""The typed, blocking API over one run directory's alight.db. The only module callers import for storage.

Thread-safe: each thread gets its own connection (WAL lets readers run beside the writer). Safe from several
processes: every write is one BEGIN IMMEDIATE transaction, retried on SQLITE_BUSY.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from agentlightning_cli.errors import AlightError
from agentlightning_cli.store import calls as call_rows
from agentlightning_cli.store import codec
from agentlightning_cli.store.connection import connect, write_transaction
from agentlightning_cli.store.episode_cache import EpisodeCache, EpisodeState, advance
from agentlightning_cli.store.ids import new_id
from agentlightning_cli.store.migrations import apply_migrations
from agentlightning_cli.store.models import Call, CallRecord, Episode, Round, Run, StoredCall
from agentlightning_cli.store.patches import PatchRecords
from agentlightning_cli.store.summaries import SummaryReads
from agentlightning_cli.store.training import TrainingRecords

DB_NAME = "alight.db"
_EPISODE_FIELDS = {
    "status", "reward", "reward_detail", "started_at", "ended_at", "exit_code", "error", "outcome", "workspace",
    "outcome_detail",
}  # fmt: skip
_JSON_EPISODE_FIELDS = ("reward_detail", "outcome_detail")


class EpisodeExistsError(ValueError):
    """create_episode was given an id that is already taken (e.g. two requests raced to register it)."""


def _after_fork(ref: "weakref.ref[Store]") -> None:
    store = ref()
    if store is not None:
        store._after_fork()


def _key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Store(TrainingRecords, PatchRecords, SummaryReads):
    """Runs, rounds, episodes and their calls, in `<run_dir>/alight.db` (training records: training.py;
    read-only summaries for browsing: summaries.py)."""

    def __init__(self, path: Path, keyframes: call_rows.KeyframePolicy | None = None):
        self.path = Path(path)
        self.keyframes = keyframes or call_rows.KeyframePolicy()
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._cache = EpisodeCache()
        self._closed = False
        # A forked child forgets the parent's connections right after the fork (not by comparing os.getpid()
        # on every call: a system call per store access). Weak, so a closed store can be collected.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _after_fork(ref))
        try:
            apply_migrations(self._conn())
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, run_dir: str | Path, keyframes: call_rows.KeyframePolicy | None = None) -> Store:
        """Open (creating if needed) `run_dir/alight.db` and apply any missing migrations."""
        run_dir = Path(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            return cls(run_dir / DB_NAME, keyframes)
        except (OSError, sqlite3.DatabaseError) as exc:
            raise AlightError(f"cannot open the store at {run_dir / DB_NAME}: {exc}",
                              hint="check the run directory exists, is writable and holds an alight database") from exc

    def close(self) -> None:
        with self._conns_lock:
            self._closed = True
            for conn in self._conns:
                conn.close()
            self._conns.clear()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with self._conns_lock:
                if self._closed:
                    raise RuntimeError("store is closed")
                conn = connect(self.path)
                conn.row_factory = sqlite3.Row
                self._conns.append(conn)
            self._local.conn = conn
        return conn

    def _after_fork(self) -> None:
        # A forked child must not use the parent's SQLite connections (or locks that may have been held
        # at fork time): forget them without closing, and start afresh in this process.
        self._local = threading.local()
        self._conns = []
        self._conns_lock = threading.Lock()
        self._cache = EpisodeCache()

    # runs and rounds ---------------------------------------------------------------------------------
    def create_run(self, name: str, config: dict[str, Any]) -> Run:
        run = Run(id=new_id("run"), name=name, config=config, created_at=time.time(), status="running")
        try:
            write_transaction(self._conn(), lambda c: c.execute(
                "INSERT INTO runs (id, name, config, created_at, status) VALUES (?, ?, ?, ?, ?)",
                (run.id, name, json.dumps(config), run.created_at, run.status)))
        except sqlite3.IntegrityError as exc:
            raise AlightError(f"a run named {name!r} already exists in {self.path}",
                              hint="pick another name, or resume that run") from exc
        return run

    def finish_run(self, run_id: str, status: str) -> None:
        self._update_one("runs", run_id, {"status": status})

    def get_run(self, name_or_id: str) -> Run | None:
        key = codec.text_in(name_or_id)  # an unencodable name matches nothing instead of raising
        row = self._conn().execute("SELECT * FROM runs WHERE id = ? OR name = ?", (key, key)).fetchone()
        return None if row is None else _run(row)

    def list_runs(self) -> list[Run]:
        return [_run(r) for r in self._conn().execute("SELECT * FROM runs ORDER BY created_at, id")]

    def create_round(self, run_id: str, index: int, policy: str, adapter_path: str | None,
                     kind: str = "train") -> Round:
        rnd = Round(id=new_id("rnd"), run_id=run_id, index=index, policy=policy, adapter_path=adapter_path,
                    status="running", started_at=time.time(), ended_at=None, kind=kind)
        write_transaction(self._conn(), lambda c: c.execute(
            "INSERT INTO rounds (id, run_id, kind, idx, policy, adapter_path, status, started_at)"
            " VALUES (?,?,?,?,?,?,?,?)", (rnd.id, run_id, kind, index, policy, adapter_path, rnd.status, rnd.started_at)))
        return rnd

    def finish_round(self, round_id: str, status: str) -> None:
        self._update_one("rounds", round_id, {"status": status, "ended_at": time.time()})

    def get_round(self, round_id: str) -> Round | None:
        row = self._conn().execute("SELECT * FROM rounds WHERE id = ?", (round_id,)).fetchone()
        return None if row is None else _round(row)

    def list_rounds(self, run_id: str, kind: str = "train") -> list[Round]:
        """The run's rounds of one kind: `train` (the default, so nothing that trains or sums train reward ever
        sees an evaluation) or `eval` (held-out evaluations)."""
        rows = self._conn().execute("SELECT * FROM rounds WHERE run_id = ? AND kind = ? ORDER BY idx", (run_id, kind))
        return [_round(r) for r in rows]

    # episodes ----------------------------------------------------------------------------------------
    def create_episode(self, run_id: str | None, round_id: str | None, task_id: str | None, attempt: int,
                       harness: str | None, key: str, workspace: str | None = None,
                       episode_id: str | None = None) -> Episode:
        ep = Episode(id=episode_id or new_id("ep"), run_id=run_id, round_id=round_id, task_id=task_id,
                     attempt=attempt, harness=harness, status="pending", reward=None, reward_detail=None,
                     created_at=time.time(), started_at=None, ended_at=None, exit_code=None, error=None,
                     workspace=workspace, outcome=None)
        try:
            write_transaction(self._conn(), lambda c: c.execute(
                "INSERT INTO episodes (id, run_id, round_id, task_id, attempt, harness, key_sha256, status,"
                " created_at, workspace) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (ep.id, run_id, round_id, codec.text_in(task_id), attempt, harness, _key_hash(key), ep.status,
                 ep.created_at, codec.text_in(workspace))))
        except sqlite3.IntegrityError as exc:
            if "UNIQUE" in str(exc):
                raise EpisodeExistsError(f"episode {ep.id!r} already exists in {self.path}") from exc
            raise LookupError(f"episode {ep.id!r} names a run or round that does not exist") from exc
        return ep

    def check_episode_key(self, episode_id: str, key: str) -> bool:
        row = self._conn().execute(
            "SELECT key_sha256 FROM episodes WHERE id = ?", (codec.text_in(episode_id),)).fetchone()
        return row is not None and hmac.compare_digest(row[0], _key_hash(key))

    def get_episode(self, episode_id: str) -> Episode | None:
        row = self._conn().execute("SELECT * FROM episodes WHERE id = ?", (codec.text_in(episode_id),)).fetchone()
        return None if row is None else _episode(row)

    def list_episodes(self, run_id: str | None = None, round_id: str | None = None) -> list[Episode]:
        sql, args = "SELECT * FROM episodes WHERE 1=1", []
        if run_id is not None:
            sql, args = sql + " AND run_id = ?", [*args, run_id]
        if round_id is not None:
            sql, args = sql + " AND round_id = ?", [*args, round_id]
        return [_episode(r) for r in self._conn().execute(sql + " ORDER BY id", args)]

    def update_episode(self, episode_id: str, **fields: Any) -> None:
        unknown = set(fields) - _EPISODE_FIELDS
        if unknown:
            raise TypeError(f"update_episode got fields it cannot set: {', '.join(sorted(unknown))}")
        for name in _JSON_EPISODE_FIELDS:
            if fields.get(name) is not None:
                fields[name] = json.dumps(fields[name])
        self._update_one("episodes", episode_id, fields)

    def _update_one(self, table: str, row_id: str, fields: dict[str, Any]) -> None:
        if not fields:
            return
        sets = ", ".join(f"{name} = ?" for name in fields)
        values = [codec.text_in(v) for v in fields.values()]
        cur = write_transaction(self._conn(), lambda c: c.execute(
            f"UPDATE {table} SET {sets} WHERE id = ?", (*values, row_id)))
        if cur.rowcount != 1:
            raise LookupError(f"no row {row_id!r} in {table}")

    # calls -------------------------------------------------------------------------------------------
    def add_call(self, record: CallRecord) -> Call:
        """Store one call; its seq is the episode's next (0, 1, 2, ...) even with concurrent writers."""
        return self.add_calls([record])[0]

    def add_calls(self, records: list[CallRecord], full: bool = True) -> list[Call] | list[StoredCall]:
        """Store several calls in ONE transaction (all or none), in order: one BEGIN/COMMIT for a whole batch
        is what lets a busy proxy record hundreds of calls a second. Each is encoded as `add_call` would.

        `full=False` returns only each call's (id, seq): the proxy's recorder needs nothing more, and building
        the Call objects was ~5% of its CPU per request."""
        for record in records:
            if not isinstance(codec.text_in(record.episode_id), str):
                raise LookupError(f"no episode {record.episode_id!r}: create it before storing its calls")
        conn = self._conn()

        def insert(c: sqlite3.Connection) -> tuple[list[tuple[str, int]], dict[str, EpisodeState]]:
            # Encoded inside the write lock: each call's bases are the rows just before it, committed or
            # earlier in this same transaction, so a batch never references a call that might not exist.
            states: dict[str, EpisodeState] = {}
            placed = []
            for record in records:
                ep = record.episode_id
                state = states.get(ep)
                if state is None:
                    state = self._cache.current(c, ep)
                    if state.last_seq < 0 and c.execute("SELECT 1 FROM episodes WHERE id = ?", (ep,)).fetchone() is None:
                        raise LookupError(f"no episode {ep!r}: create it before storing its calls")
                row, ids, bodies = call_rows.encode_call(record, state.recent_ids, state.bodies, self.keyframes)
                row["id"], row["seq"] = new_id("call"), state.last_seq + 1
                c.execute(call_rows.insert_sql(row), tuple(row.values()))
                states[ep] = advance(state, row["seq"], row["id"], ids, bodies)
                placed.append((row["id"], row["seq"]))
            return placed, states

        placed, states = write_transaction(conn, insert)
        for ep, state in states.items():
            self._cache.put(ep, state)
        if not full:
            return [StoredCall(call_id, seq) for call_id, seq in placed]
        out = []
        for record, (call_id, seq) in zip(records, placed):
            values = {name: getattr(record, name) for name in record.__dataclass_fields__}
            for kind in (*call_rows.DELTA_KINDS, *call_rows.PLAIN_KINDS):  # what get_call will return
                values[kind] = None if values[kind] is None else bytes(values[kind])
            values["stream"] = bool(record.stream)
            out.append(Call(**values, id=call_id, seq=seq))
        return out

    def get_calls(self, episode_id: str) -> list[Call]:
        """Every call of the episode in seq order, with full token ids and exact body bytes."""
        conn = self._conn()
        episode_id = codec.text_in(episode_id)
        known_ids: dict[int, bytes] = {}
        known_bodies: dict[str, dict[int, bytes]] = {kind: {} for kind in call_rows.DELTA_KINDS}
        out = []
        for row in conn.execute("SELECT * FROM calls WHERE episode_id = ? ORDER BY seq", (episode_id,)):
            prompt = call_rows.resolve_prompt([row[c.strip()] for c in call_rows.PROMPT_COLUMNS.split(",")], known_ids)
            bodies = {kind: None if row[kind] is None else
                      call_rows.resolve_body(conn, episode_id, kind, row["seq"], known_bodies[kind])
                      for kind in call_rows.DELTA_KINDS}
            out.append(call_rows.row_to_call(row, prompt, bodies))
        return out

    def llm_call_count(self, episode_id: str) -> tuple[int, float | None]:
        """(calls the episode made to the model, started_at of the first), without reading any body or id:
        requests the proxy recorded as protocol "other" (e.g. a harness's HEAD preflight) are not LLM calls."""
        row = self._conn().execute(
            "SELECT count(*), min(started_at) FROM calls WHERE episode_id = ? AND protocol != 'other'",
            (codec.text_in(episode_id),)).fetchone()
        return int(row[0]), row[1]

    def get_call(self, call_id: str) -> Call | None:
        conn = self._conn()
        row = conn.execute("SELECT * FROM calls WHERE id = ?", (codec.text_in(call_id),)).fetchone()
        if row is None:
            return None
        ep, seq = row["episode_id"], row["seq"]
        prompt = call_rows.resolve_prompt_chain(conn, ep, seq, {})
        bodies = {kind: None if row[kind] is None else call_rows.resolve_body(conn, ep, kind, seq, {})
                  for kind in call_rows.DELTA_KINDS}
        return call_rows.row_to_call(row, prompt, bodies)


def _run(row: sqlite3.Row) -> Run:
    return Run(id=row["id"], name=row["name"], config=json.loads(row["config"]), created_at=row["created_at"],
               status=row["status"])


def _round(row: sqlite3.Row) -> Round:
    return Round(id=row["id"], run_id=row["run_id"], index=row["idx"], policy=row["policy"],
                 adapter_path=row["adapter_path"], status=row["status"], started_at=row["started_at"],
                 ended_at=row["ended_at"], kind=row["kind"])


def _episode(row: sqlite3.Row) -> Episode:
    values = {name: codec.text_out(row[name]) for name in Episode.__dataclass_fields__}
    for name in _JSON_EPISODE_FIELDS:
        if values[name] is not None:
            values[name] = json.loads(values[name])
    return Episode(**values)
