"""The real dashboard page in headless Chromium (Debian's `chromium`, driven by Playwright)
against a live OLP with traffic from fake upstreams.

No browser download: Playwright launches /usr/bin/chromium. Screenshots go to
test-output/ (gitignored) for a human to look at.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_olp import bearer, chat, get
from playwright.sync_api import sync_playwright

from olp.accounts import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path

from fakes.upstream import FakeUpstream, Status
from olp_server import OWNER_TOKEN, ProcessServer, ThreadServer, eventually, write_config

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = Path(__file__).parents[2] / "test-output"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A fresh Chromium profile per test."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed: apt-get install -y chromium")
    OUTPUT.mkdir(exist_ok=True)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=str(CHROMIUM),
            args=ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


def config_status(server: ProcessServer) -> dict[str, Any]:
    status: dict[str, Any] = get(server, "/v0/management/status").json()["config"]
    return status


def console_errors(page: Any) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    return errors


def open_dashboard(page: Any, server: ThreadServer | ProcessServer, key: str) -> None:
    page.goto(f"{server.base_url}/dashboard#key={key}")
    # Shown only once the first answer is rendered (a selector, not wait_for_function:
    # the page's CSP forbids the eval that one would need).
    page.wait_for_selector("#main:not([hidden])")


def test_the_page_shows_the_management_figures(
    olp: ThreadServer, alpha: FakeUpstream, member_key: str, browser: Any
) -> None:
    alpha.script(Status(429, headers={"Retry-After": "600"}))  # alpha cools down for 10 min
    for _ in range(3):
        assert chat(olp).status_code == 200
    for _ in range(2):
        assert chat(olp, headers=bearer(member_key), stream=True).status_code == 200
    assert chat(olp, model="no-such-model").status_code == 404
    store = KeyStore.open(keys_db_path(olp.config.home))
    guest = store.create("guest", expires_at=4_102_444_800.0, limits=KeyLimits(concurrent=2))
    store.close()

    page = browser.new_page()
    errors = console_errors(page)
    open_dashboard(page, olp, OWNER_TOKEN)
    data = get(olp, "/v0/management/dashboard").json()
    status = data["status"]

    # The key left the address bar (and history) as soon as the page read it.
    assert page.url == f"{olp.base_url}/dashboard"
    assert page.text_content("#total-requests") == str(status["counters"]["total_requests"])
    assert page.text_content("#total-errors") == str(status["counters"]["errors"])
    for provider in status["providers"]:
        card = f'[data-provider="{provider["name"]}"]'
        assert page.get_attribute(f"{card} .state", "data-state") == provider["state"]
        assert page.text_content(f"{card} .requests dd") == str(provider["requests"])
    assert page.get_attribute('[data-provider="alpha"] .state', "data-state") == "cooling_down"

    kid = next(k for k in data["keys"] if k["name"] == "kid")
    row = f'[data-key-id="{kid["id"]}"]'
    assert page.text_content(f"{row} td.rpd .used") == str(kid["usage"]["rpd"]) == "2"
    assert page.text_content(f"{row} td.rpd") == "2 / 100"
    assert page.text_content(f"{row} td.concurrent") == "0 · no limit"
    guest_row = f'[data-key-id="{guest.record.id}"]'
    assert page.text_content(f"{guest_row} .expires") == " · expires 2100-01-01 00:00 UTC"
    assert page.text_content(f"{guest_row} td.concurrent") == "0 / 2"

    error_rows = page.locator("#errors tbody tr[data-request-id]")
    assert error_rows.count() == len(status["recent_errors"]) == 1
    assert "model_not_found" in error_rows.first.text_content()

    countdown = page.locator('[data-provider="alpha"] .countdown')
    first = countdown.text_content()
    assert re.fullmatch(r"9m \d{1,2}s|10m 0s", first), first
    for _ in range(25):  # it ticks every second, without waiting for the next poll
        page.wait_for_timeout(100)
        if countdown.text_content() != first:
            break
    assert countdown.text_content() != first

    # The fake models have no price: the cost chart is empty, the request chart is not.
    page.click('[data-spend-by="provider"]')
    assert page.locator("#spend-legend .legend-item").count() == len(data["spend"]["by_provider"])
    assert page.text_content("#spend-chart .empty") == "no cost recorded"
    page.click('[data-spend-metric="requests"]')
    tooltips = page.eval_on_selector_all("#spend-chart rect", "rs => rs.map(r => r.textContent)")
    assert len(tooltips) == len([p for p in data["spend"]["by_provider"] if p["total_requests"]])
    assert any(t.startswith("beta: 5 (") for t in tooltips), tooltips  # today's 5 answers

    page.screenshot(path=str(OUTPUT / "dashboard.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    page.wait_for_timeout(200)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(OUTPUT / "dashboard-phone.png"), full_page=True)
    assert errors == []


def test_a_member_key_gets_403(olp: ThreadServer, member_key: str, browser: Any) -> None:
    page = browser.new_page()
    errors = console_errors(page)
    page.goto(f"{olp.base_url}/dashboard#key={member_key}")
    page.wait_for_selector("#banner:not([hidden])")
    assert "403 owner_required" in page.text_content("#banner")
    assert page.is_visible("#login") and page.is_hidden("#main")
    assert page.evaluate("sessionStorage.length") == 0  # the refused key is not kept
    # The only console line is the browser's own note about the refused fetch.
    assert errors and all("status of 403" in e for e in errors)
    page.screenshot(path=str(OUTPUT / "dashboard-member-403.png"))


def test_pasting_the_owner_key_opens_the_dashboard(olp: ThreadServer, browser: Any) -> None:
    page = browser.new_page()
    errors = console_errors(page)
    page.goto(f"{olp.base_url}/dashboard")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#key-input", OWNER_TOKEN)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#main:not([hidden])")
    assert page.text_content("#total-requests") == "0"
    assert page.evaluate("localStorage.length") == 0  # not remembered unless asked
    amounts = page.evaluate("[0, 0.00001, 0.0003, 12.5].map(OLPDashboard.usd)")
    assert amounts == ["$0", "<$0.0001", "$0.0003", "$12.50"]  # as `olp usage` writes them
    page.click("#sign-out")
    assert page.is_visible("#login")
    assert page.evaluate("sessionStorage.length") == 0
    assert errors == []


def test_a_config_edit_that_does_not_load_shows_a_banner(
    tmp_path: Path, alpha: FakeUpstream, browser: Any
) -> None:
    home = tmp_path / "home"
    good = {"providers": {"alpha": {"type": "openai-http", "base_url": alpha.openai_base_url}}}
    write_config(home, good)
    with ProcessServer(home) as server:
        page = browser.new_page()
        errors = console_errors(page)
        page.goto(f"{server.base_url}/dashboard#key={OWNER_TOKEN}")
        page.wait_for_selector("#main:not([hidden])")
        assert page.is_hidden("#banner")

        (home / "config.json").write_bytes(b'{"providers": ')  # a bad save
        page.wait_for_selector("#banner:not([hidden])", timeout=15_000)
        text = page.text_content("#banner") or ""
        assert "config.json was not reloaded" in text and "invalid JSON" in text
        assert "keeps running with the last good file" in text
        page.screenshot(path=str(OUTPUT / "dashboard-config-banner.png"))

        # Fixed: the banner goes at the next poll. (Once the server has reloaded, the
        # refresh button polls now rather than in up to 5 s.)
        write_config(home, good)
        assert eventually(lambda: config_status(server)["reload_error"] is None, 15)
        page.click("#refresh")
        page.wait_for_selector("#banner", state="hidden", timeout=15_000)

        write_config(home, {**good, "server": {"shutdown_grace_s": 5}})
        assert eventually(lambda: config_status(server)["restart_needed"] != [], 15)
        page.click("#refresh")
        page.wait_for_selector("#banner.warn:not([hidden])", timeout=15_000)
        text = page.text_content("#banner") or ""
        assert "changes to server.shutdown_grace_s take effect when OLP restarts" in text
        assert errors == []


def test_a_soft_limited_provider_says_why_and_when_it_clears(
    tmp_path: Path, alpha: FakeUpstream, browser: Any
) -> None:
    home = tmp_path / "home"
    config = {
        "providers": {"alpha": {"type": "openai-http", "base_url": alpha.openai_base_url}},
        "routing": {
            "chains": {"chat": [{"provider": "alpha", "model": "a"}]},
            "soft_triggers": {"alpha": {"daily_request_count_threshold": 1}},
        },
    }
    write_config(home, config)
    with ProcessServer(home) as server:
        assert chat(server).status_code == 200  # the day's one request: the trigger fires
        page = browser.new_page()
        errors = console_errors(page)
        open_dashboard(page, server, OWNER_TOKEN)
        card = '[data-provider="alpha"]'
        assert page.get_attribute(f"{card} .state", "data-state") == "soft_limited"
        soft = page.text_content(f"{card} .soft-limit") or ""
        assert "soft limit · clears in" in soft  # at the next UTC midnight
        assert "1 requests today ≥ daily_request_count_threshold 1" in soft
        assert re.search(r"clears in (\d+h )?\d+m", soft), soft
        page.locator(card).screenshot(path=str(OUTPUT / "dashboard-soft-limit.png"))
        assert errors == []
