"""The ledger's records and its SQLite schema (`$OLP_HOME/ledger.db`).

One row per request and one per hop attempt (docs/design.md §8). Never message content: not the
prompt, not the answer, not an upstream error message (those can quote the prompt) —
only names, codes, counts, money and times.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from olp.accounts.pricing import NO_COST, Cost
from olp.ir import Usage
from olp.storage import Migration, execute_rows

__all__ = [
    "LEDGER_FILE",
    "MIGRATIONS",
    "AttemptOutcome",
    "AttemptRecord",
    "RequestRecord",
    "attempt_row",
    "insert_batch",
    "insert_imported",
    "request_row",
    "row_dict",
]

# A file of its own, not the key store's olp.db: the ledger writes four times a second
# under load, and every write would bump olp.db's `data_version`, which the key store
# watches to notice revocations from the CLI; it also keeps the ledger's write lock away
# from key changes and lets the owner archive or delete the ledger alone.
LEDGER_FILE = "ledger.db"

AttemptOutcome = Literal["served", "failed", "skipped", "truncated", "cancelled"]


# Not frozen: two records are made per request, and a frozen dataclass costs ~3x to build.
@dataclass(slots=True)
class RequestRecord:
    """One chat request, as the handler knows it when the response is done.

    `provider`/`model`: the hop that answered (None when none did) — cost and attribution
    go there. `hops`: the X-OLP-Fallback-Hops value. `cache`: hit|miss|bypass.
    `ts`: unix seconds; defaults to when the record is made (the request's end).
    """

    request_id: str
    key_id: str
    key_name: str
    requested_model: str
    provider: str | None
    model: str | None
    status: int
    hops: int = 0
    cache: str = "bypass"
    error_code: str | None = None
    usage: Usage | None = None
    cost: Cost = NO_COST
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    stream: bool = False
    ts: float = field(default_factory=time.time)


@dataclass(slots=True)
class AttemptRecord:
    """One hop's part in a request (the engine's `Attempt`, minus its message)."""

    request_id: str
    hop: int
    provider: str
    model: str
    outcome: AttemptOutcome
    code: str | None = None
    trigger: str | None = None
    latency_ms: float = 0.0
    chain: str = ""
    ts: float = field(default_factory=time.time)


MIGRATIONS = (
    Migration(
        1,
        """
        CREATE TABLE ledger_requests (
            id INTEGER PRIMARY KEY,
            request_id TEXT NOT NULL,
            ts REAL NOT NULL,
            key_id TEXT NOT NULL,
            key_name TEXT NOT NULL,
            requested_model TEXT NOT NULL,
            provider TEXT,
            model TEXT,
            hops INTEGER NOT NULL,
            cache TEXT NOT NULL,
            status INTEGER NOT NULL,
            error_code TEXT,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            cache_write_tokens INTEGER NOT NULL,
            reasoning_tokens INTEGER NOT NULL,
            cost_usd REAL,
            api_cost_usd REAL,
            cost_source TEXT NOT NULL,
            latency_ms REAL NOT NULL,
            ttft_ms REAL,
            stream INTEGER NOT NULL);
        CREATE INDEX ledger_requests_ts ON ledger_requests (ts);
        CREATE INDEX ledger_requests_key_ts ON ledger_requests (key_id, ts);
        CREATE TABLE ledger_attempts (
            id INTEGER PRIMARY KEY,
            request_id TEXT NOT NULL,
            ts REAL NOT NULL,
            chain TEXT NOT NULL,
            hop INTEGER NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            outcome TEXT NOT NULL,
            code TEXT,
            trigger TEXT,
            latency_ms REAL NOT NULL);
        CREATE INDEX ledger_attempts_ts ON ledger_attempts (ts);
        CREATE INDEX ledger_attempts_request ON ledger_attempts (request_id)
    """,
    ),
    # Every query (usage_query.py, spend_trend.py, and through them `olp usage` and the
    # dashboard) selects a time range: only the two `ts` indexes serve one. The other two
    # cost the writer thread a B-tree insert per row for nothing (about a third of its
    # CPU per request). Joining attempts to their request by hand still works, by a scan;
    # `CREATE INDEX ... ON ledger_attempts (request_id)` brings it back if ever needed.
    Migration(
        2,
        """
        DROP INDEX IF EXISTS ledger_requests_key_ts;
        DROP INDEX IF EXISTS ledger_attempts_request
    """,
    ),
    # Attempts by time, unserved only: nearly every attempt is served, and no query reads
    # served attempts by time, so the writer skips a B-tree insert per request. (Nothing
    # reads it now; a shipped migration stays, as databases already carry it.)
    Migration(
        3,
        """
        DROP INDEX IF EXISTS ledger_attempts_ts;
        CREATE INDEX ledger_attempts_unserved_ts ON ledger_attempts (ts)
            WHERE outcome != 'served'
    """,
    ),
    # Rows taken in from another proxy's usage log (`olp migrate-from-ocp`) say where
    # from; OLP's own rows leave it NULL.
    Migration(4, "ALTER TABLE ledger_requests ADD COLUMN imported_from TEXT"),
)

_REQUEST_COLUMNS = (
    "request_id", "ts", "key_id", "key_name", "requested_model", "provider", "model",
    "hops", "cache", "status", "error_code", "prompt_tokens", "completion_tokens",
    "cached_tokens", "cache_write_tokens", "reasoning_tokens", "cost_usd", "api_cost_usd",
    "cost_source", "latency_ms", "ttft_ms", "stream",
)  # fmt: skip
_ATTEMPT_COLUMNS = (
    "request_id", "ts", "chain", "hop", "provider", "model", "outcome", "code", "trigger",
    "latency_ms",
)  # fmt: skip


def _insert_rows(
    conn: sqlite3.Connection, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> None:
    execute_rows(conn, f"INSERT INTO {table} ({', '.join(columns)})", rows)


def request_row(rec: RequestRecord) -> tuple[Any, ...]:
    usage = rec.usage or Usage()
    return (
        rec.request_id, rec.ts, rec.key_id, rec.key_name, rec.requested_model, rec.provider,
        rec.model, rec.hops, rec.cache, rec.status, rec.error_code, usage.prompt_tokens,
        usage.completion_tokens, usage.cached_prompt_tokens, usage.cache_write_tokens,
        usage.reasoning_tokens, rec.cost.cost_usd, rec.cost.api_cost_usd, rec.cost.source,
        rec.latency_ms, rec.ttft_ms, int(rec.stream),
    )  # fmt: skip


def attempt_row(rec: AttemptRecord) -> tuple[Any, ...]:
    return (
        rec.request_id, rec.ts, rec.chain, rec.hop, rec.provider, rec.model, rec.outcome,
        rec.code, rec.trigger, rec.latency_ms,
    )  # fmt: skip


def row_dict(rec: RequestRecord | AttemptRecord) -> dict[str, Any]:
    """A record as the column → value mapping it is stored as (for the spill file)."""
    if isinstance(rec, RequestRecord):
        return {
            "table": "ledger_requests",
            **dict(zip(_REQUEST_COLUMNS, request_row(rec), strict=True)),
        }
    return {
        "table": "ledger_attempts",
        **dict(zip(_ATTEMPT_COLUMNS, attempt_row(rec), strict=True)),
    }


def insert_batch(
    conn: sqlite3.Connection,
    requests: Sequence[RequestRecord],
    attempts: Sequence[AttemptRecord],
) -> None:
    """Write both kinds of rows in one transaction: all of them, or none."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if requests:
            _insert_rows(
                conn, "ledger_requests", _REQUEST_COLUMNS, [request_row(r) for r in requests]
            )
        if attempts:
            _insert_rows(
                conn, "ledger_attempts", _ATTEMPT_COLUMNS, [attempt_row(a) for a in attempts]
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def insert_imported(
    conn: sqlite3.Connection, origin: str, requests: Sequence[RequestRecord]
) -> int:
    """Add request rows taken from another proxy's log, marked `imported_from = origin`;
    a row whose request id that origin already brought in is skipped. Returns the number
    added. One transaction: all of them, or none."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        known = {
            row[0]
            for row in conn.execute(
                "SELECT request_id FROM ledger_requests WHERE imported_from = ?", (origin,)
            )
        }
        rows = [(*request_row(r), origin) for r in requests if r.request_id not in known]
        if rows:
            _insert_rows(conn, "ledger_requests", (*_REQUEST_COLUMNS, "imported_from"), rows)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(rows)
