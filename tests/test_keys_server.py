"""Keys against real servers: changes from `olp keys` (in the test's process, the server in
its own) on the next request, allow-lists, per-key /v1/models, owner-only endpoints."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from keys_cli import olp_keys
from olp.accounts import Identity, KeyLimits
from olp.accounts.dbauth import DbAuthenticator
from olp.accounts.keystore import KeyStore, keys_db_path
from olp.config import load_config
from olp.errors import Forbidden, InvalidApiKey, UnpricedModel
from olp.server import create_app
from olp.server.asgi import Request
from olp.server.owner import require_owner

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ProcessServer, olp_server, server_env, write_config


def new_key(home: Path, *args: str) -> str:
    proc = olp_keys(home, "create", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["key"])


def two_providers(upstream: FakeUpstream) -> dict[str, Any]:
    base = upstream.openai_base_url
    return {
        "providers": {
            "alpha": {"type": "openai-http", "base_url": base, "models": ["a-small", "a-large"]},
            "beta": {"type": "openai-http", "base_url": base, "models": ["b-model"]},
        },
        "routing": {
            "chains": {
                "both": [
                    {"provider": "alpha", "model": "a-small"},
                    {"provider": "beta", "model": "b-model"},
                ],
                "beta-only": [{"provider": "beta", "model": "b-model"}],
            }
        },
    }


class Client:
    def __init__(self, base_url: str, key: str) -> None:
        self.base_url = base_url
        self.headers = {"authorization": f"Bearer {key}"}

    def chat(self, model: str = "a-small") -> httpx.Response:
        # A new question each time, so no answer comes from the cache.
        ask = {"model": model, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
        return httpx.post(
            f"{self.base_url}/v1/chat/completions", json=ask, headers=self.headers, timeout=10
        )

    def models(self) -> list[str]:
        resp = httpx.get(f"{self.base_url}/v1/models", headers=self.headers)
        assert resp.status_code == 200, resp.text
        return sorted(m["id"] for m in resp.json()["data"])


@pytest.fixture
def home(tmp_path: Path, upstream: FakeUpstream) -> Path:
    home = tmp_path / "home"
    write_config(home, two_providers(upstream))
    return home


@pytest.fixture
def server(home: Path) -> Iterator[ProcessServer]:
    with ProcessServer(home) as srv:
        yield srv


def test_revoke_from_the_cli_refuses_the_very_next_request(
    home: Path, server: ProcessServer
) -> None:
    key = new_key(home, "--name", "alice")  # created while the server runs
    alice = Client(server.base_url, key)
    assert alice.chat().status_code == 200
    assert olp_keys(home, "revoke", "alice").returncode == 0
    resp = alice.chat()
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "invalid_api_key"
    assert Client(server.base_url, OWNER_TOKEN).chat().status_code == 200  # owner unaffected


def test_rotate_from_the_cli_swaps_the_secret_at_once(home: Path, server: ProcessServer) -> None:
    old = new_key(home, "--name", "bob")
    assert Client(server.base_url, old).chat().status_code == 200
    proc = olp_keys(home, "rotate", "bob", "--json")
    assert proc.returncode == 0, proc.stderr
    rotated = json.loads(proc.stdout)
    assert rotated["name"] == "bob" and rotated["key"] != old
    assert Client(server.base_url, old).chat().status_code == 401
    assert Client(server.base_url, rotated["key"]).chat().status_code == 200


def test_limits_set_from_the_cli_take_effect_at_once(home: Path, server: ProcessServer) -> None:
    alice = Client(server.base_url, new_key(home, "--name", "alice"))
    for _ in range(3):
        assert alice.chat().status_code == 200
    assert olp_keys(home, "set", "alice", "--rpm", "3").returncode == 0
    resp = alice.chat()
    assert resp.status_code == 429
    assert resp.json()["error"]["code"] == "key_limit_exceeded"
    assert "3 requests per minute" in resp.json()["error"]["message"]
    assert 1 <= int(resp.headers["retry-after"]) <= 60
    assert olp_keys(home, "set", "alice", "--rpm", "none").returncode == 0
    assert alice.chat().status_code == 200
    assert olp_keys(home, "set", "alice", "--rpd", "4").returncode == 0
    resp = alice.chat()  # 4 admitted today already
    assert resp.status_code == 429 and "requests for today" in resp.json()["error"]["message"]


def test_allow_lists_and_models_per_key(home: Path, server: ProcessServer) -> None:
    owner = Client(server.base_url, OWNER_TOKEN)
    everything = owner.models()
    assert {"a-small", "a-large", "b-model", "both", "beta-only"} <= set(everything)

    globbed = Client(server.base_url, new_key(home, "--name", "g", "--models", "a-*,both"))
    assert globbed.models() == ["a-large", "a-small", "both"]
    assert globbed.chat("a-large").status_code == 200
    resp = globbed.chat("b-model")
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "model_not_allowed"

    # Only provider beta: models served only by alpha disappear, even when the model
    # list itself would allow them; a chain through both keeps only beta's hop.
    beta_only = Client(server.base_url, new_key(home, "--name", "b", "--providers", "beta"))
    assert "a-small" not in beta_only.models() and "a-large" not in beta_only.models()
    assert {"b-model", "both", "beta-only"} <= set(beta_only.models())
    assert beta_only.chat("a-small").json()["error"]["code"] == "model_not_allowed"
    served = beta_only.chat("both")
    assert served.status_code == 200
    assert served.headers["x-olp-provider-used"] == "beta"

    # Changed from the CLI: the next /v1/models call and the next chat follow (a model
    # this key was just allowed is not remembered as allowed).
    assert olp_keys(home, "set", "g", "--models", "b-*").returncode == 0
    assert globbed.models() == ["b-model"]
    assert globbed.chat("a-large").json()["error"]["code"] == "model_not_allowed"
    assert olp_keys(home, "set", "b", "--providers", "alpha,beta").returncode == 0
    assert beta_only.chat("both").headers["x-olp-provider-used"] == "alpha"


def test_a_usd_budget_fails_closed_on_models_olp_cannot_price(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    home = tmp_path / "home"
    # a-small and a-large have no price anywhere; b-model is priced in config.json.
    write_config(
        home, {**two_providers(upstream), "pricing": {"b-model": {"input": 1, "output": 2}}}
    )
    with ProcessServer(home) as server:
        budget = Client(server.base_url, new_key(home, "--name", "kid", "--usd-month", "5"))
        free = Client(server.base_url, new_key(home, "--name", "mum"))

        assert budget.models() == ["b-model", "beta-only", "both"]
        calls = upstream.calls
        refused = budget.chat("a-small")
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "unpriced_model" and error["type"] == "permission_error"
        assert "no price for alpha/a-small" in error["message"]
        assert '"pricing" in config.json' in error["message"]
        assert upstream.calls == calls  # refused before any provider was asked

        # A chain keeps its priced hops: served by beta, the unpriced hop never tried.
        served = budget.chat("both")
        assert served.status_code == 200, served.text
        assert served.headers["x-olp-provider-used"] == "beta"
        assert upstream.calls == calls + 1

        assert free.chat("a-small").status_code == 200  # no budget, nothing to count
        assert olp_keys(home, "set", "kid", "--usd-month", "none").returncode == 0
        assert budget.chat("a-small").status_code == 200
        # Without the budget the whole chain is the key's again: its first hop answers.
        assert budget.chat("both").headers["x-olp-provider-used"] == "alpha"


def test_owner_endpoints_refuse_members(home: Path, server: ProcessServer) -> None:
    url = f"{server.base_url}/v0/management/quota"
    member = new_key(home, "--name", "kid")
    resp = httpx.get(url, headers={"authorization": f"Bearer {member}"})
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "owner_required"
    owner_key = new_key(home, "--name", "laptop", "--tier", "owner")
    assert httpx.get(url, headers={"authorization": f"Bearer {owner_key}"}).status_code == 200
    assert httpx.get(url, headers={"authorization": f"Bearer {OWNER_TOKEN}"}).status_code == 200
    assert httpx.get(url).status_code == 401


def test_last_used_is_written_by_the_server(home: Path, upstream: FakeUpstream) -> None:
    with ProcessServer(home) as server:
        key = new_key(home, "--name", "alice")
        unused = new_key(home, "--name", "idle")
        assert Client(server.base_url, key).chat().status_code == 200
        assert unused
    # Written in batches, and the last batch on shutdown.
    listed = json.loads(olp_keys(home, "list", "--json").stdout)["keys"]
    by_name = {k["name"]: k for k in listed}
    assert by_name["alice"]["last_used"] is not None
    assert by_name["idle"]["last_used"] is None


def test_a_revoked_key_keeps_its_last_use(home: Path, upstream: FakeUpstream) -> None:
    # Whether a leaked key was used matters most once it is revoked.
    with ProcessServer(home) as server:
        key = new_key(home, "--name", "leaked")
        client = Client(server.base_url, key)
        assert client.chat().status_code == 200
        assert olp_keys(home, "revoke", "leaked").returncode == 0  # before the 30 s batch
        assert client.chat().status_code == 401
    listed = json.loads(olp_keys(home, "list", "--json").stdout)["keys"]
    (leaked,) = [k for k in listed if k["name"] == "leaked"]
    assert leaked["revoked_at"] is not None
    assert leaked["last_used"] is not None and leaked["last_used"] <= leaked["revoked_at"]


def test_damaged_key_file_stops_olp_start_with_a_clear_message(home: Path) -> None:
    db = keys_db_path(home)
    db.write_bytes(b"SQLite format 3\x00" + b"garbage" * 100)
    env = {**os.environ, **server_env(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "olp", "start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert "keys.db" in proc.stderr and "move it aside" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert db.read_bytes().startswith(b"SQLite format 3\x00garbage")  # left in place


# -- in-process: the authenticator itself, and owner-only from other machines ------------


def test_authenticator_sees_changes_from_another_connection(tmp_path: Path) -> None:
    path = keys_db_path(tmp_path)
    auth = DbAuthenticator(path, [], allow_anonymous=False)
    other = KeyStore.open(path)  # stands in for the CLI
    new = other.create("alice")
    assert auth.authenticate(new.secret).key_id == new.record.id
    other.update("alice", rpm=7, allowed_models=("gpt-*",))
    identity = auth.authenticate(new.secret)
    assert identity.limits.rpm == 7 and identity.allowed_models == ("gpt-*",)
    other.revoke(new.record.id)
    with pytest.raises(InvalidApiKey):
        auth.authenticate(new.secret)
    other.close()
    asyncio.run(auth.aclose())


def test_authenticator_asks_sqlite_only_when_the_wal_header_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = keys_db_path(tmp_path)
    auth = DbAuthenticator(path, [], allow_anonymous=False)
    other = KeyStore.open(path)
    new = other.create("alice")
    reads = 0
    data_version = auth._store.data_version

    def counted() -> int:
        nonlocal reads
        reads += 1
        return data_version()

    monkeypatch.setattr(auth._store, "data_version", counted)
    assert auth.authenticate(new.secret).key_id == new.record.id
    assert reads == 1
    for _ in range(5):
        auth.authenticate(new.secret)
    assert reads == 1  # nothing committed meanwhile: no SQLite call
    # Checkpoints that restart or truncate the WAL, then commits: each one still seen.
    for mode, rpm in (("TRUNCATE", 3), ("RESTART", 4), ("PASSIVE", 5), ("TRUNCATE", 6)):
        other._conn.execute(f"PRAGMA wal_checkpoint({mode})")
        other.update("alice", rpm=rpm)
        assert auth.authenticate(new.secret).limits.rpm == rpm
    other._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    other.revoke(new.record.id)
    with pytest.raises(InvalidApiKey):
        auth.authenticate(new.secret)
    other.close()
    asyncio.run(auth.aclose())


def _request(client: str) -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v0/management/quota",
        "headers": [(b"authorization", f"Bearer {OWNER_TOKEN}".encode())],
        "client": (client, 50000),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    return Request(scope, receive)


@pytest.mark.parametrize("loopback_only", [True, False])
def test_owner_endpoints_from_another_machine(tmp_path: Path, loopback_only: bool) -> None:
    home = tmp_path / "home"
    write_config(home, {"providers": {}, "auth": {"owner_endpoints_loopback_only": loopback_only}})
    app = create_app(load_config(server_env(home), detect_local_servers=False))
    try:
        assert require_owner(app.ctx, _request("127.0.0.1")).is_owner
        if loopback_only:
            with pytest.raises(Forbidden, match="owner_endpoints_loopback_only") as info:
                require_owner(app.ctx, _request("203.0.113.9"))
            assert info.value.code == "owner_required"
            assert info.value.http_status == 403
        else:
            assert require_owner(app.ctx, _request("203.0.113.9")).is_owner
    finally:
        asyncio.run(app.aclose())


def test_a_provider_that_reports_its_own_cost_needs_no_price(tmp_path: Path) -> None:
    # Claude Code reports every answer's cost itself: a budget can count it, priced or not.
    home = tmp_path / "home"
    write_config(
        home,
        {
            "providers": {
                "claude": {"type": "claude-cli", "models": ["claude-new-unlisted"]},
                "api": {"type": "openai-http", "base_url": "http://127.0.0.1:9/v1",
                        "models": ["unlisted-too"]},
            }
        },
    )  # fmt: skip
    app = create_app(load_config(server_env(home), detect_local_servers=False))
    try:
        ctx = app.ctx
        limits = KeyLimits(usd_month=5.0)
        budget = Identity(key_id="key_b", name="b", tier="member", limits=limits)
        chain = ctx.authorize(budget, ctx.router.resolve("claude-new-unlisted"))
        assert [hop.name for hop in chain.hops] == ["claude"]
        with pytest.raises(UnpricedModel, match="no price for api/unlisted-too"):
            ctx.authorize(budget, ctx.router.resolve("unlisted-too"))
        free = Identity(key_id="key_f", name="f", tier="member")
        assert ctx.authorize(free, ctx.router.resolve("unlisted-too")).hops
    finally:
        asyncio.run(app.aclose())


def test_an_expired_key_is_refused_saying_when_and_what_to_do(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    now = [1_900_000_000.0]  # 2030-03-17 17:46:40 UTC
    store = KeyStore.open(keys_db_path(tmp_path / "olp-home"), clock=lambda: now[0])
    guest = store.create("guest", expires_at=now[0] + 3600)
    store.close()
    with olp_server(tmp_path, two_providers(upstream), clock=lambda: now[0]) as olp:
        client = Client(olp.base_url, guest.secret)
        assert client.chat().status_code == 200
        now[0] += 3599.5
        assert client.models()  # still valid half a second before
        now[0] += 0.5
        resp = client.chat()
        assert resp.status_code == 401
        error = resp.json()["error"]
        assert error["code"] == "invalid_api_key"
        assert "'guest' expired at 2030-03-17 18:46 UTC" in error["message"]
        assert f"olp keys set {guest.record.id} --expires" in error["message"]
        models = httpx.get(f"{olp.base_url}/v1/models", headers=client.headers)
        assert models.status_code == 401
        assert Client(olp.base_url, OWNER_TOKEN).chat().status_code == 200  # owner unaffected
