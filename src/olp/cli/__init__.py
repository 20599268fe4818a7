"""The `olp` command."""

from __future__ import annotations

import click

from olp import __version__
from olp.cli.cache import cache
from olp.cli.config_cmd import config_group
from olp.cli.doctor import doctor
from olp.cli.keys import keys_group
from olp.cli.migrate_ocp import migrate_from_ocp
from olp.cli.quota import providers, quota
from olp.cli.setup import setup
from olp.cli.start import start
from olp.cli.usage import usage

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", "-V", prog_name="olp", message="%(prog)s %(version)s"
)
def cli() -> None:
    """OLP — Open LLM Proxy.

    One OpenAI-compatible endpoint in front of every subscription and API key you have,
    with fallback chains, per-key limits and a cache.

    \b
    Quick start:
      olp setup                 detect what you have; write config.json and your key
      olp start                 serve on http://127.0.0.1:3456/v1
      olp config check          validate $OLP_HOME/config.json and show each chain
      olp doctor                check every provider's setup

    Configuration lives in $OLP_HOME/config.json (default ~/.olp/config.json);
    see docs/configuration.md.
    """


cli.add_command(start)
cli.add_command(config_group)
cli.add_command(doctor)
cli.add_command(cache)
cli.add_command(keys_group)
cli.add_command(quota)
cli.add_command(providers)
cli.add_command(setup)
cli.add_command(usage)
cli.add_command(migrate_from_ocp)


def main() -> None:
    cli(prog_name="olp")
