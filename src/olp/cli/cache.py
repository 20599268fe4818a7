"""`olp cache stats|clear`: the response cache under $OLP_HOME."""

from __future__ import annotations

import click
import orjson

from olp.cache.control import disk_stats, request_clear
from olp.cli.common import fail, load_or_exit
from olp.errors import OLPError

__all__ = ["cache"]


@click.group()
def cache() -> None:
    """Look at or clear OLP's response cache ($OLP_HOME/cache.db).

    Hit and miss counters live in the running server: GET /cache/stats with an owner key.
    """


@cache.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def stats(as_json: bool) -> None:
    """Entries and bytes stored, per namespace (one namespace per OLP key).

    \b
    Example:
      olp cache stats
    """
    config = load_or_exit(detect_local_servers=False)
    try:
        figures = disk_stats(config.home)
    except OLPError as exc:
        fail(exc.message)
    if as_json:
        click.echo(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
        return
    click.echo(f"{'namespace':<24} {'entries':>8} {'bytes':>12}")
    for namespace, row in figures["namespaces"].items():
        click.echo(f"{namespace:<24} {row['entries']:>8} {row['bytes']:>12}")
    click.echo(f"{'total':<24} {figures['entries']:>8} {figures['bytes']:>12}")


@cache.command()
@click.option(
    "--key",
    "namespace",
    metavar="KEY_ID",
    help="Clear only this key's namespace (its id from `olp keys list`).",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def clear(namespace: str | None, yes: bool) -> None:
    """Delete stored answers: one key's, or everyone's. A running server follows within
    a second.

    \b
    Examples:
      olp cache clear --yes
      olp cache clear --key key_ab12cd34
    """
    config = load_or_exit(detect_local_servers=False)
    what = f"namespace {namespace}" if namespace else "every namespace"
    if not yes:
        click.confirm(f"Clear the cache of {what}?", abort=True)
    try:
        cleared = request_clear(config.home, namespace)
    except OLPError as exc:
        fail(exc.message)
    click.echo(f"cleared {cleared} stored answer(s) from {what}")
