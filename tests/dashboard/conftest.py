"""Fixtures: two fake upstreams, a live OLP in front of them, a member key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from live_olp import two_hop_config

from olp.accounts.identity import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path

from fakes.upstream import FakeUpstream
from olp_server import ThreadServer, olp_server


@pytest.fixture
def olp(tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, two_hop_config(alpha, beta)) as server:
        yield server


@pytest.fixture
def member_key(olp: ThreadServer) -> str:
    """A member key with a daily request limit (so the keys panel has a bar to show)."""
    store = KeyStore.open(keys_db_path(olp.config.home))
    try:
        return store.create("kid", tier="member", limits=KeyLimits(rpd=100, rpm=30)).secret
    finally:
        store.close()
