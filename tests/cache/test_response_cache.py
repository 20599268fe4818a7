"""The facade the engine calls per hop: hit / miss / bypass, writes, stats, persistence."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from cache_fakes import ANSWER, Upstream, drain, run, settle

from olp.cache import CachedAnswer, CacheHop, ResponseCache, Start, cache_policy, is_complete
from olp.cache.memory import EVENT_OVERHEAD
from olp.config import CacheConfig
from olp.errors import Failure, ProviderError
from olp.ir import Event, Finish, ResponseBuilder, TextDelta, ToolCallDelta, Usage

CFG = CacheConfig(ttl_s=60)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def open_hop(
    cache: ResponseCache,
    ns: str,
    key: str,
    start: Start,
    *,
    lookup: bool = True,
    store: bool = True,
) -> CacheHop:
    """What the engine does per hop: a stored answer or a shared call, else a new call."""
    found = await cache.find(ns, key) if lookup and store else None
    return found or cache.lead(ns, key, start, lookup=lookup, store=store)


async def ask(
    cache: ResponseCache,
    up: Upstream,
    ns: str = "ns",
    key: str = "k",
    *,
    lookup: bool = True,
    store: bool = True,
) -> tuple[str, str, list[Event]]:
    hop = await open_hop(cache, ns, key, up.start, lookup=lookup, store=store)
    return hop.outcome, hop.role, await drain(hop.events)


def test_a_second_identical_request_is_a_hit_without_an_upstream_call() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        up = Upstream()
        assert await ask(cache, up) == ("miss", "leader", list(ANSWER))
        assert await ask(cache, up) == ("hit", "stored", list(ANSWER))
        assert up.starts == 1
        stats = cache.stats("ns")
        assert (stats["hits"], stats["misses"], stats["entries"]) == (1, 1, 1)
        assert stats["hit_rate"] == 0.5
        await cache.aclose()

    run(main)


def test_concurrent_identical_requests_share_one_call_then_hit() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        up = Upstream(delay=0.001)
        results = await asyncio.gather(*(ask(cache, up) for _ in range(50)))
        assert up.starts == 1
        assert {r[2] == list(ANSWER) for r in results} == {True}
        roles = sorted(r[1] for r in results)
        assert roles.count("leader") == 1
        assert roles.count("follower") == 49
        assert await ask(cache, up) == ("hit", "stored", list(ANSWER))
        stats = cache.stats()
        assert (stats["misses"], stats["shared"], stats["hits"]) == (1, 49, 1)
        await cache.aclose()

    run(main)


def test_a_key_never_sees_another_keys_entries() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        up = Upstream()
        await ask(cache, up, "alice")
        assert (await ask(cache, up, "bob"))[0] == "miss"
        assert up.starts == 2
        await cache.aclose()

    run(main)


def test_no_cache_skips_the_lookup_but_still_writes() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        await ask(cache, Upstream())
        fresh = (TextDelta("fresh"), Finish("stop"))
        up = Upstream(fresh)
        assert await ask(cache, up, lookup=False) == ("bypass", "leader", list(fresh))
        assert up.starts == 1
        assert await ask(cache, Upstream()) == ("hit", "stored", list(fresh))
        await cache.aclose()

    run(main)


def test_no_cache_does_not_join_a_request_in_flight() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        first = Upstream(pause_at=1)
        hop = await open_hop(cache, "ns", "k", first.start)
        second = Upstream()
        assert (await ask(cache, second, lookup=False))[1] == "leader"
        assert second.starts == 1
        first.release()
        await drain(hop.events)
        await cache.aclose()

    run(main)


def test_no_store_neither_reads_nor_writes() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        await ask(cache, Upstream())
        up = Upstream()
        assert await ask(cache, up, store=False) == ("bypass", "direct", list(ANSWER))
        assert up.starts == 1
        assert cache.stats("other")["entries"] == 0
        await ask(cache, Upstream(), "other", store=False)
        assert cache.stats("other")["entries"] == 0
        assert cache.stats("other")["bypasses"] == 1
        await cache.aclose()

    run(main)


def test_a_disabled_cache_bypasses_everything(tmp_path: Path) -> None:
    async def main() -> None:
        cache = ResponseCache(CacheConfig(enabled=False), tmp_path)
        up = Upstream()
        assert (await ask(cache, up))[:2] == ("bypass", "direct")
        assert (await ask(cache, up))[:2] == ("bypass", "direct")
        assert up.starts == 2
        await cache.aclose()
        assert not (tmp_path / "cache.db").exists()

    run(main)


def test_a_reload_changes_the_limits_but_not_whether_or_where_it_caches(tmp_path: Path) -> None:
    async def main() -> None:
        cache = ResponseCache(CacheConfig(ttl_s=60), tmp_path)
        up = Upstream()
        await ask(cache, up, key="a")
        await ask(cache, up, key="b")
        new = CacheConfig(enabled=False, redis_url="redis://elsewhere", ttl_s=60)
        big = (TextDelta("x" * 200), Finish("stop"))
        dropped = cache.reconfigure(replace(new, max_entries_per_key=1, max_entry_bytes=100))
        assert dropped == 1
        # Still on, still on disk: those two choose the store, and wait for a restart.
        assert cache.config.enabled and cache.config.redis_url is None
        assert cache.store.kind == "sqlite"
        assert (await ask(cache, up, key="b"))[:2] == ("hit", "stored")
        # An answer over the new entry limit is not kept.
        assert (await ask(cache, Upstream(big), key="c"))[:2] == ("miss", "leader")
        assert (await ask(cache, Upstream(big), key="c"))[:2] == ("miss", "leader")
        assert cache.reconfigure(cache.config) == 0
        await cache.aclose()

    run(main)


@pytest.mark.parametrize(
    "events",
    [
        (TextDelta("cut"), Finish("length")),  # truncated, or salvaged (docs/design.md §5 rule 4)
        (TextDelta("no finish"),),
        (TextDelta("filtered"), Finish("content_filter")),
        (Usage(1, 0), Finish("stop")),  # no content at all
    ],
    ids=["length", "no-finish", "content-filter", "empty"],
)
def test_incomplete_answers_are_not_cached(events: tuple[Event, ...]) -> None:
    assert not is_complete(events)

    async def main() -> None:
        cache = ResponseCache(CFG, None)
        up = Upstream(events)
        await ask(cache, up)
        assert (await ask(cache, up))[0] == "miss"
        assert up.starts == 2
        await cache.aclose()

    run(main)


def test_tool_call_answers_with_usage_after_finish_are_cached() -> None:
    events = (ToolCallDelta(0, "c", "f", "{}"), Finish("tool_calls"), Usage(3, 4))
    assert is_complete(events)


def test_a_failed_upstream_is_not_cached_and_every_follower_sees_the_error() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        boom = ProviderError(Failure.RATE_LIMITED, "slow down")
        up = Upstream((), pause_at=0, error=boom)
        hops = [await open_hop(cache, "ns", "k", up.start) for _ in range(5)]
        up.release()
        for hop in hops:
            with pytest.raises(ProviderError) as caught:
                await drain(hop.events)
            assert caught.value is boom
        assert up.starts == 1
        assert cache.stats()["entries"] == 0
        assert (await ask(cache, Upstream()))[0] == "miss"
        await cache.aclose()

    run(main)


def test_ttl_expiry_with_an_injected_clock() -> None:
    async def main() -> None:
        clock = Clock()
        cache = ResponseCache(CFG, None, clock)
        await ask(cache, Upstream())
        clock.now += 59
        assert (await ask(cache, Upstream()))[0] == "hit"
        clock.now += 2
        assert (await ask(cache, Upstream()))[0] == "miss"
        await cache.aclose()

    run(main)


def test_entries_survive_a_restart(tmp_path: Path) -> None:
    async def first() -> None:
        cache = ResponseCache(CFG, tmp_path)
        await ask(cache, Upstream())
        await cache.aclose()

    async def second() -> None:
        cache = ResponseCache(CFG, tmp_path)
        up = Upstream()
        assert await ask(cache, up) == ("hit", "stored", list(ANSWER))
        assert up.starts == 0
        assert cache.stats()["persistent"] is True
        await cache.aclose()

    run(first)
    run(second)


def test_stats_and_clear() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        await ask(cache, Upstream(), "alice", "1")
        await ask(cache, Upstream(), "alice", "2")
        await ask(cache, Upstream(), "bob", "1")
        await ask(cache, Upstream(), "bob", "1")
        slow = Upstream(pause_at=1)
        hop = await open_hop(cache, "carol", "1", slow.start)
        await settle()
        stats = cache.stats()
        assert stats["entries"] == 3
        assert stats["in_flight"] == 1
        assert stats["namespaces"]["carol"]["in_flight"] == 1
        assert stats["namespaces"]["bob"]["hits"] == 1
        assert stats["hits"] == 1
        assert stats["misses"] == 4
        assert cache.clear("alice") == 2
        assert cache.stats("alice")["entries"] == 0
        assert cache.clear() == 1
        slow.release()
        await drain(hop.events)
        await cache.aclose()

    run(main)


@pytest.mark.parametrize(
    ("header", "policy"),
    [
        (None, (True, True)),
        ("", (True, True)),
        ("no-cache", (False, True)),
        ("No-Cache, max-stale=5", (False, True)),
        ("max-age=0", (False, True)),
        ("no-store", (False, False)),
        ("no-cache, no-store", (False, False)),
        ("max-age=60", (True, True)),
    ],
)
def test_cache_control_policy(header: str | None, policy: tuple[bool, bool]) -> None:
    assert cache_policy(header) == policy


def test_a_replay_keeps_its_response_once_and_counts_it() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        await ask(cache, Upstream())
        hop = await cache.find("ns", "k")
        assert hop is not None and hop.answer is not None
        assert (hop.namespace, hop.key) == ("ns", "k")
        before = cache.store.memory_bytes
        response = ResponseBuilder().extend(hop.answer.events).build()
        cache.keep_response(hop, response)
        assert hop.answer.response is response
        assert cache.store.memory_bytes > before + len(response.text or "")
        cache.keep_response(hop, ResponseBuilder().build())  # kept already: unchanged
        assert hop.answer.response is response
        await cache.aclose()

    run(main)


def test_a_stored_answer_stays_encoded_until_its_first_replay_which_counts_the_events() -> None:
    async def main() -> None:
        cache = ResponseCache(CFG, None)
        await ask(cache, Upstream())
        stored = cache.store.lookup("ns", "k")
        assert stored is not None and not stored.decoded  # one bytes object, not the events
        encoded = cache.store.memory_bytes
        assert encoded == stored.nbytes + EVENT_OVERHEAD
        hop = await cache.find("ns", "k")
        assert hop is not None and hop.answer is stored and stored.decoded
        assert hop.stored == ANSWER
        # The decoded events weigh one object each, as an answer read from disk does.
        assert cache.store.memory_bytes == stored.nbytes + EVENT_OVERHEAD * len(ANSWER)
        again = await cache.find("ns", "k")
        assert again is not None and again.stored is hop.stored  # decoded once
        assert cache.store.memory_bytes == stored.nbytes + EVENT_OVERHEAD * len(ANSWER)
        await cache.aclose()

    run(main)


def test_a_cached_answer_needs_its_events_or_their_encoding() -> None:
    with pytest.raises(ValueError, match="events or their encoding"):
        CachedAnswer(None, 10, 0.0, 1.0)
