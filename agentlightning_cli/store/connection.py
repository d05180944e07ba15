"""SQLite connections set up for many threads and several processes, and write transactions that retry."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

# How long one statement waits for another writer's lock before SQLite gives up (then we retry).
BUSY_TIMEOUT_MS = 10_000
# Total time a write keeps retrying after SQLITE_BUSY before the error reaches the caller.
WRITE_DEADLINE_S = 120.0
_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


def connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE ourselves; Python's implicit BEGIN (deferred) would
    # let two writers both read MAX(seq) and then fight over the upgrade to a write lock.
    # check_same_thread=False only so close() may close every thread's connection; each is used by one thread.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    # WAL: readers never block the writer and a killed writer leaves earlier commits intact.
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise sqlite3.OperationalError(f"could not switch {path} to WAL mode (got {mode})")
    # NORMAL in WAL mode: a crashed or killed process loses nothing committed and never corrupts the file;
    # only an OS crash / power loss may drop the last transactions. FULL would fsync every call.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def write_transaction(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
    """Run `body` inside BEGIN IMMEDIATE ... COMMIT, retrying the whole transaction on SQLITE_BUSY.

    BEGIN IMMEDIATE takes the write lock before anything is read, so what `body` reads (e.g. the next
    seq) cannot change before it commits. Any exception rolls back: a half-written call never exists.
    """
    deadline = time.monotonic() + WRITE_DEADLINE_S
    delay = 0.005
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(conn)
                conn.execute("COMMIT")
                return result
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.5)
