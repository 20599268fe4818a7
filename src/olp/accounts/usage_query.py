"""Read the ledger: usage grouped by key, provider, model or day; per-key counters for the
limits at start (`limit_seeds`); cache outcomes per key.

Everything here is a plain blocking SQLite read: the server runs it in a worker thread.
Days and months are UTC.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from olp.accounts.limits import UsageSeed
from olp.storage import DatabaseError

__all__ = [
    "GROUPINGS",
    "CacheOutcomes",
    "GroupBy",
    "UsageRow",
    "cache_outcomes",
    "connect_reader",
    "iso",
    "limit_seeds",
    "parse_since",
    "read_limit_seeds",
    "read_window_rows",
    "total",
    "usage_by",
    "usage_report",
    "window_rows",
]

GroupBy = Literal["key", "provider", "model", "day"]
GROUPINGS: tuple[str, ...] = get_args(GroupBy)
_DAY_S = 86_400
_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": _DAY_S, "w": 7 * _DAY_S}
_RELATIVE = re.compile(r"^(\d+)\s*(s|m|min|h|d|w)$")
_GROUP_SQL = {
    "key": "key_id",
    "provider": "COALESCE(provider, '(none)')",
    "model": "COALESCE(model, '(none)')",
    "day": "strftime('%Y-%m-%d', ts, 'unixepoch')",
}
_USD_DIGITS = 6


def parse_since(text: str, now: float) -> float:
    """`30m`, `24h`, `7d`, `2w`, `today`, `2026-11-01` or an ISO time → unix seconds (UTC).

    Never before 1970: the ledger holds nothing older, and `9999999999d` means "all of it".
    """
    value = text.strip().lower()
    relative = _RELATIVE.match(value)
    if relative:
        return max(0.0, now - int(relative[1]) * _UNITS[relative[2]])
    if value == "today":
        return now - now % _DAY_S
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"cannot read {text!r} as a time: use a duration (30m, 24h, 7d, 2w), "
            "'today', or a UTC date or time (2026-11-01, 2026-11-01T08:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp())


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def connect_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection to a ledger the server (or `Ledger`) has already created."""
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA query_only = 1")
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot read the usage ledger {path}: {exc}") from exc
    return conn


@dataclass(frozen=True, slots=True)
class UsageRow:
    group: str
    label: str  # the key's name when grouped by key; else the group itself
    requests: int = 0
    errors: int = 0  # HTTP status >= 400
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0  # real money (0 for subscriptions)
    api_cost_usd: float = 0.0  # at API list prices
    saved_usd: float = 0.0  # api_cost - cost: what subscriptions saved
    cache_hits: int = 0
    unpriced: int = 0  # requests whose price OLP does not know (not in the sums)

    def as_dict(self, by: GroupBy | None) -> dict[str, Any]:
        data = asdict(self)
        group, label = data.pop("group"), data.pop("label")
        for name in ("cost_usd", "api_cost_usd", "saved_usd"):
            data[name] = round(data[name], _USD_DIGITS)
        if by is None:
            return data
        head: dict[str, Any] = {by: group}
        if by == "key":
            head["key_name"] = label
        return {**head, **data}


_USAGE_SQL = """
    SELECT {group} AS grp, MAX(key_name), COUNT(*), SUM(status >= 400),
        SUM(prompt_tokens), SUM(completion_tokens), SUM(cached_tokens),
        TOTAL(cost_usd), TOTAL(api_cost_usd),
        TOTAL(CASE WHEN cost_usd IS NOT NULL AND api_cost_usd IS NOT NULL
                   THEN api_cost_usd - cost_usd ELSE 0 END),
        SUM(cache = 'hit'), SUM(cost_source = 'unknown')
    FROM ledger_requests WHERE ts >= ? GROUP BY grp ORDER BY {order}
"""


def usage_by(conn: sqlite3.Connection, since: float, by: GroupBy) -> list[UsageRow]:
    order = "grp" if by == "day" else "COUNT(*) DESC, grp"
    sql = _USAGE_SQL.format(group=_GROUP_SQL[by], order=order)
    rows = _query(conn, sql, (since,))
    return [
        UsageRow(str(grp), str(name) if by == "key" else str(grp), *map(_num, rest))
        for grp, name, *rest in rows
    ]


def total(rows: Sequence[UsageRow]) -> UsageRow:
    sums = [sum(getattr(r, f.name) for r in rows) for f in fields(UsageRow)[2:]]
    return UsageRow("total", "total", *sums)


def usage_report(conn: sqlite3.Connection, since: float, by: GroupBy, now: float) -> dict[str, Any]:
    """The JSON document `olp usage --format json` and the management endpoint return.

    Times are unix seconds, like the other management endpoints.
    """
    rows = usage_by(conn, since, by)
    return {
        "generated_at": now,
        "since": since,
        "by": by,
        "rows": [r.as_dict(by) for r in rows],
        "totals": total(rows).as_dict(None),
    }


@dataclass(frozen=True, slots=True)
class CacheOutcomes:
    """One key's answered requests (status < 400) by what the cache did for them."""

    key_id: str  # also the key's cache namespace
    key_name: str
    hits: int
    misses: int  # answered by the upstream after a lookup (alone or shared in flight)
    bypasses: int  # no-cache, no-store, `cacheable: false`, or the cache off


def cache_outcomes(conn: sqlite3.Connection, since: float) -> list[CacheOutcomes]:
    """Per key, from `since` on. Refused and failed requests are left out: the cache
    never answered them, and a refusal never even looked."""
    rows = _query(
        conn,
        "SELECT key_id, MAX(key_name), SUM(cache = 'hit'), SUM(cache = 'miss'), "
        "SUM(cache = 'bypass') FROM ledger_requests WHERE ts >= ? AND status < 400 "
        "GROUP BY key_id ORDER BY key_id",
        (since,),
    )
    return [CacheOutcomes(str(key), str(name or ""), *map(_num, rest)) for key, name, *rest in rows]


# Refused before `LimitKeeper.admit` counted them: not part of a key's allowance.
_NOT_ADMITTED = (
    "auth_required", "invalid_api_key", "invalid_request_error", "request_too_large",
    "unsupported_media_type", "request_timeout", "model_not_found", "model_not_allowed",
    "key_limit_exceeded",
)  # fmt: skip
_ADMITTED_SQL = f"COALESCE(error_code, '') NOT IN ({', '.join(repr(c) for c in _NOT_ADMITTED)})"


def limit_seeds(conn: sqlite3.Connection, now: float) -> list[UsageSeed]:
    """Per key: today's requests and tokens, this month's API-equivalent cost, the
    last minute's request times and the requests of each of the 29 days before today
    (UTC) — what `LimitKeeper.seed()` takes at start.

    Unpriced requests add nothing to the month's cost (their price is unknown).
    """
    day = now - now % _DAY_S
    month = datetime.fromtimestamp(now, UTC).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0
    )
    params = {"day": day, "month": month.timestamp(), "minute": now - 60, "now": now}
    params["since"] = day - 29 * _DAY_S
    totals = _query(
        conn,
        f"""SELECT key_id, SUM(ts >= :day),
               TOTAL(CASE WHEN ts >= :day THEN prompt_tokens + completion_tokens END),
               TOTAL(api_cost_usd)
           FROM ledger_requests WHERE ts >= :month AND ts <= :now AND {_ADMITTED_SQL}
           GROUP BY key_id""",
        params,
    )
    recent: dict[str, list[float]] = {}
    for key, ts in _query(
        conn,
        f"""SELECT key_id, ts FROM ledger_requests
           WHERE ts > :minute AND ts <= :now AND {_ADMITTED_SQL} ORDER BY ts""",
        params,
    ):
        recent.setdefault(key, []).append(float(ts))
    earlier: dict[str, list[tuple[int, int]]] = {}
    for key, day_number, count in _query(
        conn,
        f"""SELECT key_id, CAST(ts / {_DAY_S} AS INTEGER), COUNT(*) FROM ledger_requests
           WHERE ts >= :since AND ts < :day AND {_ADMITTED_SQL} GROUP BY 1, 2""",
        params,
    ):
        earlier.setdefault(key, []).append((int(day_number), int(count)))
    return [
        UsageSeed(
            key_id=key,
            requests_today=int(requests or 0),
            tokens_today=int(tokens),
            usd_month=float(usd),
            recent_requests=tuple(recent.get(key, ())),
            earlier_days=tuple(earlier.pop(key, ())),
        )
        for key, requests, tokens, usd in totals
    ] + [UsageSeed(key_id=key, earlier_days=tuple(days)) for key, days in earlier.items()]


WindowRow = tuple[str, str, int | None, float]  # provider, key id, tokens, time


def window_rows(conn: sqlite3.Connection, since: float, now: float) -> list[WindowRow]:
    """(provider, key id, tokens, time) of each answer a provider gave itself since
    `since`, oldest first: what `WindowUse.seed()` takes at start."""
    rows = _query(
        conn,
        """SELECT provider, key_id, prompt_tokens + completion_tokens, ts FROM ledger_requests
           WHERE ts >= :since AND ts <= :now AND provider IS NOT NULL AND provider != 'none'
             AND status < 400 AND cache != 'hit' ORDER BY ts""",
        {"since": since, "now": now},
    )
    return [(str(p), str(k), int(t) if t else None, float(ts)) for p, k, t, ts in rows]


def read_window_rows(
    path: Path, since: float, now: float
) -> list[tuple[str, str, int | None, float]]:
    """`window_rows` from the ledger file at `path` (none if there is no ledger yet)."""
    if not path.exists():
        return []
    conn = connect_reader(path)
    try:
        return window_rows(conn, since, now)
    finally:
        conn.close()


def read_limit_seeds(path: Path, now: float) -> list[UsageSeed]:
    """`limit_seeds` from the ledger file at `path` (none if there is no ledger yet)."""
    if not path.exists():
        return []
    conn = connect_reader(path)
    try:
        return limit_seeds(conn, now)
    finally:
        conn.close()


def _query(conn: sqlite3.Connection, sql: str, params: Any) -> list[Any]:
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot read the usage ledger: {exc}") from exc


def _num(value: Any) -> Any:
    # SUM over no rows (or only NULLs) is NULL; the row fields want numbers.
    return 0 if value is None else value
