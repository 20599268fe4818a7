"""Embedded storage: SQLite files under $OLP_HOME, opened one careful way."""

from __future__ import annotations

from olp.storage.private import open_private, private_dir, private_file, tighten_home
from olp.storage.rows import execute_rows
from olp.storage.sqlite import DatabaseError, Migration, explain, open_database

__all__ = [
    "DatabaseError",
    "Migration",
    "execute_rows",
    "explain",
    "open_database",
    "open_private",
    "private_dir",
    "private_file",
    "tighten_home",
]
