"""Helpers every subcommand shares: loading config without tracebacks, printing."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from olp.config import Config, load_config
from olp.errors import ConfigError

__all__ = ["fail", "load_or_exit"]


def fail(message: str, *, hint: str | None = None, code: int = 2) -> NoReturn:
    click.secho(f"error: {message}", fg="red", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def load_or_exit(*, detect_local_servers: bool = True) -> Config:
    try:
        return load_config(detect_local_servers=detect_local_servers)
    except ConfigError as exc:
        fail(str(exc), hint="fix the file, then run `olp config check`")
