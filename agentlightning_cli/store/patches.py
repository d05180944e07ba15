"""The agent's patch per episode (migration m007): what it changed in its workspace, as a git patch.

A table of its own rather than a column of `episodes`: episode lists read every episode row, and a patch can be
megabytes. Written once per episode by the rollout (after the harness, before the hidden files go in); read by
`alight inspect` (one episode) and `alight inspect export --format swebench` (predictions).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from agentlightning_cli.store.connection import write_transaction


@dataclass(frozen=True)
class StoredPatch:
    episode_id: str
    patch: bytes | None
    """The patch's exact bytes (b"" when the agent changed nothing); None when it could not be made or kept."""
    files: int
    size: int
    error: str | None
    at: float


class PatchRecords:
    """Mixed into Store: needs `self._conn()`."""

    def _conn(self) -> sqlite3.Connection:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def set_patch(self, episode_id: str, patch: bytes | None, files: int, size: int, error: str | None = None) -> None:
        """Store (or replace, for a redone episode) the episode's patch."""
        row = (episode_id, None if patch is None else sqlite3.Binary(patch), files, size, error, time.time())
        write_transaction(self._conn(), lambda c: c.execute(
            "INSERT OR REPLACE INTO episode_patches (episode_id, patch, files, size, error, at) VALUES (?, ?, ?, ?, ?, ?)",
            row))

    def get_patch(self, episode_id: str) -> StoredPatch | None:
        """None when the episode has no patch recorded (it never ran, or it ran before m007)."""
        row = self._conn().execute(
            "SELECT episode_id, patch, files, size, error, at FROM episode_patches WHERE episode_id = ?",
            (episode_id,)).fetchone()
        if row is None:
            return None
        return StoredPatch(row[0], None if row[1] is None else bytes(row[1]), row[2], row[3], row[4], row[5])
