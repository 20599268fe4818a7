"""`olp usage`: what the ledger says was used, and what it cost."""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Sequence
from typing import Any

import click
import orjson

from olp.accounts.ledger_rows import LEDGER_FILE
from olp.accounts.usage_query import (
    GROUPINGS,
    GroupBy,
    UsageRow,
    iso,
    parse_since,
    total,
    usage_report,
)
from olp.cli.common import fail, read_ledger
from olp.config import olp_home

__all__ = ["usage"]

_FORMATS = ("table", "csv", "json")
# Table columns after the group column(s): (header, field in a report row).
_COLUMNS = (
    ("requests", "requests"),
    ("errors", "errors"),
    ("tokens in", "prompt_tokens"),
    ("tokens out", "completion_tokens"),
    ("cached in", "cached_tokens"),
    ("cost", "cost_usd"),
    ("API cost", "api_cost_usd"),
    ("saved", "saved_usd"),
    ("cache hits", "cache_hits"),
)
_USD = {"cost_usd", "api_cost_usd", "saved_usd"}


@click.command()
@click.option(
    "--since",
    default="7d",
    show_default=True,
    help="Start of the period: a duration (30m, 24h, 7d, 2w; m = minutes), 'today', "
    "or a UTC date or time (2026-11-01, 2026-11-01T08:00).",
)
@click.option(
    "--by", type=click.Choice(GROUPINGS), default="key", show_default=True,
    help="Group rows by API key, the provider that answered, its model, or UTC day.",
)  # fmt: skip
@click.option(
    "--format", "fmt", type=click.Choice(_FORMATS), default="table", show_default=True,
    help="table for people; csv and json for scripts.",
)  # fmt: skip
def usage(since: str, by: GroupBy, fmt: str) -> None:
    """Requests, errors, tokens and cost from the usage ledger ($OLP_HOME/ledger.db).

    "cost" is money actually spent (0 on subscriptions); "API cost" is what the same
    tokens cost at API list prices; "saved" is the difference. Costs go to the provider
    that answered. See docs/usage.md.

    \b
    Examples:
      olp usage
      olp usage --since 30d --by provider
      olp usage --since 2026-11-01 --by day --format csv > november.csv
    """
    now = time.time()
    try:
        start = parse_since(since, now)
    except ValueError as exc:
        fail(f"--since: {exc}")
    path = olp_home(os.environ) / LEDGER_FILE
    if not path.exists():
        # Not an error: a fresh install has simply not served anything yet.
        click.echo(f"no usage recorded yet ({path} does not exist)", err=fmt != "table")
        if fmt == "table":
            return
        report = _empty_report(start, by, now)
    else:
        report = read_ledger(path, lambda conn: usage_report(conn, start, by, now))
    if fmt == "json":
        click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    elif fmt == "csv":
        click.echo(_csv(report), nl=False)
    else:
        click.echo(_table(report))


def _csv(report: dict[str, Any]) -> str:
    out = io.StringIO()
    rows: list[dict[str, Any]] = report["rows"]
    header = list(UsageRow("", "").as_dict(report["by"]))
    writer = csv.DictWriter(out, header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _empty_report(start: float, by: GroupBy, now: float) -> dict[str, Any]:
    return {
        "generated_at": now,
        "since": start,
        "by": by,
        "rows": [],
        "totals": total([]).as_dict(None),
    }


def _table(report: dict[str, Any]) -> str:
    by: str = report["by"]
    rows: list[dict[str, Any]] = report["rows"]
    title = f"usage since {iso(report['since'])}, by {by}"
    if not rows:
        return f"{title}\n\nno requests in this period"
    heads = ["key", "name"] if by == "key" else [by]
    fields = ["key", "key_name"] if by == "key" else [by]
    body = [[*(str(r[f]) for f in fields), *_cells(r)] for r in rows]
    totals = report["totals"]
    body.append(["total", *([""] * (len(fields) - 1)), *_cells(totals)])
    lines = [title, "", *_aligned([*heads, *(h for h, _ in _COLUMNS)], body, len(fields))]
    unpriced = totals.get("unpriced", 0)
    if unpriced:
        lines += [
            "",
            f"* {unpriced} request(s) with no known cost, not in the sums: a model with no",
            '  price (add it under "pricing" in config.json), or no usage reported by the',
            "  provider (e.g. the client left mid-answer). See docs/usage.md.",
        ]
    return "\n".join(lines)


def _cells(row: dict[str, Any]) -> list[str]:
    mark = "*" if row.get("unpriced") else ""
    return [
        usd(row[f]) + (mark if f != "saved_usd" else "") if f in _USD else f"{row[f]:,}"
        for _, f in _COLUMNS
    ]


def usd(value: float) -> str:
    """Dollars for a table: cents from $1 up, else four decimals; a cost too small for
    those is shown as one, not as a $0.0000 that reads like "not priced"."""
    if value >= 1 or value == 0:
        return f"${value:,.2f}"
    if 0 < value < 0.00005:
        return "<$0.0001"
    return f"${value:.4f}"


def _aligned(header: Sequence[str], body: Sequence[Sequence[str]], left: int) -> list[str]:
    """Text columns left-aligned, numbers right-aligned, two spaces apart."""
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [line(header), rule, *(line(r) for r in body[:-1]), rule, line(body[-1])]
