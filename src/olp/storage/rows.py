"""Many rows in one SQLite statement: `INSERT … VALUES (…), (…), …` and its kin.

`executemany` steps SQLite once per row, and Python's sqlite3 releases and retakes the GIL
around every step: a writer thread doing that under load hands the GIL back and forth with
the event loop hundreds of times per batch, and the switching costs more than the writes
(the benchmark measured it). One statement of many value tuples is one step.

Statements come in a few fixed sizes (1,024, 256, 64, 16, 4 and 1 rows), so that sqlite3's
statement cache keeps each one compiled: compiling a 300-row statement for every batch
cost more than the inserts themselves (measured on the ledger's 22 columns: 7.0 µs/row
with a statement per batch size, 3.2 with the fixed sizes, 4.0 with `executemany`).
The largest is as large as it is because each statement is a GIL hand-off: against a
largest size of 256, under load the ledger's writer used 30 % less CPU per request and
took the GIL from the event loop a quarter as often.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_ROWS", "execute_rows"]

# The statement sizes, largest first. A statement binds rows × width parameters: a size
# over the connection's limit (32,766 since SQLite 3.32, 999 before) is skipped.
_SIZES = (1024, 256, 64, 16, 4, 1)
MAX_ROWS = _SIZES[0]


@functools.lru_cache(maxsize=64)
def _statement(head: str, width: int, rows: int, tail: str) -> str:
    one = "(" + ", ".join("?" * width) + ")"
    return f"{head} VALUES " + ", ".join([one] * rows) + tail


def execute_rows(
    conn: sqlite3.Connection,
    head: str,
    rows: Sequence[Sequence[Any]],
    *,
    tail: str = "",
) -> None:
    """Run `{head} VALUES (?, …), (?, …), …{tail}` for `rows`, in a few fixed sizes.

    `head` is e.g. `INSERT INTO t (a, b)`; every row has the same width. `tail` closes
    what `head` opened (a `DELETE … WHERE (a, b) IN (VALUES …)` needs `)`).
    """
    if not rows:
        return
    width = len(rows[0])
    most = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width
    at = 0
    for size in _SIZES:
        if size > most and size > 1:
            continue
        sql = _statement(head, width, size, tail)
        while len(rows) - at >= size:
            conn.execute(sql, list(itertools.chain.from_iterable(rows[at : at + size])))
            at += size
