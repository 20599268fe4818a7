"""The owner key `olp start` makes on first start: printed once, stored only as a hash."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from olp.storage import private_dir

__all__ = ["KEY_PREFIX", "OwnerKeyFile", "generate_key", "hash_key"]

KEY_PREFIX = "olp_"


def generate_key() -> str:
    """`olp_` + 43 base64url characters (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class OwnerKeyFile:
    """`$OLP_HOME/owner_key.sha256`: one hex SHA-256 line, mode 0600."""

    def __init__(self, home: Path) -> None:
        self.path = home / "owner_key.sha256"

    def load_hash(self) -> str | None:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return None
        return text if len(text) == 64 else None

    def create(self) -> str:
        """Make a new owner key, store its hash, and return the key itself (show it once)."""
        key = generate_key()
        private_dir(self.path.parent)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(hash_key(key) + "\n")
        os.replace(tmp, self.path)
        return key
