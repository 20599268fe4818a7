"""The shared cache's layout in Redis, its scripts, and the CLI's blocking access to it.

Keys, under the configured prefix (`cache.redis_prefix`, default `olp:`):

    {prefix}cache:v1:e:{namespace}:{key}   an answer: `codec.encode_events`, expiring (PX)
    {prefix}cache:v1:lru:{namespace}       sorted set: key -> last use (unix seconds)
    {prefix}cache:v1:spaces                set of the namespaces that have entries
    {prefix}cache:v1:epochs                hash: namespace (or "*") -> times it was cleared

Every change that touches more than one key is one Lua script, so it is atomic and one
round trip. The scripts name keys they derive (evicted entries), so they need a single
Redis server (or primary), not a cluster. Replicas learn of a clear from `epochs`.
"""

from __future__ import annotations

import time
from typing import Any

from olp.errors import OLPError
from olp.observability import redacted_url

__all__ = [
    "ALL",
    "CLEAR",
    "GET",
    "MISSING_REDIS_PACKAGE",
    "PUT",
    "STATS",
    "Layout",
    "RedisPackageMissing",
    "parse_stats",
    "shared_clear",
    "shared_ping",
    "shared_stats",
]

ALL = "*"  # the epochs field of a clear of every namespace
MISSING_REDIS_PACKAGE = (
    "a shared cache needs the redis package, which is not installed: pip install 'olp[redis]'"
)

# KEYS: entry, lru, spaces. ARGV: body, ttl_ms, now, key, max_entries, entry prefix of
# the namespace, namespace. Returns how many older entries the limit evicted.
PUT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local now, ttl_s = tonumber(ARGV[3]), tonumber(ARGV[2]) / 1000
redis.call('ZADD', KEYS[2], now, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - ttl_s))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[7])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if excess > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, excess - 1)) do
    redis.call('DEL', ARGV[6] .. old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, excess - 1)
  return excess
end
return 0
"""

# KEYS: entry, lru. ARGV: now, key. Returns {body, ms left} and marks it used, or nil.
GET = """
local body = redis.call('GET', KEYS[1])
if not body then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return false
end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return {body, redis.call('PTTL', KEYS[1])}
"""

# KEYS: spaces, epochs. ARGV: cache prefix, namespace or "*". Deletes the entries, bumps
# the epoch (replicas drop their memory fronts); returns {entries deleted, new epoch}.
CLEAR = """
local prefix, target = ARGV[1], ARGV[2]
local spaces = {target}
if target == '*' then spaces = redis.call('SMEMBERS', KEYS[1]) end
local deleted = 0
for _, ns in ipairs(spaces) do
  local lru = prefix .. 'lru:' .. ns
  for _, key in ipairs(redis.call('ZRANGE', lru, 0, -1)) do
    deleted = deleted + redis.call('DEL', prefix .. 'e:' .. ns .. ':' .. key)
  end
  redis.call('DEL', lru)
  redis.call('SREM', KEYS[1], ns)
end
return {deleted, redis.call('HINCRBY', KEYS[2], target, 1)}
"""

# KEYS: spaces. ARGV: cache prefix. Returns {namespace, entries, bytes, ...} for the live
# entries, forgetting the ones that expired.
STATS = """
local prefix, out = ARGV[1], {}
for _, ns in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local lru = prefix .. 'lru:' .. ns
  local entries, bytes = 0, 0
  for _, key in ipairs(redis.call('ZRANGE', lru, 0, -1)) do
    local size = redis.call('STRLEN', prefix .. 'e:' .. ns .. ':' .. key)
    if size > 0 then
      entries, bytes = entries + 1, bytes + size
    else
      redis.call('ZREM', lru, key)
    end
  end
  if entries == 0 then
    redis.call('SREM', KEYS[1], ns)
  else
    table.insert(out, ns)
    table.insert(out, entries)
    table.insert(out, bytes)
  end
end
return out
"""


class RedisPackageMissing(OLPError):
    """`cache.redis_url` is set, but the `redis` extra is not installed."""


class Layout:
    """The Redis key names under one prefix."""

    __slots__ = ("cache", "epochs", "spaces")

    def __init__(self, prefix: str) -> None:
        self.cache = f"{prefix}cache:v1:"
        self.spaces = self.cache + "spaces"
        self.epochs = self.cache + "epochs"

    def entry(self, namespace: str, key: str) -> str:
        return f"{self.cache}e:{namespace}:{key}"

    def entry_prefix(self, namespace: str) -> str:
        return f"{self.cache}e:{namespace}:"

    def lru(self, namespace: str) -> str:
        return f"{self.cache}lru:{namespace}"


def parse_stats(flat: list[Any]) -> dict[str, tuple[int, int]]:
    """STATS's flat reply -> namespace -> (entries, bytes)."""
    per: dict[str, tuple[int, int]] = {}
    for i in range(0, len(flat) - 2, 3):
        name = flat[i]
        per[name.decode() if isinstance(name, bytes) else str(name)] = (
            int(flat[i + 1]),
            int(flat[i + 2]),
        )
    return per


# -- the CLI's blocking access (`olp cache stats|clear` with `cache.redis_url`) -------------


def shared_stats(url: str, prefix: str) -> dict[str, Any]:
    """Entries and bytes per namespace in the shared cache, as `control.disk_stats` has them."""
    layout = Layout(prefix)
    reply = _run(url, lambda client: client.eval(STATS, 1, layout.spaces, layout.cache))
    per = {ns: {"entries": n, "bytes": b} for ns, (n, b) in sorted(parse_stats(reply).items())}
    return {
        "entries": sum(v["entries"] for v in per.values()),
        "bytes": sum(v["bytes"] for v in per.values()),
        "namespaces": per,
    }


def shared_clear(url: str, prefix: str, namespace: str | None) -> int:
    """Delete stored answers (one namespace, or all); running replicas follow within a second."""
    layout = Layout(prefix)
    target = namespace or ALL
    reply = _run(
        url,
        lambda client: client.eval(CLEAR, 2, layout.spaces, layout.epochs, layout.cache, target),
    )
    return int(reply[0])


def shared_ping(url: str, timeout_s: float = 5.0) -> float:
    """Milliseconds Redis took to answer a PING (`olp doctor`); raise OLPError."""
    started = time.perf_counter()
    _run(url, lambda client: client.ping(), timeout_s)
    return (time.perf_counter() - started) * 1000


def _run(url: str, command: Any, timeout_s: float = 5.0) -> Any:
    try:
        import redis  # only a shared cache needs the package (the `redis` extra)
    except ImportError as exc:
        raise RedisPackageMissing(f"cache.redis_url: {MISSING_REDIS_PACKAGE}") from exc
    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        return command(client)
    except redis.RedisError as exc:
        raise OLPError(
            f"the shared cache at {redacted_url(url)} did not answer ({exc}); check that Redis "
            f"runs there, and cache.redis_url in config.json"
        ) from exc
    finally:
        client.close()
