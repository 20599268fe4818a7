"""The private place a CLI child runs in: an empty working directory, a private HOME and
TMPDIR under one temporary directory, and a scrubbed environment (docs/design.md §6).

This is isolation from the *owner's setup* (their CLAUDE.md, MCP servers, sessions,
settings, shell history), not a security boundary: the child runs as the same user.
Everything here is synchronous and small; `remove()` never follows a symlink out of the
sandbox, so the owner's linked credential files survive it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from olp.config.model import ProviderConfig
from olp.errors import Failure, ProviderError

__all__ = ["Sandbox", "child_env", "resolve_binary", "safe_relative"]


def safe_relative(path: str, what: str) -> PurePosixPath:
    """A relative path that stays inside the directory it is joined to."""
    rel = PurePosixPath(path)
    if not path or rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"{what} must be a relative path inside its directory, got {path!r}")
    return rel


class Sandbox:
    """`root/` (0700) holding `home/`, `work/` (the child's cwd) and `tmp/`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.work = root / "work"
        self.tmp = root / "tmp"

    @classmethod
    def create(cls, provider: str, base_dir: str | None) -> Sandbox:
        try:
            root = Path(tempfile.mkdtemp(prefix=f"olp-{provider}-", dir=base_dir))
        except OSError as exc:
            raise ProviderError(
                Failure.SPAWN_FAILED,
                f"cannot create a private directory for {provider}: {exc}",
                provider=provider,
            ) from exc
        box = cls(root)
        try:
            for sub in (box.home, box.work, box.tmp):
                sub.mkdir(mode=0o700)
        except OSError as exc:
            box.remove()
            raise ProviderError(
                Failure.SPAWN_FAILED, f"cannot prepare {root}: {exc}", provider=provider
            ) from exc
        return box

    def write_home_files(self, files: Mapping[str, bytes]) -> None:
        self._write(self.home, files, "home file")

    def write_work_files(self, files: Mapping[str, bytes]) -> None:
        self._write(self.work, files, "working-directory file")

    @staticmethod
    def _write(base: Path, files: Mapping[str, bytes], what: str) -> None:
        for rel, data in files.items():
            target = base / safe_relative(rel, what)
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)

    def link_home(self, links: Mapping[str, str]) -> None:
        """Symlinks under the private HOME: relative path → target (e.g. a log file the CLI
        appends to → /dev/stderr, so its notices arrive as they are written)."""
        for rel, target in links.items():
            link = self.home / safe_relative(rel, "home link")
            link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            link.symlink_to(target)

    def link_credentials(
        self, user_home: Path | None, credentials: tuple[tuple[str, str], ...]
    ) -> list[str]:
        """Symlink each existing owner credential file into the private HOME.

        A symlink rather than a copy: subscription CLIs refresh their OAuth tokens in
        place, and refresh tokens rotate — a refreshed copy thrown away with the sandbox
        would log the owner out. Returns the private paths that were linked.
        """
        if user_home is None:
            return []
        linked: list[str] = []
        for src_rel, dst_rel in credentials:
            source = user_home / safe_relative(src_rel, "credential source")
            if not source.is_file():
                continue
            target = self.home / safe_relative(dst_rel, "credential target")
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(source)
            linked.append(dst_rel)
        return linked

    def remove(self) -> None:
        # rmtree does not follow symlinks: linked credentials stay with the owner.
        shutil.rmtree(self.root, ignore_errors=True)


def child_env(config: ProviderConfig, box: Sandbox, extra: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a child, and nothing else.

    Order (later wins): the allow-listed variables the loader kept from OLP's own
    environment (PATH, locale, TLS trust), the sandbox (HOME, TZ, TMPDIR), what the CLI
    needs (`extra`), then the owner's own `env` from the config.
    """
    env = dict(config.inherited_env)
    env.update(
        {
            "HOME": str(box.home),
            # Reset times in CLI messages are wall-clock in the CLI's zone: make it UTC.
            "TZ": "UTC",
            "TMPDIR": str(box.tmp),
        }
    )
    env.update(extra)
    env.update(config.env)
    return env


def resolve_binary(command: str, path_var: str | None) -> str | None:
    """Absolute path of `command` (a path, or a name looked up on `path_var`)."""
    if os.sep in command or (os.altsep and os.altsep in command):
        candidate = Path(command).expanduser()
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate.absolute())
        return None
    found = shutil.which(command, path=path_var or os.defpath)
    return str(Path(found).absolute()) if found else None
