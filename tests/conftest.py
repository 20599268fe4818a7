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
