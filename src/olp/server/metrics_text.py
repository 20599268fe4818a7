"""Prometheus text exposition (format 0.0.4) of OLP's metrics, written by hand.

Why not `prometheus_client` at runtime: its registry takes a lock on every update, and
OLP's counters are plain dicts touched on the event loop's thread; writing the text
format is a page of code and keeps the hot path at a few dict operations. The tests
check the output with `prometheus_client`'s own parser.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from olp.server.context import AppContext
from olp.server.dashboard_api import cache_panel
from olp.server.metrics import Histogram, Metrics
from olp.server.status_api import provider_entry

__all__ = ["CONTENT_TYPE", "render"]

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
_STATES = ("ok", "cooling_down", "soft_limited", "unhealthy", "disabled")
Labels = Iterable[tuple[str, str]]


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: Labels, value: float) -> None:
        pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
        head = f"{name}{{{pairs}}}" if pairs else name
        self.lines.append(f"{head} {_number(value)}")

    def one(self, name: str, kind: str, help_text: str, value: float) -> None:
        self.family(name, kind, help_text)
        self.sample(name, (), value)

    def labelled(
        self, name: str, kind: str, help_text: str, label: str, values: Mapping[str, float]
    ) -> None:
        self.family(name, kind, help_text)
        for key, value in sorted(values.items()):
            self.sample(name, ((label, key),), value)

    def histogram(self, name: str, help_text: str, label: str, hist: Histogram) -> None:
        self.family(name, "histogram", help_text)
        bounds = [*(_number(b) for b in hist.bounds), "+Inf"]
        for (value,), (counts, total) in sorted(hist.series.items()):
            running = 0
            for bound, count in zip(bounds, counts, strict=True):
                running += count
                self.sample(f"{name}_bucket", ((label, value), ("le", bound)), running)
            self.sample(f"{name}_sum", ((label, value),), total[0])
            self.sample(f"{name}_count", ((label, value),), running)

    def text(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


def render(ctx: AppContext) -> bytes:
    out = _Text()
    _requests(out, ctx.metrics)
    _providers(out, ctx)
    _cache_and_ledger(out, ctx)
    return out.text()


def _requests(out: _Text, m: Metrics) -> None:
    out.family(
        "olp_requests_total",
        "counter",
        "Chat requests finished, by provider that answered, model, HTTP status and cache.",
    )
    for (provider, model, status, cache), n in sorted(m.requests.items()):
        labels = (("provider", provider), ("model", model), ("status", status), ("cache", cache))
        out.sample("olp_requests_total", labels, n)
    out.histogram(
        "olp_request_duration_seconds", "Chat request latency, whole answer.", "provider", m.latency
    )
    out.histogram(
        "olp_time_to_first_token_seconds",
        "Time from the request to the first content byte sent to the client.",
        "provider",
        m.ttft,
    )
    out.family(
        "olp_hop_attempts_total",
        "counter",
        "Hops of fallback chains, by provider, outcome (served, failed, skipped, truncated) "
        "and failure code.",
    )
    for (provider, outcome, code), n in sorted(m.hops.items()):
        hop = (("provider", provider), ("outcome", outcome), ("code", code))
        out.sample("olp_hop_attempts_total", hop, n)
    out.one(
        "olp_fallbacks_total", "counter", "Requests in which at least one hop failed.", m.fallbacks
    )
    out.labelled(
        "olp_fallback_saves_total",
        "counter",
        "Requests answered by a later hop after an earlier one failed.",
        "provider",
        m.fallback_saves,
    )
    out.labelled(
        "olp_errors_total", "counter", "Requests answered with an error, by code.", "code", m.errors
    )
    out.one("olp_active_requests", "gauge", "Chat requests in progress.", m.active_requests)
    out.one(
        "olp_active_streams", "gauge", "Streaming chat responses in progress.", m.active_streams
    )


def _providers(out: _Text, ctx: AppContext) -> None:
    now = ctx.cooldowns.now()
    entries = [provider_entry(ctx, name, now) for name in ctx.config.providers]
    out.family("olp_build_info", "gauge", "Always 1; the version is a label.")
    out.sample("olp_build_info", (("version", ctx.version),), 1)
    out.one("olp_start_time_seconds", "gauge", "When OLP started (unix time).", ctx.started_at)
    spawns = {e["name"]: e["active_spawns"] for e in entries if e["active_spawns"] is not None}
    out.labelled(
        "olp_cli_active_spawns", "gauge", "CLI child processes running.", "provider", spawns
    )
    _warm(out, entries)
    out.labelled(
        "olp_provider_queued_requests_total",
        "counter",
        "Requests that waited for a free max_concurrent slot before they were sent.",
        "provider",
        _queued(ctx),
    )
    out.family("olp_provider_state", "gauge", "1 for the provider's current state.")
    for e in entries:
        for state in _STATES:
            labels = (("provider", e["name"]), ("state", state))
            out.sample("olp_provider_state", labels, 1 if e["state"] == state else 0)
    out.family(
        "olp_provider_cooldown_seconds",
        "gauge",
        "Seconds until a cooldown ends; model is empty when the whole provider cools down.",
    )
    for e in entries:
        for c in e["cooldowns"]:
            cooling = (("provider", e["name"]), ("model", c["model"] or ""))
            out.sample("olp_provider_cooldown_seconds", cooling, c["remaining_s"])
    out.family(
        "olp_quota_utilisation_ratio",
        "gauge",
        "Share of a provider's quota window used (0..1), with where the figure came from.",
    )
    for window, value in _quota_rows(ctx):
        out.sample("olp_quota_utilisation_ratio", window, value)


# (metric, type, help, field of the status page's `warm` entry)
_WARM_METRICS = (
    ("olp_cli_warm_waiting", "gauge", "CLI processes started ahead, waiting for a prompt.",
     "waiting"),
    ("olp_cli_warm_size", "gauge", "Most CLI processes kept waiting (the warm setting).", "size"),
    ("olp_cli_warm_hits_total", "counter", "Requests served by a waiting CLI process.", "hits"),
    ("olp_cli_warm_misses_total", "counter",
     "Requests that found no waiting CLI process and started one.", "misses"),
    ("olp_cli_cold_start_ms", "gauge",
     "Median ms from starting a CLI for a request to the first content of its answer.",
     "cold_start_ms_p50"),
    ("olp_cli_warm_start_ms", "gauge",
     "Median ms from giving a waiting CLI its prompt to the first content of its answer.",
     "warm_start_ms_p50"),
)  # fmt: skip


def _warm(out: _Text, entries: list[dict[str, Any]]) -> None:
    """The warm pools (CLI providers that keep one); a median not yet known is left out."""
    pools = {e["name"]: e["warm"] for e in entries if e["warm"] is not None}
    for name, kind, help_text, key in _WARM_METRICS:
        values = {p: stats[key] for p, stats in pools.items() if stats[key] is not None}
        out.labelled(name, kind, help_text, "provider", values)


def _queued(ctx: AppContext) -> dict[str, float]:
    """Per provider that counts them (HTTP providers), duck-typed like the CLI spawns:
    the server does not depend on one provider type's internals."""
    counts: dict[str, float] = {}
    for name, provider in ctx.providers.items():
        queued = getattr(provider, "queued_requests", None)
        if isinstance(queued, int):
            counts[name] = queued
    return counts


def _quota_rows(ctx: AppContext) -> list[tuple[Labels, float]]:
    rows: list[tuple[Labels, float]] = []
    for name in ctx.config.providers:
        q = ctx.quota.status(name)
        for window, figure in (
            ("five_hour", q.five_hour_utilisation),
            ("credit_pool", q.credit_pool_utilisation),
        ):
            if figure.value is not None:
                labels = (("provider", name), ("window", window), ("source", figure.source))
                rows.append((labels, figure.value))
    return rows


def _cache_and_ledger(out: _Text, ctx: AppContext) -> None:
    cache = cache_panel(ctx)
    out.one("olp_cache_hits_total", "counter", "Answers served from the cache.", cache["hits"])
    out.one(
        "olp_cache_misses_total", "counter", "Cache lookups that found nothing.", cache["misses"]
    )
    out.one(
        "olp_cache_shared_total",
        "counter",
        "Requests that joined an identical request already in flight (singleflight).",
        cache["shared"],
    )
    out.one("olp_cache_entries", "gauge", "Answers stored in the cache.", cache["entries"])
    out.one("olp_cache_bytes", "gauge", "Bytes of stored answers.", cache["bytes"])
    ledger = ctx.ledger
    out.one(
        "olp_ledger_queue_depth",
        "gauge",
        "Ledger rows waiting in memory to be written.",
        ledger.queue_depth(),
    )
    out.one(
        "olp_ledger_spilled_rows_total",
        "counter",
        "Ledger rows written to ledger-unwritten.jsonl because the database refused them.",
        ledger.spilled_rows(),
    )
    out.one("olp_ledger_lost_rows_total", "counter", "Ledger rows lost.", ledger.lost_rows())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
