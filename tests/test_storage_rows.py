"""`execute_rows`: many rows per statement, split at MAX_ROWS, for inserts and deletes."""

from __future__ import annotations

import sqlite3

from olp.storage import execute_rows
from olp.storage.rows import MAX_ROWS


def test_inserts_and_deletes_across_several_statements() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a TEXT, b INTEGER, PRIMARY KEY (a, b))")
    rows = [(f"k{i % 7}", i) for i in range(2 * MAX_ROWS + 201)]
    execute_rows(conn, "INSERT INTO t (a, b)", rows)
    assert conn.execute("SELECT COUNT(*), SUM(b) FROM t").fetchone() == (
        len(rows),
        sum(b for _, b in rows),
    )
    gone = rows[::2]
    execute_rows(conn, "DELETE FROM t WHERE (a, b) IN (", gone, tail=")")
    left = conn.execute("SELECT a, b FROM t ORDER BY b").fetchall()
    assert left == rows[1::2]


def test_no_rows_is_no_statement() -> None:
    conn = sqlite3.connect(":memory:")
    execute_rows(conn, "INSERT INTO nowhere (a)", [])  # the table does not even exist


def test_statements_stay_within_the_connections_parameter_limit() -> None:
    conn = sqlite3.connect(":memory:")
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)  # SQLite before 3.32
    conn.execute("CREATE TABLE t (a, b, c, d, e, f, g, h, i, j)")
    rows = [tuple(range(i, i + 10)) for i in range(MAX_ROWS + 77)]
    execute_rows(conn, "INSERT INTO t (a, b, c, d, e, f, g, h, i, j)", rows)
    assert conn.execute("SELECT COUNT(*), SUM(a) FROM t").fetchone() == (
        len(rows),
        sum(r[0] for r in rows),
    )
