"""Embedded storage: SQLite files under $OLP_HOME, opened one careful way."""

from __future__ import annotations

from olp.storage.sqlite import DatabaseError, Migration, explain, open_database

__all__ = ["DatabaseError", "Migration", "explain", "open_database"]
