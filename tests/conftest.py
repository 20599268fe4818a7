"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from redis_fixtures import redis_or_skip

from fakes.upstream import FakeUpstream


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (pyproject's addopts) starts two workers per core: more than half of a
    test's time is spent waiting on servers, child processes and timeouts, and a second
    worker per core fills it. PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    return 2 * (os.cpu_count() or 1)


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    """A started fake LLM upstream (OpenAI and Anthropic endpoints) on 127.0.0.1."""
    with FakeUpstream() as up:
        yield up


# Two independent upstreams, for chains of two hops.
@pytest.fixture
def alpha() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of the test's own; every key under it is deleted afterwards."""
    client = redis_or_skip()
    name = f"olptest-{uuid.uuid4().hex[:12]}:"
    yield name
    keys = list(client.scan_iter(match=name + "*"))
    if keys:
        client.delete(*keys)
    client.close()
