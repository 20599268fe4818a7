"""The shared store against a real Redis: two stores in one test are two replicas."""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from olp.cache.codec import encode_events
from olp.cache.redis_keys import Layout, shared_clear, shared_stats
from olp.cache.redis_store import RedisStore
from olp.config import CacheConfig
from olp.errors import CacheUnavailable, OLPError
from olp.ir import Finish, TextDelta, Usage
from redis_fixtures import REDIS_URL

ANSWER = (TextDelta("four"), Usage(5, 1), Finish("stop"))


def cache_config(redis_prefix: str, **kw: int) -> CacheConfig:
    return CacheConfig(redis_url=REDIS_URL, redis_prefix=redis_prefix, **kw)  # type: ignore[arg-type]


class FakeClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def replica(
    config: CacheConfig, clock: Callable[[], float] = time.time, url: str = REDIS_URL
) -> AsyncIterator[RedisStore]:
    store = RedisStore(url, config, clock)
    await store.start()
    try:
        yield store
    finally:
        await store.aclose()


async def written(store: RedisStore) -> None:
    """Until the store's queued writes have reached Redis."""
    assert await store.flush()


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in a loop of its own (pytest sees the fixtures it asks for)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


async def eventually(check: Callable[[], bool], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


def raw() -> redis.Redis:
    """A plain client, to look at (or damage) what the stores wrote under `redis_prefix`."""
    return redis.Redis.from_url(REDIS_URL)


@in_loop
async def test_an_answer_one_replica_wrote_is_a_hit_on_another(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    async with replica(config) as a, replica(config) as b:
        assert a.put("key_one", "k", ANSWER)
        await written(a)
        assert b.lookup("key_one", "k") is None  # not in b's memory front yet
        assert b.on_disk("key_one", "k")  # so the cache asks Redis
        found = await b.get("key_one", "k")
        assert found is not None and found.events == ANSWER
        assert b.lookup("key_one", "k") is not None  # now b holds it: no round trip next time


@in_loop
async def test_a_namespace_never_sees_another_ones_entries(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    async with replica(config) as a, replica(config) as b:
        a.put("key_one", "k", ANSWER)
        await written(a)
        assert await b.get("key_two", "k") is None
        assert await b.get("key_one", "k") is not None


@in_loop
async def test_entry_limit_evicts_the_least_recently_used_in_redis(redis_prefix: str) -> None:
    config = cache_config(redis_prefix, max_entries_per_key=2)
    layout = Layout(redis_prefix)
    async with replica(config) as a:
        a.put("ns", "k1", ANSWER)
        await written(a)
        a.put("ns", "k2", ANSWER)
        await written(a)
        async with replica(config) as b:
            assert await b.get("ns", "k1") is not None  # k1 used: k2 is now the oldest
        a.put("ns", "k3", ANSWER)
        await written(a)
    client = raw()
    assert client.exists(layout.entry("ns", "k2")) == 0
    assert client.exists(layout.entry("ns", "k1")) == 1
    assert client.exists(layout.entry("ns", "k3")) == 1
    assert client.zcard(layout.lru("ns")) == 2
    async with replica(config) as fresh:
        assert await fresh.get("ns", "k2") is None
        assert await fresh.get("ns", "k1") is not None


@in_loop
async def test_ttl_is_kept_by_redis_and_the_memory_front_follows_it(redis_prefix: str) -> None:
    config = cache_config(redis_prefix, ttl_s=100)
    clock = FakeClock()
    async with replica(config) as a, replica(config, clock) as b:
        a.put("ns", "k", ANSWER)
        await written(a)
        ms_left = raw().pttl(Layout(redis_prefix).entry("ns", "k"))
        assert 95_000 < ms_left <= 100_000
        found = await b.get("ns", "k")
        assert found is not None
        assert 95 < found.expires_at - clock.now <= 100  # what Redis has left, not a new TTL
        clock.now += 101
        assert b.lookup("ns", "k") is None  # expired in the front, with the injected clock


@in_loop
async def test_an_expired_redis_entry_is_a_miss(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    async with replica(config) as a, replica(config) as b:
        a.put("ns", "k", ANSWER)
        await written(a)
        raw().pexpire(Layout(redis_prefix).entry("ns", "k"), 1)
        await asyncio.sleep(0.05)
        assert await b.get("ns", "k") is None


@in_loop
async def test_a_clear_on_one_replica_reaches_the_others_memory(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    async with replica(config) as a, replica(config) as b:
        a.put("ns", "k", ANSWER)
        a.put("other", "k", ANSWER)
        await written(a)
        assert await b.get("ns", "k") is not None
        assert await b.get("other", "k") is not None
        assert await a.aclear("ns") == 1
        assert a.lookup("ns", "k") is None
        assert await eventually(lambda: b.lookup("ns", "k") is None)
        assert b.lookup("other", "k") is not None  # another namespace stays
        assert await b.get("ns", "k") is None  # gone from Redis too


@in_loop
async def test_the_cli_clear_reaches_every_replica(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    async with replica(config) as a, replica(config) as b:
        a.put("ns", "k", ANSWER)
        a.put("other", "k", ANSWER)
        await written(a)
        await b.get("ns", "k")
        assert shared_stats(REDIS_URL, redis_prefix)["entries"] == 2
        assert await asyncio.to_thread(shared_clear, REDIS_URL, redis_prefix, None) == 2
        assert await eventually(lambda: a.lookup("other", "k") is None)
        assert await eventually(lambda: b.lookup("ns", "k") is None)
        assert shared_stats(REDIS_URL, redis_prefix) == {"entries": 0, "bytes": 0, "namespaces": {}}


@in_loop
async def test_stats_are_the_shared_figures(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    async with replica(config) as a, replica(config) as b:
        a.put("ns", "k1", ANSWER)
        a.put("ns", "k2", ANSWER)
        await written(a)
        nbytes = raw().strlen(Layout(redis_prefix).entry("ns", "k1"))
        assert await eventually(lambda: b.stats().entries == 2, within=8)
        assert b.stats("ns").bytes == 2 * nbytes
        assert b.namespaces() == ["ns"]
        assert b.kind == "redis" and b.persistent


@in_loop
async def test_an_entry_of_another_codec_is_a_miss(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    raw().set(Layout(redis_prefix).entry("ns", "k"), b"not an entry", px=60_000)
    async with replica(config) as b:
        assert await b.get("ns", "k") is None


@in_loop
async def test_redis_down_makes_misses_not_errors(
    redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{s.getsockname()[1]}/0"  # nobody listens once closed
    config = CacheConfig(redis_url=dead, redis_prefix=redis_prefix)
    caplog.set_level(logging.WARNING, logger="olp.cache")
    async with replica(config, url=dead) as store:
        assert store.put("ns", "k", ANSWER)  # the memory front still works
        assert store.lookup("ns", "k") is not None
        started = time.monotonic()
        assert await store.get("ns", "other") is None
        assert time.monotonic() - started < 1.0  # no waiting on a Redis that is not there
        assert not store.on_disk("ns", "other")  # and no asking again for a while
        with pytest.raises(CacheUnavailable) as failed:
            await store.aclear("ns")
        assert "did not answer" in failed.value.message
    warned = [r for r in caplog.records if r.getMessage() == "cache_redis_unavailable"]
    assert len(warned) == 1  # said once, not per request
    assert warned[0].fields["during"] == "start"  # type: ignore[attr-defined]


def test_the_cli_helpers_say_what_is_wrong_when_redis_is_down() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"redis://:secret@127.0.0.1:{s.getsockname()[1]}/0"
    with pytest.raises(OLPError) as failed:
        shared_stats(dead, "olptest-none:")
    assert "did not answer" in failed.value.message
    assert "secret" not in failed.value.message  # the password is never shown


@in_loop
async def test_writes_go_on_after_redis_forgot_the_scripts(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    layout = Layout(redis_prefix)
    async with replica(config) as a, replica(config) as b:
        a.put("ns", "k1", ANSWER)
        await written(a)
        raw().script_flush()  # as after a Redis restart
        a.put("ns", "k2", ANSWER)
        await written(a)
        assert raw().exists(layout.entry("ns", "k2")) == 1
        assert await b.get("ns", "k2") is not None


@in_loop
async def test_writes_beyond_the_queue_bound_are_dropped_not_kept(
    redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = cache_config(redis_prefix)
    caplog.set_level(logging.WARNING, logger="olp.cache")
    one = len(encode_events(ANSWER))
    # Not started: nothing sends the queue, as when Redis is slower than the traffic.
    store = RedisStore(REDIS_URL, config, max_queued_bytes=2 * one)
    try:
        for key in ("k1", "k2", "k3"):
            assert store.put("ns", key, ANSWER)  # each is in the memory front all the same
        assert store.lookup("ns", "k3") is not None
        assert [r.getMessage() for r in caplog.records].count("cache_redis_write_dropped") == 1
        assert await store.flush()
    finally:
        await store.aclose()
    async with replica(config) as b:
        assert await b.get("ns", "k1") is not None
        assert await b.get("ns", "k2") is not None
        assert await b.get("ns", "k3") is None  # dropped, never written


@in_loop
async def test_a_large_answer_comes_back_whole(redis_prefix: str) -> None:
    config = cache_config(redis_prefix)
    pieces = tuple(TextDelta(f"piece {i} " * 50) for i in range(2000))  # about 1 MB
    answer = (*pieces, Usage(5, 1), Finish("stop"))
    async with replica(config) as a, replica(config) as b:
        assert a.put("ns", "big", answer)
        await written(a)
        found = await b.get("ns", "big")
        assert found is not None and found.events == answer


class OwnRedis:
    """A redis-server of this test's own on a free port, to stop and start at will."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self.binary, self.workdir = binary, workdir
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@in_loop
async def test_a_redis_restart_costs_misses_then_the_cache_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = OwnRedis(tmp_path)
    server.start()
    config = CacheConfig(redis_url=server.url)
    caplog.set_level(logging.WARNING, logger="olp.cache")
    a = RedisStore(server.url, config, retry_after_s=0.3)
    b = RedisStore(server.url, config, retry_after_s=0.3)
    try:
        await a.start()
        await b.start()
        a.put("ns", "before", ANSWER)
        assert await a.flush()
        server.kill()  # Redis dies: answers served until now stay in each front
        assert await b.get("ns", "before") is None  # a miss, not an error
        assert a.lookup("ns", "before") is not None
        a.put("ns", "while-down", ANSWER)  # not sent: Redis is being left alone
        server.start()  # back, empty (it keeps nothing on disk), without the scripts
        await asyncio.sleep(0.4)  # past the retry delay
        a.put("ns", "after", ANSWER)
        assert await a.flush()
        assert await b.get("ns", "after") is not None  # NOSCRIPT was handled
        assert await b.get("ns", "while-down") is None
    finally:
        await a.aclose()
        await b.aclose()
        server.kill()
    messages = [r.getMessage() for r in caplog.records]
    # One warning per replica for the outage (a's while-down write failed on the dead
    # connection), and one each when Redis answered again.
    assert messages.count("cache_redis_unavailable") == 2
    assert messages.count("cache_redis_recovered") == 2
