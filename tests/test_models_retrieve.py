"""`GET /v1/models/{id}` with the openai SDK's `models.retrieve`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from olp.accounts.keystore import KeyStore, keys_db_path

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer, olp_server


@pytest.fixture
def member(tmp_path: Path) -> str:
    """A key that may use model-b only (made before the server starts)."""
    home = tmp_path / "olp-home"
    home.mkdir(parents=True, exist_ok=True)
    store = KeyStore.open(keys_db_path(home))
    try:
        return store.create("kid", tier="member", allowed_models=("model-b",)).secret
    finally:
        store.close()


@pytest.fixture
def olp(tmp_path: Path, upstream: FakeUpstream, member: str) -> Iterator[ThreadServer]:
    config = {
        "providers": {
            "up": {
                "type": "openai-http",
                "base_url": upstream.openai_base_url,
                "models": ["model-a", "model-b"],
            }
        },
        "routing": {"chains": {"smart": [{"provider": "up", "model": "model-a"}]}},
    }
    with olp_server(tmp_path, config) as server:
        yield server


def sdk(server: ThreadServer, key: str = OWNER_TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)


def test_retrieve_a_listed_model(olp: ThreadServer) -> None:
    with sdk(olp) as client:
        listed = {m.id: m for m in client.models.list()}
        for name in ("smart", "model-a"):
            assert client.models.retrieve(name) == listed[name]
        assert client.models.retrieve("smart").owned_by == "olp"


def test_an_unknown_model_is_model_not_found(olp: ThreadServer) -> None:
    with sdk(olp) as client, pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.code == "model_not_found"
    assert "no-such-model" in caught.value.message


def test_a_model_the_key_may_not_use_is_not_found(olp: ThreadServer, member: str) -> None:
    with sdk(olp, member) as client:
        assert client.models.retrieve("model-b").id == "model-b"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("model-a")


def test_retrieve_needs_a_key_and_get(olp: ThreadServer) -> None:
    assert httpx.get(f"{olp.base_url}/v1/models/smart").status_code == 401
    resp = httpx.post(
        f"{olp.base_url}/v1/models/smart", headers={"authorization": f"Bearer {OWNER_TOKEN}"}
    )
    assert resp.status_code == 405
