"""Helpers every subcommand shares: loading config without tracebacks, printing."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, TypeVar

import click

from olp.accounts.keystore import KeyStore, keys_db_path
from olp.accounts.ledger_rows import MIGRATIONS
from olp.config import Config, load_config
from olp.errors import ConfigError, OLPError
from olp.providers.loader import known_providers, load_plugins
from olp.registry import load_registry
from olp.storage import DatabaseError, open_database

__all__ = ["existing_key_store", "fail", "load_or_exit", "read_ledger"]

T = TypeVar("T")


def fail(message: str, *, hint: str | None = None, code: int = 2) -> NoReturn:
    click.secho(f"error: {message}", fg="red", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def base_url(host: str, port: int) -> str:
    """OLP's API root at host:port (an IPv6 address in brackets)."""
    return f"http://[{host}]:{port}/v1" if ":" in host else f"http://{host}:{port}/v1"


def client_base_url(host: str, port: int) -> str:
    """The API root a client on this machine uses for a server bound to host:port."""
    # Bound to every address: loopback is one of them. "::" listens on IPv6 only (as
    # asyncio binds it), so its loopback is ::1, not 127.0.0.1.
    loopback = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}
    return base_url(loopback.get(host, host), port)


def load_or_exit(*, detect_local_servers: bool = True) -> Config:
    try:
        known = known_providers(load_plugins(), load_registry())
        return load_config(known=known, detect_local_servers=detect_local_servers)
    except ConfigError as exc:
        fail(str(exc), hint="fix the file, then run `olp config check`")


def read_ledger(path: Path, read: Callable[[sqlite3.Connection], T]) -> T:
    """`read` run on the usage ledger at `path`, which exists; a damaged or locked file
    ends the command with its message (exit 1)."""
    try:
        conn = open_database(path, MIGRATIONS)
        try:
            return read(conn)
        finally:
            conn.close()
    except DatabaseError as exc:
        fail(str(exc), code=1)


@contextmanager
def existing_key_store(home: Path) -> Iterator[KeyStore | None]:
    """The key store of `home` if keys.db exists, else None (opening it would create it).

    A file that cannot be opened (damaged, locked) exits 2 with the store's message.
    """
    path = keys_db_path(home)
    if not path.exists():
        yield None
        return
    try:
        store = KeyStore.open(path)
    except OLPError as exc:
        fail(exc.message)
    try:
        yield store
    finally:
        store.close()
