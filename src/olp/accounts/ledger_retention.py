"""Ledger retention: rows older than `ledger.retention_days` go, a chunk at a time.

The ledger's writer thread calls `Retention.run_due` after each round of writes. When a
pass is due (at start, after a change of `retention_days`, then every `every_s`), each
call deletes at most `chunk_rows` rows of each table, in one short transaction, so that
a first pass over a years-old ledger never holds up the rows being written: it goes on at
the writer's next round until nothing older is left. The file does not shrink; SQLite
reuses the freed pages for new rows, so it stops growing once the oldest rows go as fast
as new ones come.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from olp.observability import event_logger

__all__ = ["Retention"]

log = event_logger("olp.ledger")

_DAY_S = 86_400.0
# Request rows by their `ts` index. Attempt rows have none (it would cost the writer a
# B-tree insert per row): they are deleted from the oldest id on, which is their order of
# writing, and so of `ts`, give or take a batch.
_DELETE_REQUESTS = (
    "DELETE FROM ledger_requests WHERE id IN "
    "(SELECT id FROM ledger_requests WHERE ts < ? ORDER BY ts LIMIT ?)"
)
_DELETE_ATTEMPTS = (
    "DELETE FROM ledger_attempts WHERE id IN "
    "(SELECT id FROM ledger_attempts ORDER BY id LIMIT ?) AND ts < ?"
)


class Retention:
    """When to delete old ledger rows, and the deleting (on the writer's connection)."""

    def __init__(
        self,
        days: int,
        *,
        every_s: float = 3600.0,
        chunk_rows: int = 5000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._days = days
        self._every_s = every_s
        self._chunk_rows = chunk_rows
        self._clock = clock
        self._next = 0.0  # when the next pass starts: at once
        self._deleted = 0  # by the pass under way

    @property
    def days(self) -> int:
        return self._days

    @days.setter
    def days(self, days: int) -> None:
        """A config reload: a new limit applies at the writer's next round."""
        if days != self._days:
            self._days = days
            self._next = 0.0

    def run_due(self, conn: sqlite3.Connection) -> None:
        """Delete one chunk of rows past the retention, if a pass is due (writer thread)."""
        now = self._clock()
        if not self._days or now < self._next:
            return
        cutoff = now - self._days * _DAY_S
        try:
            requests, attempts = self._delete_chunk(conn, cutoff)
        except sqlite3.Error as exc:  # locked, full, damaged: the rows wait for the next pass
            log.warning("ledger_prune_failed", error=str(exc))
            self._next = now + self._every_s
            return
        self._deleted += requests + attempts
        if max(requests, attempts) >= self._chunk_rows:
            return  # more may be left: the next round goes on
        if self._deleted:
            log.info("ledger_pruned", rows=self._deleted, retention_days=self._days)
        self._deleted = 0
        self._next = now + self._every_s

    def _delete_chunk(self, conn: sqlite3.Connection, cutoff: float) -> tuple[int, int]:
        """(request rows, attempt rows) deleted, in one transaction."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            requests = conn.execute(_DELETE_REQUESTS, (cutoff, self._chunk_rows)).rowcount
            attempts = conn.execute(_DELETE_ATTEMPTS, (self._chunk_rows, cutoff)).rowcount
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return requests, attempts
