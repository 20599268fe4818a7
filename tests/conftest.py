"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.upstream import FakeUpstream


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
