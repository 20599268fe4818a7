"""The real Redis the shared-cache tests use (CI runs one on 127.0.0.1:6379)."""

from __future__ import annotations

import os

import pytest
import redis

__all__ = ["REDIS_URL", "redis_or_skip"]

REDIS_URL = os.environ.get("OLP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def redis_or_skip() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        if os.environ.get("CI"):  # CI has Redis: its absence is a failure, not a skip
            pytest.fail(f"Redis at {REDIS_URL} is not reachable: {exc}")
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    return client
