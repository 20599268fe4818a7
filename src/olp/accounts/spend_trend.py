"""Spend per key and per provider, day by day, for the dashboard's 30-day chart.

A blocking SQLite read of the ledger (the server runs it in a worker thread). Days are
UTC and the last one is today, so the answer always has exactly `days` buckets, empty
days included.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from olp.accounts.usage_query import iso
from olp.storage import DatabaseError

__all__ = ["DAY_S", "spend_trend"]

DAY_S = 86_400
_USD_DIGITS = 6
_SQL = """
    SELECT CAST((ts - :start) / 86400 AS INTEGER) AS day, {group} AS grp, MAX(key_name),
        COUNT(*), TOTAL(cost_usd), TOTAL(api_cost_usd), SUM(cache = 'hit'),
        SUM(cost_source = 'unknown')
    FROM ledger_requests WHERE ts >= :start AND ts < :end
    GROUP BY day, grp
"""
_GROUPS = {"key": "key_id", "provider": "COALESCE(provider, '(none)')"}


def spend_trend(conn: sqlite3.Connection, now: float, days: int = 30) -> dict[str, Any]:
    """{days: [ISO dates], by_key: [...], by_provider: [...]}; series oldest day first.

    Each series: its totals and per-day `requests`, `cost_usd` (money spent) and
    `api_cost_usd` (what the same requests cost at API prices).
    """
    start = now - now % DAY_S - (days - 1) * DAY_S
    params = {"start": start, "end": start + days * DAY_S}
    return {
        "start": start,
        "days": [iso(start + i * DAY_S)[:10] for i in range(days)],
        "by_key": _series(conn, "key", params, days),
        "by_provider": _series(conn, "provider", params, days),
    }


def _series(
    conn: sqlite3.Connection, by: str, params: dict[str, float], days: int
) -> list[dict[str, Any]]:
    series: dict[str, dict[str, Any]] = {}
    try:
        rows = conn.execute(_SQL.format(group=_GROUPS[by]), params).fetchall()
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot read the usage ledger: {exc}") from exc
    for day, group, key_name, requests, cost, api_cost, hits, unpriced in rows:
        entry = series.get(group)
        if entry is None:
            entry = series[group] = _empty(by, str(group), days)
        if by == "key":
            entry["key_name"] = key_name
        entry["requests"][day] += requests
        entry["cost_usd"][day] += cost
        entry["api_cost_usd"][day] += api_cost
        entry["cache_hits"] += hits or 0
        entry["unpriced"] += unpriced or 0
    for entry in series.values():
        for name in ("cost_usd", "api_cost_usd"):
            entry[name] = [round(v, _USD_DIGITS) for v in entry[name]]
            entry[f"total_{name}"] = round(sum(entry[name]), _USD_DIGITS)
        entry["total_requests"] = sum(entry["requests"])
    return sorted(series.values(), key=lambda e: (-e["total_api_cost_usd"], e[by]))


def _empty(by: str, group: str, days: int) -> dict[str, Any]:
    return {
        by: group,
        "requests": [0] * days,
        "cost_usd": [0.0] * days,
        "api_cost_usd": [0.0] * days,
        "cache_hits": 0,
        "unpriced": 0,
    }
