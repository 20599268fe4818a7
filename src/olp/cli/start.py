"""`olp start`: serve the proxy."""

from __future__ import annotations

import gc
import sys
from dataclasses import replace

import click

from olp import __version__
from olp.accounts import OwnerKeyFile
from olp.cli.common import existing_key_store, fail, load_or_exit
from olp.config import Config
from olp.errors import ConfigError, OLPError
from olp.observability import configure_logging, redacted_url

# Allocations between two collections of the youngest generation (Python's default: 700).
_GC_GEN0_THRESHOLD = 20_000

__all__ = ["start"]


@click.command()
@click.option("--host", help="Address to listen on (default 127.0.0.1, env OLP_HOST).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port (default 3456, env OLP_PORT).")
def start(host: str | None, port: int | None) -> None:
    """Start the proxy on http://HOST:PORT/v1.

    Reads $OLP_HOME/config.json (or detects providers when there is none). On the first
    start it creates the owner key, prints it once and keeps only its hash. SIGTERM or
    Ctrl-C stops accepting requests and lets streams in flight finish, up to
    server.shutdown_grace_s seconds.

    \b
    Examples:
      olp start
      olp start --host 0.0.0.0 --port 8080
      OLP_HOME=/srv/olp OLP_LOG_LEVEL=debug olp start
    """
    config = load_or_exit()
    server = config.server
    config = replace(
        config, server=replace(server, host=host or server.host, port=port or server.port)
    )
    _announce(config)
    _ensure_owner_key(config)
    _serve(config)


def _announce(config: Config) -> None:
    for note in config.notes:
        click.echo(f"olp: {note}", err=True)
    providers = ", ".join(sorted(config.enabled_providers())) or "none"
    click.echo(f"olp {__version__}: providers: {providers}", err=True)
    if config.cache.enabled and config.cache.redis_url is not None:
        click.echo(
            f"olp: cache shared in Redis at {redacted_url(config.cache.redis_url)}", err=True
        )


def _ensure_owner_key(config: Config) -> None:
    keyfile = OwnerKeyFile(config.home)
    if config.owner_token or keyfile.load_hash() or _store_has_owner_key(config):
        return
    key = keyfile.create()
    click.echo(
        "\nYour owner key (shown once; only its hash is kept in "
        f"{keyfile.path}):\n\n    {key}\n\n"
        "Use it as an OpenAI API key:\n"
        f"    export OPENAI_BASE_URL=http://{config.server.host}:{config.server.port}/v1\n"
        f"    export OPENAI_API_KEY={key}\n"
        "Lost it? Delete that file and restart, or set OLP_OWNER_TOKEN.\n",
        err=True,
    )


def _store_has_owner_key(config: Config) -> bool:
    """`olp setup` (or `olp keys create --tier owner`) already made an owner key."""
    with existing_key_store(config.home) as store:
        return store is not None and any(
            k.tier == "owner" for k in store.list_keys(include_revoked=False)
        )


def _serve(config: Config) -> None:
    import uvicorn

    from olp.server import create_app
    from olp.server.serve import uvicorn_config

    listener = configure_logging(config.log_level)
    try:
        try:
            app = create_app(config)
        except ConfigError as exc:
            fail(str(exc), hint="fix the file, then run `olp config check`")
        except OLPError as exc:  # e.g. a damaged or locked SQLite file under OLP_HOME
            fail(exc.message)
        click.echo(
            f"olp: listening on http://{config.server.host}:{config.server.port}/v1", err=True
        )
        server = uvicorn.Server(uvicorn_config(app, config))
        _tune_gc()
        try:
            server.run()
        except KeyboardInterrupt:
            # uvicorn re-raises Ctrl-C after its graceful shutdown: that is a clean stop.
            click.echo("olp: stopped", err=True)
            sys.exit(130)
    finally:
        listener.stop()


def _tune_gc() -> None:
    """Fewer, larger garbage collections for a long-running server.

    Python collects its youngest generation every 700 net allocations, which at OLP's rate
    is every few requests; most of what a request allocates is freed by reference counting
    anyway. Measured on a cache hit: 55 → 45 µs per request at 20,000. What startup built
    (modules, config, providers) lives as long as the process: `freeze()` keeps it out of
    every later collection.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(_GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
