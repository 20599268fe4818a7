"""API keys in SQLite: `$OLP_HOME/keys.db`, table `keys`, secrets stored only as SHA-256.

Why a file of its own rather than a table in a shared `olp.db`: `open_database` versions a
file's schema with `PRAGMA user_version`, which is one number per file, so two components
migrating one file would step on each other. One file per component keeps each migration
list independent without a shared protocol, and it has two more benefits: `PRAGMA
data_version` on this file changes only when keys change (the server reloads its key table
on exactly those changes, not on every ledger flush), and `olp keys` never waits behind the
ledger's write lock.

Every writer (the `olp keys` CLI, the server's batched last-used updates) commits in short
`BEGIN IMMEDIATE` transactions; the server's reader notices commits through
`PRAGMA data_version` (see `DbAuthenticator`).
"""

from __future__ import annotations

import enum
import os
import secrets
import sqlite3
import string
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olp.accounts.identity import KeyLimits
from olp.accounts.keyrecord import (
    KEY_ID_PATTERN,
    NO_LIMITS,
    RECORD_COLUMNS,
    KeyRecord,
    Patterns,
    Shares,
    check_expiry,
    check_limits,
    check_name,
    check_patterns,
    check_shares,
    check_tier,
    dump_patterns,
    dump_shares,
    record_from_row,
)
from olp.accounts.owner_key import generate_key, hash_key
from olp.errors import InvalidRequest, OLPError
from olp.storage import DatabaseError, Migration, explain, open_database

__all__ = [
    "KEEP",
    "Keep",
    "KeyNameTaken",
    "KeyStore",
    "NewKey",
    "UnknownKey",
    "keys_db_path",
]

MIGRATIONS = (
    Migration(
        1,
        """
        CREATE TABLE keys (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            tier TEXT NOT NULL CHECK (tier IN ('owner', 'member')),
            secret_sha256 TEXT NOT NULL UNIQUE,
            created REAL NOT NULL,
            last_used REAL,
            revoked_at REAL,
            allowed_models TEXT,
            allowed_providers TEXT,
            rpm INTEGER,
            rpd INTEGER,
            tpd INTEGER,
            usd_month REAL
        );
        CREATE UNIQUE INDEX keys_active_name ON keys (name) WHERE revoked_at IS NULL
        """,
    ),
    Migration(
        2,
        """
        ALTER TABLE keys ADD COLUMN concurrent INTEGER;
        ALTER TABLE keys ADD COLUMN expires_at REAL
        """,
    ),
    Migration(
        3,
        """
        ALTER TABLE keys ADD COLUMN rp7d INTEGER;
        ALTER TABLE keys ADD COLUMN rp30d INTEGER
        """,
    ),
    Migration(4, "ALTER TABLE keys ADD COLUMN shares TEXT"),
)

_ID_ALPHABET = string.ascii_lowercase + string.digits
Clock = Callable[[], float]


class Keep(enum.Enum):
    """`update()`'s marker for a setting left as it is (None means "remove the limit")."""

    KEEP = "keep"


KEEP = Keep.KEEP


class UnknownKey(OLPError):
    code = "key_not_found"
    http_status = 404
    type = "invalid_request_error"


class KeyNameTaken(OLPError):
    code = "key_name_taken"
    http_status = 409
    type = "invalid_request_error"


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just created or rotated: the only moment its secret exists outside the client."""

    record: KeyRecord
    secret: str


def keys_db_path(home: Path) -> Path:
    return home / "keys.db"


class KeyStore:
    """Create, list, change and revoke keys. One connection; not shared between threads."""

    def __init__(self, conn: sqlite3.Connection, path: Path, clock: Clock = time.time) -> None:
        self._conn = conn
        self.path = path
        self._clock = clock

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        clock: Clock = time.time,
        check_same_thread: bool = True,
        busy_timeout_ms: int = 5000,
    ) -> KeyStore:
        """Open (creating and migrating) the key file; DatabaseError names any problem."""
        conn = open_database(
            path,
            MIGRATIONS,
            busy_timeout_ms=busy_timeout_ms,
            check_same_thread=check_same_thread,
        )
        _private(path)
        return cls(conn, path, clock)

    def close(self) -> None:
        self._conn.close()

    # -- reading ------------------------------------------------------------------------

    def list_keys(self, *, include_revoked: bool = True) -> list[KeyRecord]:
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        with self._errors():
            rows = self._conn.execute(
                f"SELECT {RECORD_COLUMNS} FROM keys{where} ORDER BY created, id"
            ).fetchall()
        return [record_from_row(row) for row in rows]

    def get(self, ref: str) -> KeyRecord:
        """By id, else by name (the active key of that name, else its latest revoked one)."""
        with self._errors():
            row = self._find(ref)
        return record_from_row(row)

    def active_secrets(self) -> list[tuple[str, KeyRecord]]:
        """(SHA-256 hex, record) for every key that may authenticate."""
        with self._errors():
            rows = self._conn.execute(
                f"SELECT secret_sha256, {RECORD_COLUMNS} FROM keys WHERE revoked_at IS NULL"
            ).fetchall()
        return [(row[0], record_from_row(row[1:])) for row in rows]

    def data_version(self) -> int:
        """Changes whenever another connection commits to the file (a cheap read)."""
        with self._errors():
            (version,) = self._conn.execute("PRAGMA data_version").fetchone()
        return int(version)

    # -- writing ------------------------------------------------------------------------

    def create(
        self,
        name: str,
        *,
        tier: str = "member",
        allowed_models: Patterns = None,
        allowed_providers: Patterns = None,
        limits: KeyLimits = NO_LIMITS,
        expires_at: float | None = None,
        shares: Shares = (),
    ) -> NewKey:
        name = check_name(name)
        shares = check_shares(shares)
        check_expiry(expires_at, self._clock())
        tier_ = check_tier(tier)
        models = dump_patterns(check_patterns("models", allowed_models))
        providers = dump_patterns(check_patterns("providers", allowed_providers))
        check_limits(limits)
        secret = generate_key()
        with self._write():
            self._require_free_name(name)
            key_id = self._new_id()
            self._conn.execute(
                f"INSERT INTO keys (secret_sha256, {RECORD_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    hash_key(secret),
                    key_id,
                    name,
                    tier_,
                    self._clock(),
                    models,
                    providers,
                    limits.rpm,
                    limits.rpd,
                    limits.tpd,
                    limits.usd_month,
                    limits.concurrent,
                    expires_at,
                    limits.rp7d,
                    limits.rp30d,
                    dump_shares(shares),
                ),
            )
            row = self._find(key_id)
        return NewKey(record_from_row(row), secret)

    def find_secret(self, secret_sha256: str) -> KeyRecord | None:
        """The key whose secret has this SHA-256, revoked or not."""
        with self._errors():
            row = self._conn.execute(
                f"SELECT {RECORD_COLUMNS} FROM keys WHERE secret_sha256 = ?", (secret_sha256,)
            ).fetchone()
        return None if row is None else record_from_row(row)

    def adopt(
        self,
        name: str,
        secret_sha256: str,
        *,
        created: float,
        tier: str = "member",
        revoked_at: float | None = None,
        limits: KeyLimits = NO_LIMITS,
    ) -> KeyRecord:
        """Take in a key made elsewhere (another proxy's key store), known by the SHA-256
        of its secret, so that the secret keeps working here unchanged."""
        name = check_name(name)
        tier_ = check_tier(tier)
        check_limits(limits)
        with self._write():
            if revoked_at is None:
                self._require_free_name(name)
            key_id = self._new_id()
            self._conn.execute(
                f"INSERT INTO keys (secret_sha256, {RECORD_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, NULL, ?, NULL, NULL, ?, ?, ?, ?, ?, NULL, ?, ?, NULL)",
                (
                    secret_sha256,
                    key_id,
                    name,
                    tier_,
                    created,
                    revoked_at,
                    limits.rpm,
                    limits.rpd,
                    limits.tpd,
                    limits.usd_month,
                    limits.concurrent,
                    limits.rp7d,
                    limits.rp30d,
                ),
            )
            return record_from_row(self._find(key_id))

    def name_taken(self, name: str) -> bool:
        """Whether an active key already has this name."""
        with self._errors():
            row = self._conn.execute(
                "SELECT 1 FROM keys WHERE name = ? AND revoked_at IS NULL", (name.strip(),)
            ).fetchone()
        return row is not None

    def revoke(self, ref: str) -> KeyRecord:
        """Revoke; revoking twice keeps the first time and is not an error."""
        with self._write():
            row = self._find(ref)
            self._conn.execute(
                "UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (self._clock(), str(row[0])),
            )
            return record_from_row(self._find(str(row[0])))

    def rotate(self, ref: str) -> NewKey:
        """A new secret for the same id and settings; the old secret stops working."""
        secret = generate_key()
        with self._write():
            record = self._active(ref)
            self._conn.execute(
                "UPDATE keys SET secret_sha256 = ? WHERE id = ?", (hash_key(secret), record.id)
            )
        return NewKey(record, secret)

    def update(
        self,
        ref: str,
        *,
        name: str | Keep = KEEP,
        rpm: int | Keep | None = KEEP,
        rpd: int | Keep | None = KEEP,
        rp7d: int | Keep | None = KEEP,
        rp30d: int | Keep | None = KEEP,
        tpd: int | Keep | None = KEEP,
        usd_month: float | Keep | None = KEEP,
        concurrent: int | Keep | None = KEEP,
        allowed_models: Patterns | Keep = KEEP,
        allowed_providers: Patterns | Keep = KEEP,
        expires_at: float | Keep | None = KEEP,
        shares: Mapping[str, float | None] | None = None,
    ) -> KeyRecord:
        """Change only the settings given; None removes a limit, an allow-list or the
        expiry. `shares`: provider -> new share, None to remove that provider's share."""
        limits = {
            "rpm": rpm,
            "rpd": rpd,
            "rp7d": rp7d,
            "rp30d": rp30d,
            "tpd": tpd,
            "usd_month": usd_month,
            "concurrent": concurrent,
        }
        changes = _changes(name, limits, allowed_models, allowed_providers)
        if expires_at is not KEEP:
            changes["expires_at"] = check_expiry(expires_at, self._clock())
        with self._write():
            record = self._active(ref)
            if "name" in changes and changes["name"] != record.name:
                self._require_free_name(str(changes["name"]))
            if shares:
                changes["shares"] = dump_shares(_changed_shares(record.shares, shares))
            if changes:
                assignments = ", ".join(f"{column} = ?" for column in changes)
                self._conn.execute(
                    f"UPDATE keys SET {assignments} WHERE id = ?", (*changes.values(), record.id)
                )
            return record_from_row(self._find(record.id))

    def touch(self, last_used: Mapping[str, float]) -> None:
        """Record when keys were last used (batched by the server, off the hot path).

        A key revoked since its use was collected still gets it: whether a leaked key was
        used matters most once it is revoked. Only `last_used` changes, so a late batch
        cannot undo the revocation.
        """
        if not last_used:
            return
        with self._write():
            self._conn.executemany(
                "UPDATE keys SET last_used = ? WHERE id = ? "
                "AND (last_used IS NULL OR last_used < ?)",
                [(ts, key_id, ts) for key_id, ts in last_used.items()],
            )

    # -- helpers ------------------------------------------------------------------------

    def _find(self, ref: str) -> Sequence[object]:
        row = self._conn.execute(
            f"SELECT {RECORD_COLUMNS} FROM keys WHERE id = ?", (ref,)
        ).fetchone()
        if row is None and not KEY_ID_PATTERN.match(ref):
            row = self._conn.execute(
                f"SELECT {RECORD_COLUMNS} FROM keys WHERE name = ? "
                "ORDER BY revoked_at IS NOT NULL, created DESC LIMIT 1",
                (ref.strip(),),
            ).fetchone()
        if row is None:
            raise UnknownKey(f"no key with id or name {ref!r}", param="key")
        return tuple(row)

    def _active(self, ref: str) -> KeyRecord:
        record = record_from_row(self._find(ref))
        if record.revoked:
            raise InvalidRequest(
                f"key {record.id} ({record.name}) is revoked; create a new one with "
                f"`olp keys create --name {record.name}`",
                param="key",
            )
        return record

    def _require_free_name(self, name: str) -> None:
        taken = self._conn.execute(
            "SELECT id FROM keys WHERE name = ? AND revoked_at IS NULL", (name,)
        ).fetchone()
        if taken is not None:
            raise KeyNameTaken(
                f"a key named {name!r} already exists ({taken[0]}); choose another name, "
                "or revoke that key first",
                param="name",
            )

    def _new_id(self) -> str:
        for _ in range(10):
            key_id = "key_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))
            if self._conn.execute("SELECT 1 FROM keys WHERE id = ?", (key_id,)).fetchone() is None:
                return key_id
        raise DatabaseError(f"{self.path}: could not find a free key id")  # 36^8 ids: never

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One short write transaction; sqlite errors become DatabaseError."""
        with self._errors():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise explain(self.path, exc) from exc


def _changes(
    name: str | Keep,
    limits: Mapping[str, float | Keep | None],
    allowed_models: Patterns | Keep,
    allowed_providers: Patterns | Keep,
) -> dict[str, object]:
    """Validated column -> value for the settings being changed (`limits`: a `KeyLimits`
    field -> its new value, None to remove the limit, KEEP to leave it)."""
    changes: dict[str, object] = {}
    if name is not KEEP:
        changes["name"] = check_name(name)
    # (Any: each value has its field's type, which a dict of five fields cannot say.)
    given: dict[str, Any] = {field: v for field, v in limits.items() if v is not KEEP}
    check_limits(KeyLimits(**given))
    changes.update(given)
    if allowed_models is not KEEP:
        changes["allowed_models"] = dump_patterns(check_patterns("models", allowed_models))
    if allowed_providers is not KEEP:
        changes["allowed_providers"] = dump_patterns(check_patterns("providers", allowed_providers))
    return changes


def _changed_shares(current: Shares, changes: Mapping[str, float | None]) -> Shares:
    merged = dict(current)
    for provider, share in changes.items():
        if share is None:
            merged.pop(provider, None)
        else:
            merged[provider] = share
    return check_shares(merged.items())


def _private(path: Path) -> None:
    # Only hashes live here, but who has which limits is nobody else's business.
    with suppress(OSError):
        os.chmod(path, 0o600)
