"""OLP's files are the owner's alone: `$OLP_HOME` 0700, every file OLP writes in it 0600,
whatever the umask. Cached answers, the usage ledger and key hashes are nobody else's
business.

SQLite creates a database's `-wal` and `-shm` files with the database file's own mode, so
a database created 0600 here keeps its companions private too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from olp.observability import event_logger

__all__ = ["open_private", "private_dir", "private_file", "tighten_home"]

log = event_logger("olp.storage")

_DIR_MODE = 0o700
_FILE_MODE = 0o600
_OWNER_ONLY = 0o700  # a mask: the owner's bits, whatever they are


def private_dir(path: Path) -> None:
    """Create `path` (and its parents) as the owner's alone; tighten it if it was looser."""
    path.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)  # the umask may loosen it
    _tighten(path, _DIR_MODE)


def private_file(path: Path) -> None:
    """Create `path` empty and 0600 if missing (before SQLite or anyone else opens it)."""
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    except FileExistsError:
        _tighten(path, _FILE_MODE)
        return
    os.close(fd)


def open_private(path: Path, flags: int) -> int:
    """`os.open` for writing, creating the file 0600."""
    return os.open(path, flags | os.O_CREAT, _FILE_MODE)


def tighten_home(home: Path) -> list[Path]:
    """Take every permission of the group and others off `home` and everything under it;
    what changed is logged as `permissions_tightened` and returned.

    The owner's own bits stay: a second login's folder (`accounts/<name>/`) is a CLI's home
    and may hold programs that must stay executable.
    """
    private_dir(home)
    changed: list[Path] = []
    for entry in [home, *home.rglob("*")]:
        if entry.is_symlink():
            continue  # a link's target is not ours to change
        if _tighten(entry, _OWNER_ONLY):
            changed.append(entry)
    if changed:
        log.warning(
            "permissions_tightened",
            home=str(home),
            files=[str(p.relative_to(home)) for p in changed],
            removed="every permission of the group and others",
        )
    return changed


def _tighten(path: Path, wanted: int) -> bool:
    """Remove what `wanted` does not allow; True if something was removed."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & ~wanted == 0:
            return False
        os.chmod(path, mode & wanted)
    except OSError:
        return False
    return True
