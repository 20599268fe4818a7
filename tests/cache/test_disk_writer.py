"""The cache file's writer thread: one transaction per batch, only the last op per entry."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from olp.cache._disk import DiskWriter, open_cache_db


def _row(
    key: str, body: bytes, namespace: str = "ns"
) -> tuple[str, str, int, float, float, float, bytes]:
    return (namespace, key, len(body), 1.0, 2.0, 1.0, body)


def _entries(path: Path) -> dict[tuple[str, str], tuple[bytes, float]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT namespace, key, body, used_at FROM entries").fetchall()
    return {(ns, key): (body, used) for ns, key, body, used in rows}


def test_a_batch_keeps_each_entrys_last_write_in_order_with_clears_and_touches(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache.db"
    conn = open_cache_db(path)
    assert conn is not None
    writer = DiskWriter(conn, window_s=60.0)  # everything below lands in one batch
    try:
        writer.put(_row("old", b"0"))
        writer.put(_row("a", b"1"))
        writer.delete("ns", "a")  # put then delete: gone
        writer.delete("ns", "b")
        writer.put(_row("b", b"2"))  # delete then put: present, the put's row
        writer.put(_row("c", b"3"))
        writer.put(_row("c", b"4"))  # the last put wins
        writer.put(_row("x", b"5", namespace="other"))
        writer.clear("ns")  # drops old, b and c written before it
        writer.put(_row("d", b"6"))
        writer.touch([(9.0, "ns", "d"), (9.0, "ns", "missing")])
        writer.delete("ns", "e")  # a row that does not exist: harmless
        started = time.monotonic()
        assert writer.flush(timeout=10)
        assert time.monotonic() - started < 5  # a flush does not wait out the window
        assert _entries(path) == {("other", "x"): (b"5", 1.0), ("ns", "d"): (b"6", 9.0)}

        writer.put(_row("f", b"7"))
        writer.delete("other", "x")
        writer.put(_row("d", b"8"))  # replaces the row written by the previous batch
    finally:
        writer.close()  # writes what is pending without waiting out the window
    assert _entries(path) == {("ns", "d"): (b"8", 1.0), ("ns", "f"): (b"7", 1.0)}
