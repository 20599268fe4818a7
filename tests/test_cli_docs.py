"""docs/cli.md is every command's `--help`, as the code prints it: the page cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from olp.cli import cli

DOC = Path(__file__).parents[1] / "docs" / "cli.md"
# "## olp keys set" followed by its ```text block.
_SECTION = re.compile(r"^## (olp(?: [a-z-]+)*)\n+```text\n(.*?)```$", re.M | re.S)


def documented() -> dict[str, str]:
    sections: list[tuple[str, str]] = _SECTION.findall(DOC.read_text(encoding="utf-8"))
    return dict(sections)


def commands(group: click.Group, prefix: str = "olp") -> list[str]:
    names = [prefix]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            names += commands(command, f"{prefix} {name}")
        else:
            names.append(f"{prefix} {name}")
    return names


def test_every_command_has_a_section() -> None:
    assert sorted(documented()) == sorted(commands(cli))


@pytest.mark.parametrize("command", commands(cli))
def test_the_section_is_the_commands_help(command: str) -> None:
    args = [*command.split()[1:], "--help"]
    # 78: what an 80-column terminal shows (click keeps two columns free).
    result = CliRunner().invoke(cli, args, prog_name="olp", terminal_width=78)
    assert result.exit_code == 0, result.output
    assert documented()[command] == result.output, f"docs/cli.md is out of date for {command}"
