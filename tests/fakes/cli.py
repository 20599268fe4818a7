"""Helpers for tests that run CLI providers against the fake CLI (`fake_cli.py`).

bin_dir = install(tmp_path / "bin", "claude", "qwen")
env = fake_env(record, "err_429_no_retries_env", FAKE_CLI_DELAY="0.01")
config = {"type": "claude-cli", "command": str(bin_dir / "claude"), "env": env}
... run ...
runs = records(record)          # one dict per spawn
assert wait_gone(runs[0]["pid"])
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["FAKE_CLI", "PY_BIN", "fake_env", "install", "pid_gone", "records", "wait_gone"]

FAKE_CLI = Path(__file__).resolve().parent / "fake_cli.py"
# The fake's shebang is `#!/usr/bin/env python3`: put this interpreter's directory first
# on the child's PATH (a pyenv shim would not survive the child's private HOME).
PY_BIN = str(Path(sys.executable).parent)


def install(bin_dir: Path, *names: str) -> Path:
    """Symlink the fake CLI into `bin_dir` under each name; returns `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    FAKE_CLI.chmod(0o755)
    for name in names:
        link = bin_dir / name
        if not link.exists():
            link.symlink_to(FAKE_CLI)
    return bin_dir


def fake_env(record: Path, scenario: str, **extra: str) -> dict[str, str]:
    """The provider `env` config that makes the fake record to `record` and play `scenario`."""
    return {
        "PATH": f"{PY_BIN}:/usr/bin:/bin",
        "FAKE_CLI_RECORD": str(record),
        "FAKE_CLI_SCENARIO": scenario,
        **extra,
    }


def records(path: Path) -> list[dict[str, Any]]:
    """One record per run of the fake, oldest first ([] if it never ran)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pid_gone(pid: int) -> bool:
    """Not running: no such process, or a zombie left for a reaper that is not OLP."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pid_gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
