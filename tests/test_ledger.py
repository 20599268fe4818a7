"""The usage ledger on real SQLite files: concurrency, batching, back-pressure, bad rows,
broken files, and no row lost when the process is told to stop (SIGTERM).
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from olp.accounts.ledger import SPILL_FILE, Ledger
from olp.accounts.ledger_rows import LEDGER_FILE, MIGRATIONS, AttemptRecord, RequestRecord
from olp.accounts.pricing import Cost
from olp.ir import Usage
from olp.storage import DatabaseError, open_database

from fakes.upstream import FakeUpstream, Slow
from olp_server import OWNER_TOKEN, ProcessServer, eventually, write_config

SRC = Path(__file__).resolve().parents[1] / "src"


def request(rid: str, **fields: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "key_id": "k_alice",
        "key_name": "alice",
        "requested_model": "smart",
        "provider": "alpha",
        "model": "gpt-4o-mini",
        "status": 200,
    }
    return RequestRecord(rid, **{**base, **fields})


def attempt(rid: str, hop: int, outcome: str = "served") -> AttemptRecord:
    return AttemptRecord(rid, hop, f"p{hop}", "m", outcome, code=None)  # type: ignore[arg-type]


def rows(path: Path, sql: str) -> list[Any]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def count(path: Path, table: str = "ledger_requests") -> int:
    return int(rows(path, f"SELECT COUNT(*) FROM {table}")[0][0])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "home" / LEDGER_FILE


@pytest.fixture
def ledger(db: Path) -> Iterator[Ledger]:
    led = Ledger(db)
    yield led
    led.close()


def test_200_concurrent_requests_are_exactly_200_rows(db: Path) -> None:
    async def serve_one(led: Ledger, i: int) -> None:
        rid = f"req_{i:03d}"
        await asyncio.sleep(random.random() / 100)
        led.record_attempt(attempt(rid, 0, "failed"))
        await asyncio.sleep(0)
        led.record_attempt(attempt(rid, 1))
        led.record_request(
            request(rid, hops=1, usage=Usage(10, 5), cost=Cost(1e-5, 1e-5, "registry"))
        )

    async def main() -> None:
        led = Ledger(db)
        await asyncio.gather(*(serve_one(led, i) for i in range(200)))
        await led.aclose()

    asyncio.run(main())
    assert count(db) == 200
    assert count(db, "ledger_attempts") == 400
    ids = rows(db, "SELECT request_id, COUNT(*) FROM ledger_attempts GROUP BY request_id")
    assert len(ids) == 200 and {n for _, n in ids} == {2}
    assert rows(db, "SELECT COUNT(DISTINCT request_id), SUM(prompt_tokens) FROM ledger_requests")[
        0
    ] == (200, 2000)


def test_200_threads_recording_at_once(ledger: Ledger, db: Path) -> None:
    barrier = threading.Barrier(200)

    def work(i: int) -> None:
        barrier.wait()
        ledger.record_request(request(f"t{i}"))
        ledger.record_attempt(attempt(f"t{i}", 0))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.flush_sync()
    assert count(db) == 200
    assert count(db, "ledger_attempts") == 200


def test_recording_does_no_io_the_writer_does(db: Path) -> None:
    led = Ledger(db, interval_s=60)  # the writer only wakes for a flush or a full batch
    try:
        for i in range(10):
            led.record_request(request(f"r{i}"))
        assert led.queue_depth() == 10
        assert count(db) == 0
        assert led.flush_sync()
        assert led.queue_depth() == 0
        assert count(db) == 10
    finally:
        led.close()


def test_rows_reach_disk_without_a_flush(ledger: Ledger, db: Path) -> None:
    for i in range(5):
        ledger.record_request(request(f"r{i}"))
    assert eventually(lambda: count(db) == 5, within_s=3)


def test_the_writer_takes_everything_queued_each_turn(db: Path) -> None:
    led = Ledger(db, interval_s=0.2, batch_rows=50)
    try:
        for i in range(120):
            led.record_request(request(f"r{i}"))
        # Three transactions of at most 50 rows, in one turn of the writer.
        assert eventually(lambda: count(db) == 120, within_s=3)
    finally:
        led.close()


def test_a_backlog_wakes_the_writer_before_its_turn(db: Path) -> None:
    # max_rows // 4 = 25 queued rows is a backlog: the writer is woken, not left to its
    # one-minute interval.
    led = Ledger(db, interval_s=60, batch_rows=10, max_rows=100)
    try:
        for i in range(40):
            led.record_request(request(f"r{i}"))
        assert eventually(lambda: count(db) >= 25, within_s=3)
    finally:
        led.close()
    assert count(db) == 40


def test_stored_fields(ledger: Ledger, db: Path) -> None:
    ledger.record_request(
        request(
            "req_1",
            hops=2,
            cache="miss",
            usage=Usage(
                1000, 200, cached_prompt_tokens=300, cache_write_tokens=50, reasoning_tokens=20
            ),
            cost=Cost(0.0, 0.0123, "provider"),
            latency_ms=812.5,
            ttft_ms=140.0,
            stream=True,
            ts=1_790_000_000.0,
        )
    )
    ledger.record_request(
        request("req_2", provider=None, model=None, status=503, error_code="all_providers_failed")
    )
    ledger.record_attempt(
        AttemptRecord(
            "req_1", 0, "claude", "sonnet", "failed", "RATE_LIMITED", "fallback", 30.0, "smart"
        )
    )
    assert ledger.flush_sync()
    first = rows(
        db,
        "SELECT request_id, ts, key_id, key_name, requested_model, provider, model, hops, cache,"
        " status, error_code, prompt_tokens, completion_tokens, cached_tokens,"
        " cache_write_tokens, reasoning_tokens, cost_usd, api_cost_usd, cost_source,"
        " latency_ms, ttft_ms, stream FROM ledger_requests ORDER BY id",
    )
    assert first[0] == (
        "req_1", 1_790_000_000.0, "k_alice", "alice", "smart", "alpha", "gpt-4o-mini", 2, "miss",
        200, None, 1000, 200, 300, 50, 20, 0.0, 0.0123, "provider", 812.5, 140.0, 1,
    )  # fmt: skip
    assert first[1][5:7] == (None, None) and first[1][9:11] == (503, "all_providers_failed")
    assert first[1][16:19] == (0.0, 0.0, "none")  # nothing answered: nothing spent
    assert rows(db, "SELECT request_id, chain, hop, provider, model, outcome, code, trigger,"
                " latency_ms FROM ledger_attempts") == [
        ("req_1", "smart", 0, "claude", "sonnet", "failed", "RATE_LIMITED", "fallback", 30.0)
    ]  # fmt: skip


def test_no_message_content_is_ever_stored(db: Path, ledger: Ledger) -> None:
    forbidden = {"content", "message", "messages", "prompt", "response", "body", "text"}
    for table in ("ledger_requests", "ledger_attempts"):
        columns = {name for _, name, *_ in rows(db, f"PRAGMA table_info({table})")}
        assert columns and not columns & forbidden, table
    assert "message" not in AttemptRecord.__dataclass_fields__


def test_locked_database_backs_up_then_spills_then_recovers(db: Path) -> None:
    led = Ledger(db, batch_rows=5, max_rows=20, block_s=0.05, busy_timeout_ms=50)
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the file
    try:
        for i in range(10):
            led.record_request(request(f"r{i}"))
        time.sleep(0.5)  # the writer has tried, failed and is backing off
        for i in range(10, 60):
            led.record_request(request(f"r{i}"))
        spill = db.with_name(SPILL_FILE)
        assert led.spilled_rows() > 0 and spill.exists()
        assert led.queue_depth() <= 20 + 5
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    led.close()
    stored = {rid for (rid,) in rows(db, "SELECT request_id FROM ledger_requests")}
    spilled = [orjson.loads(line) for line in spill.read_bytes().splitlines()]
    assert {s["table"] for s in spilled} == {"ledger_requests"}
    spilled_ids = {s["request_id"] for s in spilled}
    assert not stored & spilled_ids
    assert stored | spilled_ids == {f"r{i}" for i in range(60)}
    assert len(spilled) == led.spilled_rows() and led.lost_rows() == 0


def test_a_row_the_database_refuses_does_not_block_the_rest(ledger: Ledger, db: Path) -> None:
    ledger.record_request(request("good_1"))
    ledger.record_request(request("bad", key_id=object()))  # type: ignore[arg-type]
    ledger.record_request(request("good_2"))
    assert ledger.flush_sync()
    assert {r for (r,) in rows(db, "SELECT request_id FROM ledger_requests")} == {
        "good_1",
        "good_2",
    }
    spilled = [orjson.loads(line) for line in db.with_name(SPILL_FILE).read_bytes().splitlines()]
    assert [s["request_id"] for s in spilled] == ["bad"]
    ledger.record_request(request("good_3"))  # the writer carries on
    assert ledger.flush_sync() and count(db) == 3


def test_rows_after_close_are_still_written(db: Path) -> None:
    led = Ledger(db)
    led.record_request(request("before"))
    led.close()
    led.close()  # idempotent
    # A handler cancelled at shutdown records late: written directly, not turned away.
    led.record_request(request("after"))
    led.record_attempt(attempt("after", 0))
    assert sorted(r for (r,) in rows(db, "SELECT request_id FROM ledger_requests")) == [
        "after",
        "before",
    ]
    assert count(db, "ledger_attempts") == 1
    assert not db.with_name(SPILL_FILE).exists()
    assert led.flush_sync(0.1)


def test_rows_recorded_while_closing_are_all_written(db: Path) -> None:
    led = Ledger(db)
    recorded: list[str] = []
    closed = threading.Event()

    def recorder() -> None:
        late = 0
        while late < 20:
            rid = f"r{len(recorded)}"
            led.record_request(request(rid))
            recorded.append(rid)
            late += closed.is_set()
            time.sleep(0.0002)  # a busy server's pace, not a flood

    thread = threading.Thread(target=recorder)
    thread.start()
    time.sleep(0.05)
    led.close()
    closed.set()
    thread.join(30)
    assert len(recorded) > 20
    stored = [r for (r,) in rows(db, "SELECT request_id FROM ledger_requests")]
    assert sorted(stored) == sorted(recorded)  # every one, once
    assert not db.with_name(SPILL_FILE).exists()


def test_a_late_row_the_database_cannot_take_is_spilled(db: Path) -> None:
    led = Ledger(db)
    led.close()
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        led.record_request(request("late"))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert count(db) == 0
    assert orjson.loads(db.with_name(SPILL_FILE).read_bytes())["request_id"] == "late"
    assert led.spilled_rows() == 1 and led.lost_rows() == 0


def test_a_corrupted_file_is_refused_and_kept(db: Path) -> None:
    db.parent.mkdir(parents=True)
    garbage = b"this is not a database" * 100
    db.write_bytes(garbage)
    with pytest.raises(DatabaseError) as err:
        Ledger(db)
    assert str(db) in str(err.value) and "move it aside" in str(err.value)
    assert db.read_bytes() == garbage


def test_a_newer_schema_is_refused(db: Path) -> None:
    Ledger(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(DatabaseError, match="newer OLP"):
        Ledger(db)


def test_a_version_1_ledger_keeps_its_rows_and_loses_the_unused_indexes(db: Path) -> None:
    open_database(db, MIGRATIONS[:1]).close()  # a ledger made by schema 1
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO ledger_attempts (request_id, ts, chain, hop, provider, model, "
            "outcome, latency_ms) VALUES ('r1', 1.0, 'c', 0, 'p', 'm', 'served', 1.0)"
        )
    conn.close()
    ledger = Ledger(db)
    ledger.record_request(request("r2"))
    ledger.close()
    indexes = {n for (n,) in rows(db, "SELECT name FROM sqlite_master WHERE type = 'index'")}
    # What the queries use: requests by time, and attempts that were not served by time.
    assert indexes == {"ledger_requests_ts", "ledger_attempts_unserved_ts"}
    assert rows(db, "PRAGMA user_version") == [(len(MIGRATIONS),)]
    assert count(db, "ledger_attempts") == 1 and count(db) == 1


_CHILD = textwrap.dedent(
    """
    import asyncio, signal, sys
    from pathlib import Path
    from olp.accounts.ledger import Ledger
    from olp.accounts.ledger_rows import AttemptRecord, RequestRecord

    async def main() -> None:
        ledger = Ledger(Path(sys.argv[1]), batch_rows=200)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        i = 0
        while not stop.is_set():
            rid = f"req_{i}"
            ledger.record_attempt(AttemptRecord(rid, 0, "p", "m", "served"))
            ledger.record_request(RequestRecord(rid, "k", "kid", "m", "p", "m", 200))
            print(rid, flush=True)
            i += 1
            if i % 25 == 0:
                await asyncio.sleep(0)
        await ledger.aclose()
        print("closed", flush=True)

    asyncio.run(main())
    """
)


def test_sigterm_while_writing_loses_nothing(tmp_path: Path, db: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    # Let it write for a while (several batches on disk, more queued), then stop it.
    assert eventually(lambda: len(lines) > 5000 and count_or_zero(db) > 0, within_s=20)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    reader.join(timeout=5)
    proc.stdout.close()
    assert lines[0].strip() == "ready" and lines[-1].strip() == "closed"
    reported = [line.strip() for line in lines[1:-1]]
    stored = [rid for (rid,) in rows(db, "SELECT request_id FROM ledger_requests ORDER BY id")]
    assert len(reported) > 5000
    assert stored == reported  # every row it reported, in order, and nothing else
    assert count(db, "ledger_attempts") == len(reported)
    assert not db.with_name(SPILL_FILE).exists()


def count_or_zero(db: Path) -> int:
    try:
        return count(db)
    except sqlite3.Error:
        return 0


def test_sigterm_under_load_one_row_per_response(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "home"
    write_config(
        home,
        {
            "providers": {
                "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
            }
        },
    )
    # Every answer takes a while, so plenty are in flight when SIGTERM arrives.
    upstream.script(*[Slow(first_byte_delay_s=0.05, chunk_delay_s=0.05) for _ in range(400)])
    answered: list[int] = []
    replayed: list[int] = []  # cache hits: a request row, no attempt row
    enough = asyncio.Event()

    async def one(client: httpx.AsyncClient, base: str) -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        try:
            resp = await client.post(f"{base}/v1/chat/completions", json=body)
        except httpx.HTTPError:
            return  # refused once the server stopped accepting: no response, no row
        answered.append(resp.status_code)
        if resp.headers.get("x-olp-cache") == "hit":
            replayed.append(resp.status_code)
        if len(answered) >= 40:
            enough.set()

    async def load(server: ProcessServer) -> None:
        headers = {"authorization": f"Bearer {OWNER_TOKEN}"}
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(headers=headers, limits=limits, timeout=30) as client:
            tasks = [asyncio.create_task(one(client, server.base_url)) for _ in range(120)]
            await enough.wait()
            server.terminate()
            # A second wave meets a server that is stopping: some still get in, some not.
            for _ in range(80):
                tasks.append(asyncio.create_task(one(client, server.base_url)))
                await asyncio.sleep(0.002)
            await asyncio.gather(*tasks)

    with ProcessServer(home) as server:
        asyncio.run(load(server))
        assert server.proc is not None
        # uvicorn re-raises the signal once its graceful shutdown is done.
        assert server.proc.wait(timeout=30) in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
    assert len(answered) >= 40
    assert count(home / LEDGER_FILE) == len(answered)
    asked_upstream = len([s for s in answered if s == 200]) - len(replayed)
    assert count(home / LEDGER_FILE, "ledger_attempts") >= asked_upstream
