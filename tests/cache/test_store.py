"""Stores: TTL, per-namespace LRU limits, size limits, persistence, a corrupted file."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from cache_fakes import ANSWER

from olp.cache._disk import _is_busy
from olp.cache.codec import CODEC_VERSION, decode_events, encode_events
from olp.cache.memory import MemoryStore
from olp.cache.sqlite_store import SqliteStore
from olp.config import CacheConfig
from olp.ir import Event, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from olp.storage import DatabaseError


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def answer(text: str) -> tuple[Event, ...]:
    return (TextDelta(text), Finish("stop"))


CFG = CacheConfig(ttl_s=60, max_entries_per_key=3, max_entry_bytes=1000)


@pytest.fixture
def warnings() -> Iterator[list[logging.LogRecord]]:
    """Records of the `olp.cache` logger, however logging was configured by other tests."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.WARNING)
    logger = logging.getLogger("olp.cache")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


# -- codec -----------------------------------------------------------------------------------


def test_codec_round_trips_every_event_type() -> None:
    events: tuple[Event, ...] = (
        ReasoningDelta("hmm"),
        TextDelta("héllo \u2028 \x00"),
        ToolCallDelta(0, "call_1", "lookup", '{"q":'),
        ToolCallDelta(0, None, None, '"x"}'),
        Usage(10, 20, 3, 4, 5, 0.0012),
        Usage(1, 2),
        Finish("tool_calls"),
    )
    assert decode_events(encode_events(events)) == events
    assert decode_events(encode_events(())) == ()


def test_codec_rejects_other_versions_and_garbage() -> None:
    body = encode_events(ANSWER)
    other = body.replace(f"[{CODEC_VERSION},".encode(), f"[{CODEC_VERSION + 1},".encode(), 1)
    assert decode_events(other) is None
    for junk in (b"", b"\x00\xff", b"{}", b"[1, 2]", b'[1, ["?", 1]]', b'[1, ["t"]]'):
        assert decode_events(junk) is None


# -- memory ----------------------------------------------------------------------------------


def test_memory_put_and_lookup() -> None:
    store = MemoryStore(CFG, Clock())
    assert store.put("ns", "k", ANSWER)
    hit = store.lookup("ns", "k")
    assert hit is not None
    assert hit.events == ANSWER
    assert hit.nbytes == len(encode_events(ANSWER))
    assert store.lookup("ns", "other") is None


def test_namespaces_are_isolated() -> None:
    store = MemoryStore(CFG, Clock())
    store.put("alice", "k", answer("a"))
    assert store.lookup("bob", "k") is None
    store.put("bob", "k", answer("b"))
    hit = store.lookup("alice", "k")
    assert hit is not None
    assert hit.events == answer("a")


def test_ttl_expiry_with_an_injected_clock() -> None:
    clock = Clock()
    store = MemoryStore(CFG, clock)
    store.put("ns", "k", ANSWER)
    clock.now += 59.9
    assert store.lookup("ns", "k") is not None
    clock.now += 0.1
    assert store.lookup("ns", "k") is None
    assert store.stats().entries == 0


def test_zero_ttl_caches_nothing() -> None:
    store = MemoryStore(CacheConfig(ttl_s=0), Clock())
    assert not store.put("ns", "k", ANSWER)
    assert store.lookup("ns", "k") is None


def test_lru_limit_is_per_namespace() -> None:
    store = MemoryStore(CFG, Clock())
    for k in ("a", "b", "c"):
        store.put("ns", k, answer(k))
    store.put("other", "x", answer("x"))
    assert store.lookup("ns", "a") is not None  # a is now the most recent
    store.put("ns", "d", answer("d"))
    assert store.lookup("ns", "b") is None  # the least recently used went
    assert [k for k in "acd" if store.lookup("ns", k) is None] == []
    assert store.lookup("other", "x") is not None  # another namespace is untouched
    assert store.stats("ns").entries == 3


def test_an_answer_over_max_entry_bytes_is_not_cached() -> None:
    store = MemoryStore(CFG, Clock())
    assert not store.put("ns", "big", answer("x" * 1000))
    assert store.lookup("ns", "big") is None
    assert store.put("ns", "small", answer("x" * 900))


def test_memory_budget_evicts_across_namespaces() -> None:
    store = MemoryStore(CacheConfig(max_entry_bytes=10_000), Clock(), max_total_bytes=2500)
    store.put("a", "1", answer("x" * 900))
    store.put("b", "2", answer("x" * 900))
    store.put("c", "3", answer("x" * 900))
    assert store.lookup("a", "1") is None
    assert store.lookup("c", "3") is not None
    assert store.memory_bytes <= 2500


def test_delete_clear_and_stats() -> None:
    store = MemoryStore(CFG, Clock())
    store.put("a", "1", ANSWER)
    store.put("a", "2", ANSWER)
    store.put("b", "1", ANSWER)
    assert store.stats().entries == 3
    assert store.stats("a").bytes == 2 * len(encode_events(ANSWER))
    assert store.delete("a", "1")
    assert not store.delete("a", "1")
    assert store.clear("a") == 1
    assert store.namespaces() == ["b"]
    assert store.clear() == 1
    assert store.stats().entries == 0


def test_new_limits_apply_to_the_entries_held() -> None:
    clock = Clock()
    store = MemoryStore(CFG, clock)
    for k in ("a", "b", "c"):
        store.put("ns", k, answer(k))
        clock.now += 1
    store.put("other", "big", answer("x" * 500))
    assert store.lookup("ns", "a") is not None  # a is now the most recent
    # Fewer entries per key (b, the least recently used, goes), a smaller entry limit
    # (big goes), a shorter ttl_s (from when each was stored: a at 0 s, c at 2 s).
    dropped = store.reconfigure(CacheConfig(ttl_s=10, max_entries_per_key=2, max_entry_bytes=100))
    assert dropped == 2
    assert store.lookup("ns", "b") is None and store.lookup("other", "big") is None
    assert store.namespaces() == ["ns"]
    assert store.stats().entries == 2
    clock.now = 1_000_011.9
    assert store.lookup("ns", "a") is None
    assert store.lookup("ns", "c") is not None
    clock.now += 0.1
    assert store.lookup("ns", "c") is None


def test_a_longer_ttl_applies_to_answers_stored_from_then_on() -> None:
    clock = Clock()
    store = MemoryStore(CFG, clock)
    store.put("ns", "before", ANSWER)
    assert store.reconfigure(CacheConfig(ttl_s=3600)) == 0
    store.put("ns", "after", ANSWER)
    clock.now += 3599
    assert store.lookup("ns", "before") is None  # its 60 s, as when it was stored
    assert store.lookup("ns", "after") is not None


# -- sqlite ----------------------------------------------------------------------------------


def reopen(path: Path, cfg: CacheConfig = CFG, clock: Clock | None = None) -> SqliteStore:
    return SqliteStore(path, cfg, clock or Clock())


def test_entries_survive_a_restart_with_their_chunk_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    events = (*ANSWER[:2], ToolCallDelta(0, "c", "f", "{}"), Finish("tool_calls"))
    store = reopen(path)
    assert store.persistent
    store.put("ns", "k", events)
    store.close()

    async def main() -> None:
        again = reopen(path)
        try:
            assert again.lookup("ns", "k") is None  # memory only: not loaded yet
            hit = await again.get("ns", "k")
            assert hit is not None
            assert hit.events == events
            assert again.lookup("ns", "k") is not None  # now in the memory front
            assert await again.get("other", "k") is None
        finally:
            await again.aclose()

    asyncio.run(main())


def test_aclose_flushes_pending_writes(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"

    async def write() -> None:
        store = reopen(path)
        for i in range(200):
            store.put("ns", f"k{i}", answer(str(i)))
        await store.aclose()

    asyncio.run(write())
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM entries").fetchone()
    conn.close()
    assert count == CFG.max_entries_per_key  # the LRU limit applies on disk too


def test_ttl_applies_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    clock = Clock()
    store = reopen(path, clock=clock)
    store.put("ns", "k", ANSWER)
    store.close()
    clock.now += 61
    again = reopen(path, clock=clock)
    assert again.stats().entries == 0
    again.close()
    # ... and a lowered ttl_s shortens entries written before the change.
    clock.now = 2_000_000.0
    store = reopen(path, clock=clock)
    store.put("ns", "k", ANSWER)
    store.close()
    clock.now += 20
    again = reopen(path, CacheConfig(ttl_s=10), clock)
    assert again.stats().entries == 0
    again.close()


def test_lru_order_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    clock = Clock()
    store = reopen(path, clock=clock)
    for k in ("a", "b", "c"):
        clock.now += 1
        store.put("ns", k, answer(k))
    clock.now += 1
    assert store.lookup("ns", "a") is not None  # a becomes the most recently used
    store.close()
    again = reopen(path, clock=clock)
    again.put("ns", "d", answer("d"))  # evicts b, the least recently used
    assert again.stats("ns").entries == 3
    assert again.namespaces() == ["ns"]

    async def check() -> None:
        assert await again.get("ns", "b") is None
        assert await again.get("ns", "a") is not None

    asyncio.run(check())
    again.close()


def test_a_lowered_entry_limit_trims_at_start(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    store = reopen(path)
    for k in ("a", "b", "c"):
        store.put("ns", k, answer(k))
    store.close()
    again = reopen(path, CacheConfig(ttl_s=60, max_entries_per_key=1))
    assert again.stats("ns").entries == 1
    again.close()


def test_entries_that_new_limits_drop_leave_the_file_too(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    store = reopen(path)
    for k in ("a", "b", "c"):
        store.put("ns", k, answer(k))
    assert store.reconfigure(CacheConfig(ttl_s=60, max_entries_per_key=1)) == 2
    store.close()
    again = reopen(path)  # (the old limit: only what is in the file counts)
    assert again.stats("ns").entries == 1
    again.close()


def test_reads_from_disk_when_memory_cannot_hold_the_answer(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "cache.db", CFG, Clock(), memory_bytes=10)

    async def main() -> None:
        store.put("ns", "k", ANSWER)
        assert store.lookup("ns", "k") is None  # not held in memory
        assert store.flush(5)
        hits = await asyncio.gather(*(store.get("ns", "k") for _ in range(10)))
        assert all(h is not None and h.events == ANSWER for h in hits)
        await store.aclose()

    asyncio.run(main())


def test_an_undecodable_row_is_a_miss_and_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    store = reopen(path)
    store.put("ns", "k", ANSWER)
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE entries SET body = ?", (b"[999]",))
    conn.commit()
    conn.close()

    async def main() -> None:
        again = reopen(path)
        assert await again.get("ns", "k") is None
        assert again.stats().entries == 0
        await again.aclose()

    asyncio.run(main())


def test_a_corrupted_file_is_moved_aside_and_the_cache_keeps_working(
    tmp_path: Path, warnings: list[logging.LogRecord]
) -> None:
    path = tmp_path / "cache.db"
    garbage = bytes(range(256)) * 64
    path.write_bytes(garbage)
    (tmp_path / "cache.db-wal").write_bytes(b"stale wal")
    store = reopen(path)
    assert store.persistent
    aside = [p for p in tmp_path.glob("cache.db.corrupt-*") if not p.name.endswith("-wal")]
    assert len(aside) == 1
    assert aside[0].read_bytes() == garbage
    wal = tmp_path / "cache.db-wal"  # the bad file's WAL must not meet the fresh file
    assert not wal.exists() or wal.read_bytes() != b"stale wal"
    assert any(r.getMessage() == "cache_file_corrupt" for r in warnings)
    store.put("ns", "k", ANSWER)
    store.close()

    async def main() -> None:
        again = reopen(path)
        hit = await again.get("ns", "k")
        assert hit is not None
        assert hit.events == ANSWER
        await again.aclose()

    asyncio.run(main())


def test_a_locked_file_is_recognised_as_busy_not_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(path, timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError) as locked:
            other.execute("SELECT * FROM t")
        busy = DatabaseError("locked")
        busy.__cause__ = locked.value
        assert _is_busy(busy)
        bad = DatabaseError("bad")
        bad.__cause__ = sqlite3.DatabaseError("file is not a database")
        assert not _is_busy(bad)
    finally:
        other.close()
        holder.execute("ROLLBACK")
        holder.close()


def test_an_unusable_home_falls_back_to_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = reopen(blocker / "cache.db")
    assert not store.persistent
    store.put("ns", "k", ANSWER)
    assert store.lookup("ns", "k") is not None
    store.close()


# -- the file's layout -----------------------------------------------------------------------


def _disk_rows(path: Path) -> list[tuple[int, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT id, namespace, key FROM entries ORDER BY id").fetchall()
    conn.close()
    return rows


def test_a_replaced_entry_leaves_one_row_and_ids_count_on_after_a_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache.db"
    store = reopen(path)
    store.put("ns", "k", answer("one"))
    store.put("ns", "k", answer("two"))
    store.close()
    assert _disk_rows(path) == [(2, "ns", "k")]
    again = reopen(path)
    again.put("ns", "j", answer("three"))  # a new id, above every id in the file
    again.close()
    assert _disk_rows(path) == [(2, "ns", "k"), (3, "ns", "j")]


def test_a_leftover_older_row_of_an_entry_is_dropped_at_start(tmp_path: Path) -> None:
    # A replacement's delete can miss the file if the process dies between the two writes.
    path = tmp_path / "cache.db"
    store = reopen(path)
    store.put("ns", "k", answer("new"))
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO entries (id, namespace, key, nbytes, created_at, expires_at, used_at,"
            " body) VALUES (0, 'ns', 'k', 1, 1e9, 3e9, 9e9, ?)",
            (encode_events(answer("old")),),
        )
    conn.close()

    async def main() -> None:
        again = reopen(path)
        hit = await again.get("ns", "k")
        assert hit is not None and hit.events == answer("new")
        assert again.stats().entries == 1
        await again.aclose()

    asyncio.run(main())
    assert _disk_rows(path) == [(1, "ns", "k")]


def test_a_file_of_the_previous_layout_is_migrated_with_its_entries_and_lru_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE entries (
                namespace TEXT NOT NULL, key TEXT NOT NULL, nbytes INTEGER NOT NULL,
                created_at REAL NOT NULL, expires_at REAL NOT NULL, used_at REAL NOT NULL,
                body BLOB NOT NULL, PRIMARY KEY (namespace, key));
            CREATE TABLE control (id INTEGER PRIMARY KEY, action TEXT NOT NULL,
                namespace TEXT, requested_at REAL NOT NULL);
            PRAGMA user_version = 2;
            """
        )
        now = Clock().now
        for key, used in (("b", 3.0), ("a", 1.0), ("c", 2.0)):
            body = encode_events(answer(key))
            conn.execute(
                "INSERT INTO entries VALUES ('ns', ?, ?, ?, ?, ?, ?)",
                (key, len(body), now, now + 60, now + used, body),
            )
    conn.close()
    store = reopen(path)
    assert [(ns, key) for _, ns, key in _disk_rows(path)] == [("ns", "a"), ("ns", "c"), ("ns", "b")]
    with contextlib.closing(sqlite3.connect(path)) as check:
        indexes = check.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'entries'"
        ).fetchall()
    assert indexes == []  # no second B-tree to write on every insert and eviction
    store.put("ns", "d", answer("d"))  # evicts a, the least recently used

    async def main() -> None:
        assert await store.get("ns", "a") is None
        for key in ("b", "c", "d"):
            hit = await store.get("ns", key)
            assert hit is not None and hit.events == answer(key)
        await store.aclose()

    asyncio.run(main())


def test_weigh_counts_more_memory_for_the_answer_it_names() -> None:
    store = MemoryStore(CacheConfig(max_entry_bytes=10_000), Clock(), max_total_bytes=5000)
    store.put("a", "1", answer("x" * 900))
    held = store.lookup("a", "1")
    assert held is not None
    before = store.memory_bytes
    assert store.weigh("a", "1", held, 700)
    assert store.memory_bytes == before + 700
    store.put("a", "1", answer("y" * 900))  # replaced: the old answer is no longer counted
    assert not store.weigh("a", "1", held, 700)
    assert not store.weigh("a", "nope", held, 700)


def test_weighing_past_the_budget_unloads_the_least_recently_used() -> None:
    store = MemoryStore(CacheConfig(max_entry_bytes=10_000), Clock(), max_total_bytes=2500)
    store.put("a", "1", answer("x" * 900))
    store.put("b", "2", answer("x" * 900))
    held = store.lookup("b", "2")
    assert held is not None
    assert store.weigh("b", "2", held, 900)
    assert store.lookup("a", "1") is None  # made room
    assert store.lookup("b", "2") is held
    assert store.memory_bytes <= 2500
