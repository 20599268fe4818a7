"""`olp keys`: output, storage, and every kind of bad input.

Most tests run the click command in-process against a real keys.db (a child process per
call costs ~0.6 s of interpreter start); the smoke tests at the end run `python -m olp`.
"""

from __future__ import annotations

import calendar
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from keys_cli import Run, olp_keys, olp_keys_process
from olp.accounts.keystore import MIGRATIONS, KeyStore
from olp.accounts.owner_key import hash_key

KEY_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def ok(home: Path, *args: str, run: Callable[..., Run] = olp_keys) -> str:
    proc = run(home, *args)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def bad(home: Path, *args: str, run: Callable[..., Run] = olp_keys) -> str:
    """Exit code 2, a message, no traceback; returns stderr."""
    proc = run(home, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip()
    return proc.stderr


def listed(home: Path) -> dict[str, dict[str, object]]:
    return {k["name"]: k for k in json.loads(ok(home, "list", "--json"))["keys"]}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_create_json_is_one_object_and_only_the_hash_is_stored(home: Path) -> None:
    out = ok(home, "create", "--name", "alice", "--json")
    created = json.loads(out)  # the whole of stdout is one JSON object
    assert set(created) == {"id", "key", "name", "tier"}
    assert created["name"] == "alice" and created["tier"] == "member"
    assert created["id"].startswith("key_") and len(created["id"]) == 12
    key = created["key"]
    assert key.startswith("olp_") and len(key) == 47 and set(key[4:]) <= KEY_CHARS
    db = home / "keys.db"
    assert oct(db.stat().st_mode & 0o777) == "0o600"
    rows = sqlite3.connect(db).execute("SELECT secret_sha256 FROM keys").fetchall()
    assert rows == [(hash_key(key),)]
    assert key.encode() not in db.read_bytes()


def test_create_prints_the_key_once_with_how_to_use_it(home: Path) -> None:
    out = ok(home, "create", "--name", "bob", "--models", "gpt-*", "--rpm", "5")
    key = next(w for w in out.split() if w.startswith("olp_"))
    assert f"OPENAI_API_KEY={key}" in out and "OPENAI_BASE_URL=http://" in out
    assert "only time" in out
    for args in (("list",), ("list", "--json")):
        assert key not in ok(home, *args)


def test_a_usd_budget_says_it_needs_priced_models(home: Path) -> None:
    note = "only uses models OLP can price; `olp config check` marks the others"
    assert note not in ok(home, "create", "--name", "free", "--rpm", "5")
    assert note in ok(home, "create", "--name", "kid", "--usd-month", "5")
    assert note in ok(home, "set", "free", "--usd-month", "2.5")
    assert note not in ok(home, "set", "free", "--usd-month", "none")


def test_list_shows_settings_limits_and_revocation(home: Path) -> None:
    ok(
        home,
        "create",
        "--name",
        "alice",
        "--models",
        "gpt-*,sonnet",
        "--models",
        "haiku",
        "--providers",
        "claude",
        "--rpm",
        "10",
        "--rpd",
        "100",
        "--tpd",
        "5000",
        "--usd-month",
        "12.5",
        "--concurrent",
        "2",
    )
    ok(home, "create", "--name", "boss", "--tier", "owner")
    ok(home, "revoke", "boss")
    keys = listed(home)
    alice = keys["alice"]
    assert alice["allowed_models"] == ["gpt-*", "sonnet", "haiku"]
    assert alice["allowed_providers"] == ["claude"]
    limits = {"rpm": 10, "rpd": 100, "rp7d": None, "rp30d": None, "tpd": 5000}
    limits |= {"usd_month": 12.5, "concurrent": 2}
    assert alice["limits"] == limits
    assert alice["revoked_at"] is None and alice["last_used"] is None
    assert keys["boss"]["tier"] == "owner" and keys["boss"]["revoked_at"] is not None
    table = ok(home, "list")
    assert "alice" in table and "rpm 10" in table and "usd/month 12.5" in table
    assert "concurrent 2" in table
    assert "revoked" in table
    assert "boss" not in ok(home, "list", "--active")


def test_set_changes_only_what_it_names(home: Path) -> None:
    ok(home, "create", "--name", "alice", "--rpm", "10", "--rpd", "100", "--models", "gpt-*")
    ok(home, "set", "alice", "--rpm", "none", "--usd-month", "3", "--concurrent", "4")
    alice = listed(home)["alice"]
    limits = {"rpm": None, "rpd": 100, "rp7d": None, "rp30d": None, "tpd": None}
    limits |= {"usd_month": 3.0, "concurrent": 4}
    assert alice["limits"] == limits
    ok(home, "set", "alice", "--concurrent", "none")
    assert listed(home)["alice"]["limits"]["concurrent"] is None  # type: ignore[index]
    ok(home, "set", "alice", "--rp7d", "50", "--rp30d", "150")
    rolling = listed(home)["alice"]["limits"]
    assert (rolling["rp7d"], rolling["rp30d"], rolling["rpd"]) == (50, 150, 100)  # type: ignore[index]
    assert "rp7d 50, rp30d 150" in ok(home, "list")
    assert alice["allowed_models"] == ["gpt-*"]
    ok(home, "set", str(alice["id"]), "--models", "*", "--providers", "a,b", "--name", "al")
    al = listed(home)["al"]
    assert al["id"] == alice["id"]
    assert al["allowed_models"] is None and al["allowed_providers"] == ["a", "b"]


def test_rotate_keeps_id_and_settings(home: Path) -> None:
    first = json.loads(ok(home, "create", "--name", "alice", "--rpm", "7", "--json"))
    out = ok(home, "rotate", "alice")
    second = next(w for w in out.split() if w.startswith("olp_"))
    assert second != first["key"] and "old one no longer works" in out
    alice = listed(home)["alice"]
    assert alice["id"] == first["id"] and alice["limits"]["rpm"] == 7  # type: ignore[index]
    stored = sqlite3.connect(home / "keys.db").execute("SELECT secret_sha256 FROM keys")
    assert stored.fetchall() == [(hash_key(second),)]


def test_revoke_is_idempotent_and_frees_the_name(home: Path) -> None:
    first = json.loads(ok(home, "create", "--name", "alice", "--json"))
    assert "Revoked" in ok(home, "revoke", first["id"])
    assert "already revoked" in ok(home, "revoke", "alice")
    second = json.loads(ok(home, "create", "--name", "alice", "--json"))
    assert second["id"] != first["id"]
    assert "Revoked" in ok(home, "revoke", "alice")  # the name now means the new key


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("create",), "Missing option '--name'"),
        (("create", "--name", ""), "name: must be"),
        (("create", "--name", "key_abcd1234"), "looks like a key id"),
        (("create", "--name", "x", "--tier", "admin"), "'admin' is not one of"),
        (("create", "--name", "x", "--rpm", "ten"), "'ten' is not a whole number"),
        (("create", "--name", "x", "--rpm", "0"), "must be positive"),
        (("create", "--name", "x", "--rpd", "-5"), "must be positive"),
        (("create", "--name", "x", "--tpd", "1.5"), "is not a whole number"),
        (("create", "--name", "x", "--rpm", "9" * 25), "rpm: must be a whole number from 1 to"),
        (("set", "alice", "--tpd", "10" * 10), "tpd: must be a whole number from 1 to"),
        (("create", "--name", "x", "--usd-month", "lots"), "is not an amount in USD"),
        (("create", "--name", "x", "--concurrent", "0"), "must be positive"),
        (("create", "--name", "x", "--expires", "soon"), "'soon' is not a time"),
        (("create", "--name", "x", "--expires", "2020-01-01"), "is already past; to stop a"),
        (("set", "alice", "--expires", "2026-02-30"), "'2026-02-30' is not a time"),
        (("set", "alice", "--expires", "9999-12-31"), "expires: must be a time before 9999"),
        (("set", "alice", "--expires", "0001-01-01T00:00+05:00"), "is already past"),
        (("set", "alice", "--concurrent", "two"), "'two' is not a whole number"),
        (("create", "--name", "x", "--usd-month", "nan"), "must be positive"),
        (("create", "--name", "x", "--models", "gpt 4"), "models: 'gpt 4' is not"),
        (("create", "--name", "x", "--providers", ","), "providers: '' is not"),
        (("revoke",), "Missing argument 'KEY'"),
        (("revoke", "nobody"), "no key with id or name 'nobody'"),
        (("rotate", "nobody"), "no key with id or name 'nobody'"),
        (("set", "nobody", "--rpm", "3"), "no key with id or name 'nobody'"),
        (("set", "alice"), "nothing to change"),
        (("set", "alice", "--rpm", "many"), "'many' is not a whole number"),
        (("set", "alice", "--name", "bob"), "a key named 'bob' already exists"),
        (("create", "--name", "alice"), "a key named 'alice' already exists"),
        (("set", "alice", "--models", ""), "models: '' is not"),
        (("list", "--bogus"), "No such option"),
    ],
)
def test_bad_input_is_a_clear_message_and_exit_2(
    home: Path, args: tuple[str, ...], fragment: str
) -> None:
    store = KeyStore.open(home / "keys.db")  # in-process: faster than two CLI runs
    store.create("alice")
    store.create("bob")
    store.close()
    assert fragment in bad(home, *args)


def test_changing_a_revoked_key_is_refused(home: Path) -> None:
    ok(home, "create", "--name", "alice")
    ok(home, "revoke", "alice")
    assert "is revoked" in bad(home, "rotate", "alice")
    assert "is revoked" in bad(home, "set", "alice", "--rpm", "3")


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("create", "--name", "x"),
        ("revoke", "x"),
        ("rotate", "x"),
        ("set", "x", "--rpm", "1"),
    ],
)
def test_damaged_database_is_reported_and_kept(home: Path, args: tuple[str, ...]) -> None:
    home.mkdir(parents=True)
    db = home / "keys.db"
    garbage = b"this is not a database at all" * 200
    db.write_bytes(garbage)
    err = bad(home, *args)
    assert str(db) in err and "move it aside" in err
    assert db.read_bytes() == garbage  # never silently discarded


def test_truncated_database_is_reported_and_kept(home: Path) -> None:
    ok(home, "create", "--name", "alice")
    db = home / "keys.db"
    data = db.read_bytes()
    db.write_bytes(data[:1024] + b"\xff" * (len(data) - 1024))
    err = bad(home, "list")
    assert str(db) in err
    assert db.stat().st_size == len(data)


def test_locked_database_is_reported(home: Path) -> None:
    ok(home, "create", "--name", "alice")
    holder = sqlite3.connect(home / "keys.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process mid-write, for longer than we wait
    try:
        err = bad(home, "create", "--name", "bob")
        assert "locked" in err and "retry" in err
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    ok(home, "create", "--name", "bob")  # and works once the lock is gone


def test_a_key_file_from_before_the_concurrent_limit_keeps_its_keys(home: Path) -> None:
    home.mkdir()
    with sqlite3.connect(home / "keys.db") as conn:  # schema 1, as an older OLP wrote it
        conn.executescript(MIGRATIONS[0].sql)
        conn.execute(
            "INSERT INTO keys (id, name, tier, secret_sha256, created, rpm) "
            "VALUES ('key_old00001', 'old', 'member', 'ab', 1.0, 5)"
        )
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    old = listed(home)["old"]
    assert old["expires_at"] is None
    assert old["limits"] == {
        "rpm": 5,
        "rpd": None,
        "rp7d": None,
        "rp30d": None,
        "tpd": None,
        "usd_month": None,
        "concurrent": None,
    }
    ok(home, "set", "old", "--concurrent", "3")
    assert listed(home)["old"]["limits"]["concurrent"] == 3  # type: ignore[index]


def test_expiry_as_a_duration_a_date_a_time_or_never(home: Path) -> None:
    before = time.time()
    ok(home, "create", "--name", "guest", "--expires", "7d")
    expires = listed(home)["guest"]["expires_at"]
    assert isinstance(expires, float)
    assert before + 7 * 86_400 <= expires <= time.time() + 7 * 86_400
    out = ok(home, "set", "guest", "--expires", "2099-01-31")  # works through that day
    assert "expires 2099-02-01 00:00 UTC" in out
    assert listed(home)["guest"]["expires_at"] == calendar.timegm((2099, 2, 1, 0, 0, 0))
    ok(home, "set", "guest", "--expires", "20990131")  # the basic ISO form: the same day
    assert listed(home)["guest"]["expires_at"] == calendar.timegm((2099, 2, 1, 0, 0, 0))
    ok(home, "set", "guest", "--expires", "2099-03-01T18:30+02:00")
    assert listed(home)["guest"]["expires_at"] == calendar.timegm((2099, 3, 1, 16, 30, 0))
    ok(home, "set", "guest", "--rpm", "5")  # other changes keep the expiry
    assert listed(home)["guest"]["expires_at"] == calendar.timegm((2099, 3, 1, 16, 30, 0))
    assert "2099-03-01 16:30 UTC" in ok(home, "list")
    ok(home, "set", "guest", "--expires", "never")
    assert listed(home)["guest"]["expires_at"] is None


def test_an_expired_key_is_listed_as_expired(home: Path) -> None:
    store = KeyStore.open(home / "keys.db", clock=lambda: time.time() - 86_400)
    store.create("yesterday", expires_at=time.time() - 60)  # created when it was still ahead
    store.close()
    (row,) = [line for line in ok(home, "list").splitlines() if "yesterday" in line]
    assert " expired " in row
    assert "has expired and is refused until you extend it" in ok(home, "rotate", "yesterday")


# Smoke tests: the same behaviour through the installed `olp` entry point, a real process.


def test_the_olp_command_creates_and_lists_a_key(home: Path) -> None:
    created = json.loads(ok(home, "create", "--name", "alice", "--json", run=olp_keys_process))
    assert set(created) == {"id", "key", "name", "tier"}
    assert oct((home / "keys.db").stat().st_mode & 0o777) == "0o600"
    table = json.loads(ok(home, "list", "--json", run=olp_keys_process))["keys"]
    assert [k["id"] for k in table] == [created["id"]]


def test_the_olp_command_refuses_bad_input_with_exit_2(home: Path) -> None:
    err = bad(home, "create", "--name", "x", "--rpm", "ten", run=olp_keys_process)
    assert "'ten' is not a whole number" in err


def test_the_olp_command_reports_a_damaged_database(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "keys.db").write_bytes(b"this is not a database at all" * 200)
    err = bad(home, "list", run=olp_keys_process)
    assert str(home / "keys.db") in err and "move it aside" in err


def test_a_share_of_a_provider_that_is_not_configured_is_pointed_out(home: Path) -> None:
    home.mkdir()
    (home / "config.json").write_text(
        '{"providers": {"claude-me": {"type": "anthropic-http", "base_url": "http://127.0.0.1:9"}}}'
    )
    created = ok(home, "create", "--name", "kid", "--share", "claude-me=25%")
    assert "note: no provider named" not in created
    changed = ok(home, "set", "kid", "--share", "claude-typo=0.1")
    assert "note: no provider named 'claude-typo' is configured" in changed
    assert "shares claude-me 25%, claude-typo 10%" in changed
