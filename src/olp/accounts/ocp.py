"""Taking over from OCP (Open Claude Proxy, OLP's single-CLI predecessor): its keys, their
quotas and its usage log, read from `~/.ocp/ocp.db` without changing it.

OCP keeps each key's secret in plain text (`api_keys.key`); OLP keeps only the SHA-256 of
a secret, so an imported key is stored by the hash of OCP's secret and the same `ocp_…`
string keeps working against OLP. OCP's quotas map to OLP's limits: `quota_daily` to
requests per UTC day, `quota_weekly` to requests in the last 7 days and `quota_monthly`
to requests in the last 30 (OCP's own windows: a calendar day, a rolling 7 and a rolling
30 days). OCP's usage log counted characters, not tokens: imported ledger rows carry no
token counts and no cost, only who asked for which model, when, how long it took and
whether it worked.

Reading goes through a private copy of the database (and its write-ahead log, if any),
so not even SQLite's shared-memory file next to OCP's database is created or touched.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from olp.accounts.identity import KeyLimits
from olp.accounts.keyrecord import KEY_ID_PATTERN, MAX_COUNT_LIMIT, KeyRecord
from olp.accounts.keystore import KeyStore
from olp.accounts.ledger_rows import LEDGER_FILE, MIGRATIONS, RequestRecord, insert_imported
from olp.accounts.owner_key import hash_key
from olp.errors import OLPError
from olp.storage import DatabaseError, open_database

__all__ = [
    "IMPORT_ORIGIN",
    "KeyStep",
    "OcpData",
    "OcpKey",
    "OcpUsage",
    "apply_keys",
    "import_usage",
    "plan_keys",
    "read_ocp",
    "usage_records",
]

IMPORT_ORIGIN = "ocp"  # ledger rows' `imported_from`
_NAME_LIMIT = 64


class OcpReadError(OLPError):
    code = "ocp_unreadable"
    http_status = 400
    type = "invalid_request_error"


@dataclass(frozen=True, slots=True)
class OcpKey:
    ocp_id: int  # 0: OCP's admin key (`admin-key`, not a row of api_keys)
    secret: str
    name: str
    created: float
    revoked: bool
    limits: KeyLimits
    tier: Literal["owner", "member"] = "member"


@dataclass(frozen=True, slots=True)
class OcpUsage:
    ocp_id: int
    key_id: int | None
    key_name: str
    model: str
    elapsed_ms: int
    success: bool
    created: float


@dataclass(frozen=True, slots=True)
class OcpData:
    path: Path
    keys: tuple[OcpKey, ...]
    usage: tuple[OcpUsage, ...]
    skipped: tuple[str, ...]  # rows that could not be read, and why


@dataclass(frozen=True, slots=True)
class KeyStep:
    """What the migration does with one OCP key: `add` it (as `name`), or nothing because
    OLP already knows its secret (`present`, as `existing`)."""

    key: OcpKey
    action: Literal["add", "present"]
    name: str
    existing: KeyRecord | None = None


def read_ocp(ocp_home: Path) -> OcpData:
    """OCP's keys and usage log from `<ocp_home>/ocp.db`; OcpReadError names any problem."""
    path = ocp_home / "ocp.db"
    if not path.is_file():
        raise OcpReadError(f"no OCP database at {path}; give OCP's folder with --ocp-home DIR")
    with _private_copy(path) as copy:
        try:
            conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise OcpReadError(f"cannot open {path}: {exc}") from exc
        try:
            skipped: list[str] = []
            keys = (*_admin_key(ocp_home), *_keys(conn, skipped))
            usage = tuple(_usage(conn, skipped))
        except sqlite3.Error as exc:
            raise OcpReadError(f"{path} is not an OCP database OLP can read: {exc}") from exc
        finally:
            conn.close()
    return OcpData(path, keys, usage, tuple(skipped))


def plan_keys(store: KeyStore, keys: Sequence[OcpKey]) -> list[KeyStep]:
    """Each OCP key's step; names an active OLP key already has get an ` (ocp)` suffix."""
    steps: list[KeyStep] = []
    taken: set[str] = set()
    for key in keys:
        existing = store.find_secret(hash_key(key.secret))
        if existing is not None:
            steps.append(KeyStep(key, "present", existing.name, existing))
            continue
        name = _free_name(store, key, taken)
        if not key.revoked:
            taken.add(name)
        steps.append(KeyStep(key, "add", name))
    return steps


def apply_keys(store: KeyStore, steps: Sequence[KeyStep]) -> dict[int, str]:
    """Add the planned keys; OCP key id -> OLP key id, for every key (added or present)."""
    ids: dict[int, str] = {}
    for step in steps:
        key = step.key
        if step.existing is not None:
            ids[key.ocp_id] = step.existing.id
            continue
        record = store.adopt(
            step.name,
            hash_key(key.secret),
            created=key.created,
            tier=key.tier,
            revoked_at=key.created if key.revoked else None,
            limits=key.limits,
        )
        ids[key.ocp_id] = record.id
    return ids


def usage_records(
    usage: Sequence[OcpUsage], key_ids: Mapping[int, str], provider: str
) -> list[RequestRecord]:
    """OCP's usage rows as ledger rows answered by `provider` (the claude-cli provider that
    takes OCP's place); a row of a key OLP does not have is booked to `anonymous`."""
    records = []
    for row in usage:
        key_id = key_ids.get(row.key_id) if row.key_id is not None else None
        records.append(
            RequestRecord(
                request_id=f"ocp_usage_{row.ocp_id}",
                key_id=key_id or "anonymous",
                key_name=row.key_name if key_id else "anonymous",
                requested_model=row.model,
                provider=provider,
                model=row.model,
                status=200 if row.success else 502,
                error_code=None if row.success else "ocp_request_failed",
                latency_ms=float(row.elapsed_ms),
                ts=row.created,
            )
        )
    return records


def import_usage(home: Path, records: Sequence[RequestRecord]) -> int:
    """Add the rows to `$OLP_HOME/ledger.db` (skipping those imported before)."""
    conn = open_database(home / LEDGER_FILE, MIGRATIONS)
    try:
        return insert_imported(conn, IMPORT_ORIGIN, records)
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot write {home / LEDGER_FILE}: {exc}") from exc
    finally:
        conn.close()


# -- reading OCP's tables ---------------------------------------------------------------


@contextmanager
def _private_copy(path: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="olp-ocp-") as tmp:
        copy = Path(tmp, "ocp.db")
        try:
            shutil.copyfile(path, copy)
            wal = path.with_name(path.name + "-wal")
            if wal.is_file():
                shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        except OSError as exc:
            raise OcpReadError(f"cannot read {path}: {exc.strerror or exc}") from exc
        yield copy


def _admin_key(ocp_home: Path) -> Iterator[OcpKey]:
    """OCP's admin key (`<ocp_home>/admin-key`), which becomes an OLP owner key."""
    path = ocp_home / "admin-key"
    try:
        secret = path.read_text().strip()
        created = path.stat().st_mtime
    except (OSError, UnicodeDecodeError):
        return
    if secret:
        yield OcpKey(0, secret, "ocp-admin", created, False, KeyLimits(), tier="owner")


def _keys(conn: sqlite3.Connection, skipped: list[str]) -> Iterator[OcpKey]:
    columns = _columns(conn, "api_keys")
    # (OCP added the quota columns later: an older database lacks them.)
    wanted = ("quota_daily", "quota_weekly", "quota_monthly")
    quotas = [c if c in columns else "NULL" for c in wanted]
    rows = conn.execute(
        f"SELECT id, key, name, created_at, revoked, {', '.join(quotas)} FROM api_keys ORDER BY id"
    )
    for ocp_id, secret, name, created, revoked, daily, weekly, monthly in rows:
        if not isinstance(secret, str) or not secret.strip():
            skipped.append(f"api_keys row {ocp_id}: no key")
            continue
        yield OcpKey(
            ocp_id=int(ocp_id),
            secret=secret,
            name=str(name or ""),
            created=_time(created) or 0.0,
            revoked=bool(revoked),
            limits=KeyLimits(rpd=_quota(daily), rp7d=_quota(weekly), rp30d=_quota(monthly)),
        )


def _usage(conn: sqlite3.Connection, skipped: list[str]) -> Iterator[OcpUsage]:
    if not _columns(conn, "usage_log"):
        return
    rows = conn.execute(
        "SELECT id, key_id, key_name, model, elapsed_ms, success, created_at FROM usage_log "
        "ORDER BY id"
    )
    for ocp_id, key_id, key_name, model, elapsed_ms, success, created in rows:
        when = _time(created)
        if when is None:
            skipped.append(f"usage_log row {ocp_id}: unreadable time {created!r}")
            continue
        yield OcpUsage(
            ocp_id=int(ocp_id),
            key_id=key_id if isinstance(key_id, int) else None,
            key_name=str(key_name or "anonymous"),
            model=str(model or "unknown"),
            elapsed_ms=elapsed_ms if isinstance(elapsed_ms, int) and elapsed_ms >= 0 else 0,
            success=bool(success),
            created=when,
        )


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _time(value: object) -> float | None:
    """OCP's times are SQLite's `datetime('now')`: `YYYY-MM-DD HH:MM:SS`, UTC."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace(" ", "T"))
    except ValueError:
        return None
    return when.replace(tzinfo=when.tzinfo or UTC).timestamp()


def _quota(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_COUNT_LIMIT:
        return value
    return None


def _free_name(store: KeyStore, key: OcpKey, taken: set[str]) -> str:
    """OCP's name made a valid OLP key name no active key has (revoked keys keep theirs)."""
    base = "".join(ch for ch in key.name if ch.isprintable()).strip()[:_NAME_LIMIT]
    if not base or KEY_ID_PATTERN.match(base):
        base = f"ocp-{key.ocp_id}"
    if key.revoked:
        return base
    for candidate in (base, f"{base[: _NAME_LIMIT - 6]} (ocp)", f"ocp-{key.ocp_id}"):
        if candidate not in taken and not store.name_taken(candidate):
            return candidate
    return f"ocp-{key.ocp_id}-{key.created:.0f}"[:_NAME_LIMIT]
