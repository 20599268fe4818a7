"""Reloading config.json while OLP runs: providers, chains, prices and auth, no restart.

The server looks at `$OLP_HOME/config.json` once a second, and at once on SIGHUP. A file
that loads and validates replaces the running `providers`, `routing`, `pricing` and
`auth`, and the fields of `server`, `cache` and `ledger` that can change under a running
server (`LIVE_FIELDS`); a file that does not (a typo, an editor's half-written save) is logged
with every problem it has, and the running configuration stays. The other fields belong
to objects built once at start — the socket, the cache's store — so a change there is
logged, field by field, as waiting for a restart.

A provider whose entry did not change keeps its object, with its connection pool, its
child processes and its quota signals; cooldowns and quota counters are kept by name for
every provider. A provider removed or changed is retired: requests already using it
finish on it, and it is closed once the longest of them is past its deadline
(`timeouts.total_ms`), or when the server stops; what only new requests would use (CLI
processes started ahead) goes at once (`Retirable.retire()`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TypeVar

from olp.accounts.dbauth import DbAuthenticator
from olp.accounts.pricing import Pricing
from olp.cache import RELOADABLE
from olp.config import CacheConfig, Config, LedgerConfig, ServerConfig
from olp.engine import Router
from olp.errors import ConfigError
from olp.observability import event_logger
from olp.providers.base import Provider, Retirable
from olp.providers.loader import build_providers
from olp.quota import soft_trigger_warnings
from olp.server.context import AppContext, Snapshot
from olp.server.observers import record_usage

__all__ = [
    "LIVE_FIELDS",
    "ConfigReloader",
    "Reloaded",
    "apply_config",
    "restart_only_fields",
    "warn_soft_triggers",
]

log = event_logger("olp.server")

# The fields of the sections built once at start that a reload does change: they are read
# per request (server), or handed to what uses them (cache: `reconfigure`; ledger:
# `record_usage` and the ledger's `retention`).
# Every other field of these sections waits for a restart, a field added later too until
# someone moves it here.
LIVE_FIELDS: Mapping[str, frozenset[str]] = {
    "server": frozenset(
        {
            "max_body_bytes",
            "heartbeat_interval_ms",
            "body_timeout_s",
            "max_header_bytes",
            "header_timeout_s",
        }
    ),
    "cache": RELOADABLE | {"serve_nondeterministic"},  # (read per request)
    "ledger": frozenset({"enabled", "retention_days"}),
}
_SECTIONS: Mapping[str, type] = {
    "server": ServerConfig,
    "cache": CacheConfig,
    "ledger": LedgerConfig,
}
_RETIRE_GRACE_S = 5.0
_Section = TypeVar("_Section", ServerConfig, CacheConfig, LedgerConfig)
# (inode, size, mtime in ns): a save changes at least one of them.
_Signature = tuple[int, int, int] | None


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload changed (provider names), and what waits for a restart."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    restart_needed: tuple[str, ...]  # fields, e.g. "server.port"


def warn_soft_triggers(config: Config, providers: Mapping[str, Provider]) -> None:
    """Log each soft trigger that can never fire for its provider."""
    signals = {name: p.capabilities.quota_signals for name, p in providers.items()}
    for warning in soft_trigger_warnings(config.routing.soft_triggers, signals):
        log.warning("soft_trigger_never_fires", detail=warning)


def apply_config(
    ctx: AppContext, new: Config, started: Config
) -> tuple[Reloaded, dict[str, Provider]]:
    """Swap `new`'s providers, routing, pricing, auth and live fields into `ctx`; return what
    changed and the retired providers (still open). `started` is the config loaded at
    start, before any command-line override: the other fields of `new` that differ from it
    wait for a restart.

    Raises ConfigError (nothing swapped) if a new or changed provider cannot be built.
    """
    running = ctx.config
    target = replace(
        running,
        providers=new.providers,
        routing=new.routing,
        pricing=new.pricing,
        auth=new.auth,
        server=_live("server", running.server, new.server),
        cache=_live("cache", running.cache, new.cache),
        ledger=_live("ledger", running.ledger, new.ledger),
        source=new.source,
        notes=new.notes,
    )
    enabled = target.enabled_providers()
    kept = {n: p for n, p in ctx.providers.items() if running.providers.get(n) == enabled.get(n)}
    fresh = {n: pconf for n, pconf in enabled.items() if n not in kept}
    built = build_providers(replace(target, providers=fresh), ctx.plugins, ctx.registry)
    retired = {n: p for n, p in ctx.providers.items() if n not in kept}
    reloaded = Reloaded(
        added=tuple(n for n in built if n not in ctx.providers),
        removed=tuple(n for n in retired if n not in enabled),
        changed=tuple(n for n in built if n in ctx.providers),
        restart_needed=restart_needed(new, started),
    )
    _swap(ctx, target, {n: kept.get(n) or built[n] for n in enabled})
    return reloaded, retired


def restart_only_fields() -> tuple[str, ...]:
    """Every field a reload leaves as it is, by dotted name ("server.port")."""
    return tuple(
        f"{section}.{field.name}"
        for section, live in LIVE_FIELDS.items()
        for field in fields(_SECTIONS[section])
        if field.name not in live
    )


def restart_needed(new: Config, started: Config) -> tuple[str, ...]:
    """The fields outside `LIVE_FIELDS` where `new` differs from what OLP started with."""
    return tuple(name for name in restart_only_fields() if _get(new, name) != _get(started, name))


def _get(config: Config, dotted: str) -> object:
    section, name = dotted.split(".")
    return getattr(getattr(config, section), name)


def _live(section: str, running: _Section, new: _Section) -> _Section:
    """The running `section` with `new`'s live fields."""
    return replace(running, **{name: getattr(new, name) for name in LIVE_FIELDS[section]})


def _swap(ctx: AppContext, config: Config, providers: dict[str, Provider]) -> None:
    routing = config.routing
    engine = ctx.engine.with_settings(
        default_retry_after_s=routing.default_retry_after_s, max_cooldown_s=routing.max_cooldown_s
    )
    router = Router(config, ctx.registry, providers)
    # One assignment: a request reads `ctx.live` once, so it sees the old snapshot or the
    # new one, never a mix of both.
    ctx.live = Snapshot(config, providers, router, Pricing(ctx.registry, config), engine)
    # The long-lived services take the settings of theirs that may change.
    ctx.quota.thresholds = routing.soft_triggers
    record_usage(ctx, config.ledger.enabled)
    ctx.ledger.retention.days = config.ledger.retention_days
    dropped = ctx.cache.reconfigure(config.cache)
    if dropped:
        log.info("cache_entries_dropped", entries=dropped, why="config reload: new cache limits")
    if isinstance(ctx.auth, DbAuthenticator):
        ctx.auth.allow_anonymous = config.auth.allow_anonymous
    ctx.health_checks.forget()


class ConfigReloader:
    """Watches config.json (and SIGHUP) and applies each valid version; see the module doc.

    `load` reads and validates the configuration as `olp start` did; `loaded` is what it
    returned at start.
    """

    def __init__(
        self,
        ctx: AppContext,
        load: Callable[[], Config],
        loaded: Config,
        *,
        poll_s: float = 1.0,
    ) -> None:
        self._ctx = ctx
        self._load = load
        self._started = loaded
        self._loaded = loaded  # the last version applied
        self._poll_s = poll_s
        self._path = loaded.config_path
        self._seen = _signature(self._path)
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Future[object]] = set()
        self._retired: dict[int, Provider] = {}  # by id: not yet closed

    async def run(self) -> None:
        """Poll the file's signature; reload when it changed."""
        while True:
            await asyncio.sleep(self._poll_s)
            seen = _signature(self._path)
            if seen != self._seen:
                self._seen = seen
                await self._reload_guarded("config.json changed")

    def on_signal(self) -> None:
        """SIGHUP: reload now (the handler must not block: the reload runs as a task)."""
        self._spawn(self._reload_guarded("SIGHUP"))

    async def _reload_guarded(self, why: str) -> None:
        try:
            await self.reload(why)
        except Exception:  # a bug here must not end the watching, nor go unreported
            log.error("config_reload_error", why=why, exc_info=True)

    async def reload(self, why: str) -> Reloaded | None:
        """Load, validate and apply config.json; None (and an error logged) if it failed."""
        async with self._lock:
            before = self._loaded
            try:
                # Off the loop: reading the file, and with no file, probing local servers.
                new = await asyncio.to_thread(self._load)
                reloaded, retired = apply_config(self._ctx, new, self._started)
            except ConfigError as exc:
                log.error("config_reload_failed", why=why, error=str(exc), kept="running config")
                status = self._ctx.config_status
                status.reload_error, status.reload_error_at = str(exc), time.time()
                return None
            self._loaded = new
            status = self._ctx.config_status
            status.loaded_at, status.reloads = time.time(), status.reloads + 1
            status.restart_needed = reloaded.restart_needed
            status.reload_error = status.reload_error_at = None
        self._report(why, reloaded)
        warn_soft_triggers(self._ctx.config, self._ctx.providers)
        for name, provider in retired.items():
            # The longest a request that took the old provider may still be using it.
            old = before.providers.get(name)
            total_s = (old.timeouts.total_ms if old is not None else 600_000) / 1000
            self._retired[id(provider)] = provider
            if isinstance(provider, Retirable):
                self._spawn(provider.retire())
            self._spawn(self._close_later(name, provider, total_s + _RETIRE_GRACE_S))
        return reloaded

    def _report(self, why: str, reloaded: Reloaded) -> None:
        log.info(
            "config_reloaded",
            why=why,
            providers=sorted(self._ctx.providers),
            added=list(reloaded.added),
            removed=list(reloaded.removed),
            changed=list(reloaded.changed),
            chains=sorted(self._ctx.config.routing.chains),
        )
        if reloaded.restart_needed:  # said at each reload, until the restart
            log.warning(
                "config_reload_needs_restart",
                fields=list(reloaded.restart_needed),
                detail="these fields differ from the ones OLP started with; they take effect "
                "at the next `olp start`",
            )

    async def _close_later(self, name: str, provider: Provider, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        if self._retired.pop(id(provider), None) is None:
            return  # closed by aclose() meanwhile
        try:
            await provider.aclose()
        except Exception as exc:
            log.warning("provider_close_failed", provider=name, error=repr(exc))

    def _spawn(self, coro: Coroutine[object, object, object]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Stop watching; close every retired provider now (the server is stopping)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        retired, self._retired = self._retired, {}
        await asyncio.gather(*(p.aclose() for p in retired.values()), return_exceptions=True)


def _signature(path: Path) -> _Signature:
    try:
        st = os.stat(path)
    except OSError:  # no file (detection), or unreadable: load_config will say which
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
