"""Quota state on disk (`$OLP_HOME/quota.db`), so cooldowns and counters survive a restart.

The server saves what changed, looking every second, and at shutdown (off the event loop):
an idle server writes nothing. `olp quota` reads the same file, and `olp providers reset
NAME` leaves a reset request the server applies within a second or two (or at its next
start).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from olp.storage import Migration, open_database

__all__ = ["QuotaStore"]

_MIGRATIONS = (
    Migration(
        1,
        """
        CREATE TABLE provider_state (
            provider TEXT PRIMARY KEY, data TEXT NOT NULL, updated REAL NOT NULL);
        CREATE TABLE reset_requests (
            id INTEGER PRIMARY KEY, provider TEXT NOT NULL, requested REAL NOT NULL)
    """,
    ),
)


class QuotaStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn = open_database(path, _MIGRATIONS, check_same_thread=False)

    def load(self) -> tuple[dict[str, dict[str, Any]], float | None]:
        """State per provider, and when it was last saved."""
        rows = self._conn.execute("SELECT provider, data, updated FROM provider_state").fetchall()
        state = {provider: orjson.loads(data) for provider, data, _ in rows}
        return state, max((updated for *_, updated in rows), default=None)

    def save(self, state: Mapping[str, Mapping[str, Any]]) -> None:
        now = time.time()
        with _transaction(self._conn):
            self._conn.execute("DELETE FROM provider_state")
            self._conn.executemany(
                "INSERT INTO provider_state VALUES (?, ?, ?)",
                [(p, orjson.dumps(data).decode(), now) for p, data in state.items()],
            )

    def request_reset(self, provider: str) -> None:
        """Ask the server to end `provider`'s cooldowns; also clear them on disk now."""
        with _transaction(self._conn):
            self._conn.execute(
                "INSERT INTO reset_requests (provider, requested) VALUES (?, ?)",
                (provider, time.time()),
            )
            row = self._conn.execute(
                "SELECT data FROM provider_state WHERE provider = ?", (provider,)
            ).fetchone()
            if row:
                data = orjson.loads(row[0])
                data["cooldowns"] = []
                self._conn.execute(
                    "UPDATE provider_state SET data = ? WHERE provider = ?",
                    (orjson.dumps(data).decode(), provider),
                )

    def take_resets(self) -> list[str]:
        """Pending reset requests, removed as they are returned."""
        # Asked every second: a read, and a write transaction only when there is one.
        if self._conn.execute("SELECT 1 FROM reset_requests LIMIT 1").fetchone() is None:
            return []
        with _transaction(self._conn):
            rows = self._conn.execute("SELECT provider FROM reset_requests").fetchall()
            self._conn.execute("DELETE FROM reset_requests")
        return [provider for (provider,) in rows]

    def close(self) -> None:
        self._conn.close()


class _transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        self._conn.execute("COMMIT" if kind is None else "ROLLBACK")
