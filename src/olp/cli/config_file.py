"""Writing `$OLP_HOME/config.json` safely: check the new document loads exactly as
`olp start` will load it, back up what is there, then replace it atomically, mode 0600."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from olp.cli.common import fail
from olp.config import load_config
from olp.errors import ConfigError

__all__ = ["check_document", "replace_config"]


def check_document(data: bytes, env: Mapping[str, str], *, command: str) -> None:
    """Load the document exactly as `olp start` will, before it replaces anything; a
    document that does not load is `command`'s bug, and nothing is written."""
    with tempfile.TemporaryDirectory(prefix="olp-config-") as tmp:
        Path(tmp, "config.json").write_bytes(data)
        check_env = {k: v for k, v in env.items() if not k.startswith("OLP_")}
        check_env["OLP_HOME"] = tmp
        try:
            load_config(check_env, detect_local_servers=False)
        except ConfigError as exc:
            fail(
                f"{command} built an invalid config (a bug; please report it):\n{exc}",
                hint="nothing was written; write config.json by hand (docs/configuration.md)",
            )


def replace_config(path: Path, data: bytes) -> Path | None:
    """Back up what is there, then replace it atomically (tmp + rename), mode 0600.
    Returns the backup's path, if there was a file to back up."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        backup = _backup(path) if path.exists() else None
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        _write_new(tmp, data)
        try:
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
    except OSError as exc:
        fail(
            f"cannot write {path}: {exc.strerror or exc}",
            hint="check that directory's permissions, or choose another one with --home",
        )
    return backup


def _backup(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while target.exists():  # two runs in one second keep both backups
        target = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    _write_new(target, path.read_bytes())
    return target


def _write_new(path: Path, data: bytes) -> None:
    """Create `path` (never an existing file) with mode 0600 and `data`, flushed to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except OSError:
        path.unlink(missing_ok=True)
        raise


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
