"""`olp keys` for tests: in this process (the same click command `olp` runs, on a real
keys.db), or as a real `python -m olp` child for the few smoke tests of the entry point."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from olp.cli import cli

__all__ = ["Run", "olp_keys", "olp_keys_process"]


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def olp_keys(home: Path, *args: str) -> Run:
    """`olp keys ARGS` in this process, on `home`/keys.db (a child process costs ~0.6 s of
    interpreter start). An exception click would let out (a traceback for the user)
    fails the test."""
    env = {"OLP_HOME": str(home), "OLP_OWNER_TOKEN": None}
    result = CliRunner().invoke(cli, ["keys", *args], prog_name="olp", env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        pytest.fail(f"olp keys {' '.join(args)} raised:\n{trace}")
    return Run(result.exit_code, result.stdout, result.stderr)


def olp_keys_process(home: Path, *args: str) -> Run:
    """`olp keys ARGS` as a real child process: the entry point, its exit code and its
    streams end to end."""
    env = {**os.environ, "OLP_HOME": str(home)}
    env.pop("OLP_OWNER_TOKEN", None)
    proc = subprocess.run(
        [sys.executable, "-m", "olp", "keys", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)
