"""The management JSON: status, dashboard data, /health detail — who may see it and what
it says after real traffic through a live OLP."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from live_olp import OWNER, bearer, chat, get, two_hop_config

from olp.accounts.identity import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path
from olp.server import OLPApp

from fakes.upstream import FakeUpstream, Status
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

OWNER_ONLY = (
    "/v0/management/status",
    "/v0/management/dashboard",
    "/v0/management/usage",
    "/v0/management/quota",
    "/metrics",
)


@pytest.mark.parametrize("path", OWNER_ONLY)
def test_owner_only(olp: ThreadServer, member_key: str, path: str) -> None:
    assert get(olp, path).status_code == 200
    member = get(olp, path, headers=bearer(member_key))
    assert member.status_code == 403
    assert member.json()["error"]["code"] == "owner_required"
    assert get(olp, path, headers=None).status_code == 401
    assert get(olp, path, headers=bearer("olp_" + "x" * 43)).status_code == 401


def test_status_after_traffic(olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream) -> None:
    alpha.script(Status(429, headers={"Retry-After": "600"}))
    assert chat(olp).headers["x-olp-provider-used"] == "beta"
    assert chat(olp).headers["x-olp-provider-used"] == "beta"
    beta.script(Status(500, body={"error": {"message": "disk full at /srv/models/b1/weights"}}))
    failed = chat(olp)
    assert failed.status_code == 503
    for _ in range(3):  # bad keys: counted nowhere an attacker could flood
        assert chat(olp, headers=bearer("olp_" + "y" * 43)).status_code == 401

    status = get(olp, "/v0/management/status").json()
    providers = {p["name"]: p for p in status["providers"]}
    assert providers["alpha"]["state"] == "cooling_down"
    (cooldown,) = providers["alpha"]["cooldowns"]
    assert cooldown["model"] == "a1" and cooldown["reason"] == "RATE_LIMITED"
    assert 590 < cooldown["until"] - time.time() <= 600
    assert providers["beta"]["requests"] == 2  # the 503 counts for alpha, its first hop
    assert providers["beta"]["latency_p50_ms"] is not None
    assert providers["beta"]["state"] == "ok"

    counters = status["counters"]
    assert counters["fallbacks"] == 3
    assert counters["fallback_saves"] == 2
    assert counters["active_requests"] == 0

    errors = status["recent_errors"]
    assert [e["status"] for e in errors] == [503]
    assert errors[0]["request_id"] == failed.headers["x-olp-request-id"]
    assert errors[0]["code"] == failed.json()["error"]["code"]

    newest = status["recent_fallbacks"][0]
    assert newest["chain"] == "chat" and newest["served_by"] is None
    assert [(h["provider"], h["code"]) for h in newest["hops"]] == [
        ("alpha", "COOLDOWN"),
        ("beta", "UPSTREAM_ERROR"),
    ]
    assert "/srv/models" not in orjson.dumps(status).decode()
    oldest = status["recent_fallbacks"][-1]
    assert oldest["served_by"] == "beta"
    assert oldest["hops"][0]["code"] == "RATE_LIMITED"


def test_dashboard_data(olp: ThreadServer, member_key: str) -> None:
    for _ in range(2):
        assert chat(olp, headers=bearer(member_key)).status_code == 200
    assert chat(olp).status_code == 200
    data = get(olp, "/v0/management/dashboard").json()

    spend = data["spend"]
    assert len(spend["days"]) == 30
    today = {time.strftime("%Y-%m-%d", time.gmtime(time.time() - s)) for s in (0, 60)}
    assert spend["days"][-1] in today
    kid = next(row for row in spend["by_key"] if row.get("key_name") == "kid")
    # sums, not the last bucket: the requests may straddle midnight (or, below, a minute)
    assert kid["total_requests"] == 2 and sum(kid["requests"]) == 2
    assert all(len(row["api_cost_usd"]) == 30 for row in spend["by_provider"])

    keys = {k["name"]: k for k in data["keys"]}
    assert keys["kid"]["tier"] == "member"
    assert keys["kid"]["usage"]["rpd"] == 2
    limits = {"rpm": 30, "rpd": 100, "rp7d": None, "rp30d": None, "tpd": None}
    limits |= {"usd_month": None, "concurrent": None}
    assert keys["kid"]["limits"] == limits
    assert keys["kid"]["usage"]["concurrent"] == 0  # none in progress now
    assert keys["kid"]["utilisation"]["rpd"] == pytest.approx(0.02)
    assert keys["kid"]["utilisation"]["tpd"] is None
    assert keys["owner"]["usage"]["rpd"] == 1

    traffic = data["traffic"]["last_hour"]
    assert len(traffic["total"]) == 60 and traffic["requests"] == 3
    assert sum(traffic["by_provider"]["alpha"]) == 3
    assert len(data["traffic"]["last_24h"]["total"]) == 24
    assert data["status"]["counters"]["total_requests"] == 3


def test_revoked_keys_leave_the_keys_panel(olp: ThreadServer, member_key: str) -> None:
    store = KeyStore.open(keys_db_path(olp.config.home))
    try:
        store.create("gone", limits=KeyLimits(rpd=5))
        store.revoke("gone")
    finally:
        store.close()
    names = [k["name"] for k in get(olp, "/v0/management/dashboard").json()["keys"]]
    assert names[0] == "owner" and "kid" in names and "gone" not in names


def test_health_public_and_owner(olp: ThreadServer, member_key: str) -> None:
    public = get(olp, "/health", headers=None).json()
    assert public == {"ok": True, "version": "0.1.0"}
    assert "providers" not in get(olp, "/health", headers=bearer(member_key)).json()
    owner = get(olp, "/health").json()
    alpha = owner["providers"]["alpha"]
    assert alpha["state"] == "ok" and alpha["enabled"] is True
    assert alpha["health"]["ok"] is True
    assert any(c.startswith("reachable: yes") for c in alpha["health"]["checks"])
    assert alpha["active_spawns"] is None  # an HTTP provider spawns nothing


def test_health_check_failure_marks_the_provider(tmp_path: Path, alpha: FakeUpstream) -> None:
    config = {
        "providers": {
            "alpha": {"type": "openai-http", "base_url": alpha.openai_base_url},
            "down": {"type": "openai-http", "base_url": "http://127.0.0.1:9/v1"},
        }
    }
    with olp_server(tmp_path, config) as server:
        down = get(server, "/health").json()["providers"]["down"]
        assert down["state"] == "unhealthy"
        assert down["health"]["ok"] is False
        assert any("reachable: no" in c for c in down["health"]["checks"])


async def _asgi_get(app: OLPApp, path: str, client: str, token: str | None) -> tuple[int, Any]:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": headers,
        "client": (client, 50000),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("loopback_only", [True, False])
@pytest.mark.parametrize(
    ("path", "token"),
    [
        ("/v0/management/status", OWNER_TOKEN),
        ("/v0/management/dashboard", OWNER_TOKEN),
        ("/metrics", OWNER_TOKEN),
        ("/dashboard", None),
        ("/dashboard/app.js", None),
    ],
)
def test_from_another_machine(
    tmp_path: Path,
    alpha: FakeUpstream,
    beta: FakeUpstream,
    loopback_only: bool,
    path: str,
    token: str | None,
) -> None:
    config = two_hop_config(alpha, beta, auth={"owner_endpoints_loopback_only": loopback_only})
    with olp_server(tmp_path, config) as server:
        status, body = server.call(_asgi_get(server.app, path, "203.0.113.9", token))
        if loopback_only:
            assert status == 403
            assert orjson.loads(body)["error"]["code"] == "owner_required"
        else:
            assert status == 200
        local, _ = server.call(_asgi_get(server.app, path, "127.0.0.1", token))
        assert local == 200


def test_page_refuses_a_member_key_and_serves_the_shell_without_one(
    olp: ThreadServer, member_key: str
) -> None:
    resp = get(olp, "/dashboard", headers=bearer(member_key))
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "owner_required"
    shell = get(olp, "/dashboard", headers=None)
    assert shell.status_code == 200
    assert "<title>OLP Dashboard</title>" in shell.text
    csp = shell.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert get(olp, "/dashboard", headers=OWNER).status_code == 200
    assets = ("/dashboard/lib.js", "/dashboard/app.js", "/dashboard/style.css")
    for asset, kind in zip(assets, ("javascript", "javascript", "css"), strict=True):
        resp = get(olp, asset, headers=None)
        assert resp.status_code == 200 and kind in resp.headers["content-type"]


def test_cache_hits_and_what_they_saved(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    # $1 / $2 per million prompt / completion tokens for beta's model.
    config = two_hop_config(alpha, beta, pricing={"b1": {"input": 1.0, "output": 2.0}})
    with olp_server(tmp_path, config) as server:
        assert chat(server, model="beta-only", content="same").headers["x-olp-cache"] == "miss"
        hit = chat(server, model="beta-only", content="same")
        assert hit.headers["x-olp-cache"] == "hit"
        usage = hit.json()["usage"]
        assert usage["prompt_tokens"] and usage["completion_tokens"]
        saved = (usage["prompt_tokens"] * 1.0 + usage["completion_tokens"] * 2.0) / 1e6

        data = get(server, "/v0/management/dashboard").json()
        cache = data["cache"]
        assert (cache["hits"], cache["misses"], cache["entries"]) == (1, 1, 1)
        assert cache["saved_requests"] == 1 and cache["saved_unpriced_requests"] == 0
        assert cache["saved_api_cost_usd"] == pytest.approx(saved)
        counters = data["status"]["counters"]
        assert (counters["cache_hits"], counters["cache_misses"]) == (1, 1)
