"""The cache file's writer thread: one transaction per batch, entries by id."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from olp.cache._disk import DiskWriter, open_cache_db


def _row(
    entry_id: int, key: str, body: bytes, namespace: str = "ns"
) -> tuple[int, str, str, int, float, float, float, bytes]:
    return (entry_id, namespace, key, len(body), 1.0, 2.0, 1.0, body)


def _entries(path: Path) -> dict[int, tuple[str, str, bytes, float]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT id, namespace, key, body, used_at FROM entries").fetchall()
    return {i: (ns, key, body, used) for i, ns, key, body, used in rows}


def test_a_batch_skips_puts_deleted_later_and_keeps_clears_and_touches_in_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache.db"
    conn = open_cache_db(path)
    assert conn is not None
    writer = DiskWriter(conn, window_s=60.0)  # everything below lands in one batch
    try:
        writer.put(_row(1, "old", b"0"))
        writer.put(_row(2, "a", b"1"))
        writer.delete(2)  # put then delete: never written
        writer.put(_row(3, "c", b"3"))
        writer.put(_row(4, "c", b"4"))  # a replacement: a new id, and the old one deleted
        writer.delete(3)
        writer.put(_row(5, "x", b"5", namespace="other"))
        writer.clear("ns")  # drops old and c, written before it
        writer.put(_row(6, "d", b"6"))
        writer.touch([(9.0, 6), (9.0, 99)])  # an id that does not exist: harmless
        writer.delete(98)  # a row that does not exist: harmless
        started = time.monotonic()
        assert writer.flush(timeout=10)
        assert time.monotonic() - started < 5  # a flush does not wait out the window
        assert _entries(path) == {5: ("other", "x", b"5", 1.0), 6: ("ns", "d", b"6", 9.0)}

        writer.put(_row(7, "f", b"7"))
        writer.delete(5)
        writer.put(_row(8, "d", b"8"))  # replaces the row written by the previous batch
        writer.delete(6)
    finally:
        writer.close()  # writes what is pending without waiting out the window
    assert _entries(path) == {7: ("ns", "f", b"7", 1.0), 8: ("ns", "d", b"8", 1.0)}
