"""`DbAuthenticator`: keys from the key store, the owner token and key, anonymous callers.

Hot path: one SHA-256 of the token, a 48-byte read of the WAL-index header that SQLite
keeps in `keys.db-shm` (mapped into memory: no system call, no GIL release — see
`_WalHeader`), one dict lookup. Only when that header changed is `PRAGMA data_version`
read, and the key table is reloaded only when that says another connection committed —
which is how a key revoked, rotated or changed by `olp keys` (another process) takes effect
on the very next request without a restart and without a query per request.

Last-used times are collected in memory and written in batches by `run_background()` on a
worker thread (its own connection), so no request ever waits on a write. Each batch bumps
`data_version` too, so it costs one reload of the key table per flush interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from olp.accounts.identity import ANONYMOUS, OWNER_TOKEN_IDENTITY, Identity
from olp.accounts.keystore import KeyStore
from olp.errors import AuthRequired, InvalidApiKey, OLPError
from olp.observability import event_logger

__all__ = ["OWNER_TOKEN_IDENTITY", "DbAuthenticator", "KeyStoreUnavailable"]

log = event_logger("olp.accounts")

_NO_TOKEN = (
    'OLP API key required: send "Authorization: Bearer <key>" or "x-api-key: <key>". '
    "The owner key was printed when `olp start` first ran; `olp keys create` makes more."
)
_BAD_TOKEN = "OLP API key is invalid or has been revoked."


def _expired(identity: Identity) -> str:
    # The caller holds the key: its name and expiry are theirs to know.
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(identity.expires_at))
    return (
        f"OLP API key {identity.name!r} expired at {when}. Ask the owner for a new key, or to "
        f"extend this one: olp keys set {identity.key_id} --expires 30d"
    )


class KeyStoreUnavailable(OLPError):
    """The key table could not be read: member keys are refused until it can (fail closed)."""

    code = "key_store_unavailable"
    http_status = 503
    type = "server_error"


class DbAuthenticator:
    """Implements `Authenticator` over the key store plus the owner's static secrets.

    Why a dict lookup on the SHA-256 is a safe "constant-time comparison": the dict is
    keyed by SHA-256(secret), never by the secret. A timing difference in the lookup can
    at most tell an attacker something about SHA-256(guess) relative to stored digests;
    turning that into a working key needs a guess whose digest they can steer, i.e. a
    SHA-256 preimage. Python also locates the bucket by a keyed (randomised per process)
    SipHash of the digest, so even the probe order reveals nothing usable. The secrets
    themselves (256 bits) are never compared at all. Comparing the digest against every
    stored one with `hmac.compare_digest` would cost O(keys) per request for no gain.
    """

    def __init__(
        self,
        path: Path,
        owner_hashes: Iterable[str],
        *,
        allow_anonymous: bool,
        flush_interval_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = path
        self._owner = {bytes.fromhex(h): OWNER_TOKEN_IDENTITY for h in owner_hashes}
        self.allow_anonymous = allow_anonymous  # a config reload may change it
        self._flush_interval_s = flush_interval_s
        self._clock = clock
        # Used from the event loop only; opened here, possibly on another thread.
        self._store = KeyStore.open(path, check_same_thread=False)
        self._by_digest: dict[bytes, Identity] = dict(self._owner)
        self._version: int | None = None
        self._wal_header = _WalHeader(Path(f"{path}-shm"))
        self._seen_header: bytes | None = None
        self._touched: dict[str, float] = {}
        self._writer: KeyStore | None = None
        self._write_lock = threading.Lock()
        # A DatabaseError here surfaces at start, with its explanation.
        self._version = self._store.data_version()
        self._wal_header.open()  # the read above made SQLite create keys.db-shm
        self._load()

    # -- the hot path -------------------------------------------------------------------

    def authenticate(self, token: str | None) -> Identity:
        if token is None:
            if self.allow_anonymous:
                return ANONYMOUS
            raise AuthRequired(_NO_TOKEN)
        digest = hashlib.sha256(token.encode()).digest()
        owner = self._owner.get(digest)
        if owner is not None:  # the owner token works even if the key file is unreadable
            return owner
        self._refresh()
        identity = self._by_digest.get(digest)
        if identity is None:
            raise InvalidApiKey(_BAD_TOKEN)
        now = self._clock()
        if identity.expires_at is not None and now >= identity.expires_at:
            raise InvalidApiKey(_expired(identity))
        self._touched[identity.key_id] = now
        return identity

    def _refresh(self) -> None:
        header = self._wal_header.read()  # before data_version: see _WalHeader
        if header is not None and header == self._seen_header:
            return
        try:
            version = self._store.data_version()
            if version != self._version:
                self._load()
                self._version = version
            self._seen_header = header
        except OLPError as exc:  # DatabaseError: the file went away, got damaged, ...
            self._fail_closed(exc)

    def _load(self) -> None:
        table = dict(self._owner)
        for hex_digest, record in self._store.active_secrets():
            table[bytes.fromhex(hex_digest)] = record.identity()
        self._by_digest = table
        log.debug("keys_loaded", keys=len(table) - len(self._owner))

    def _fail_closed(self, exc: Exception) -> None:
        # A key revoked a moment ago must not work because we could not read that it was:
        # drop every stored key until a read succeeds (the next request retries).
        self._by_digest = dict(self._owner)
        self._version = None
        self._seen_header = None
        log.error("key_store_unreadable", path=str(self._path), error=str(exc))
        raise KeyStoreUnavailable(
            "OLP cannot read its key store right now; the owner should check the server log."
        ) from exc

    # -- last used, off the hot path ----------------------------------------------------

    async def run_background(self) -> None:
        """Write last-used times every `flush_interval_s` until cancelled."""
        while True:
            await asyncio.sleep(self._flush_interval_s)
            await self.flush()

    async def flush(self) -> None:
        """Write the last-used times collected so far (on a worker thread)."""
        pending, self._touched = self._touched, {}
        if not pending:
            return
        try:
            await asyncio.to_thread(self._write, pending)
        except Exception as exc:
            # Keep them for the next round; newer times collected meanwhile win.
            self._touched = {**pending, **self._touched}
            log.warning("last_used_update_failed", path=str(self._path), error=str(exc))

    def _write(self, pending: dict[str, float]) -> None:
        with self._write_lock:
            if self._writer is None:
                self._writer = KeyStore.open(self._path, check_same_thread=False)
            self._writer.touch(pending)

    async def aclose(self) -> None:
        """Final flush, then close both connections."""
        await self.flush()
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        self._wal_header.close()  # before the connection that keeps `-shm` in place
        with contextlib.suppress(Exception):
            self._store.close()


class _WalHeader:
    """The WAL-index header of a WAL-mode database, read from its mapped `-shm` file.

    Why an unchanged header proves that no other connection committed since the
    `data_version` read it was stored with (the header is read first, so a commit between
    the two shows as a changed header next time):
    - `data_version` itself is SQLite noticing, when a read starts, that this very header
      differs from the one it cached; the header is what SQLite trusts for the same question.
    - every commit in WAL mode ends by rewriting the header in shared memory
      (`walIndexWriteHdr`), with its change counter `iChange` incremented, its frame count
      and checksums updated; a WAL restart after a checkpoint changes the salts. So a
      finished commit (the CLI has returned) has always changed these 48 bytes.
    - the file is mapped MAP_SHARED, so another process's write is visible at once; a
      torn read while a commit is half done only looks changed (a needless data_version).
    - WAL mode sticks to the file (open_database sets it) and cannot be switched off while
      our connection is open; SQLite truncates or rebuilds `-shm` only when no connection
      has it open, and ours (the key store's) keeps it open for the server's life. A file
      swapped in by rename would escape both this and data_version alike (as before).
    Anything unexpected — no `-shm` file, too short, not mappable — gives None, and the
    caller reads data_version on every request, as it did before this existed.
    """

    _SIZE = 48  # the first copy of the header (SQLite writes the second, then this one)

    def __init__(self, path: Path) -> None:
        self._path = path
        self._map: mmap.mmap | None = None

    def open(self) -> None:
        try:
            with self._path.open("rb") as f:
                if os.fstat(f.fileno()).st_size >= 2 * self._SIZE:
                    self._map = mmap.mmap(f.fileno(), 2 * self._SIZE, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            self._map = None

    def read(self) -> bytes | None:
        if self._map is None:
            return None
        return self._map[: self._SIZE]

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
