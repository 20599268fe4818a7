"""CORS (`server.cors_origins`): a page on another origin may call OLP only when allowed.

The browser test runs Debian's Chromium (Playwright, no download): a page served from one
port calls OLP's chat route on another with fetch(), as a browser chat UI would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import sync_playwright

from olp.config import load_config
from olp.errors import ConfigError

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, ThreadServer, olp_server, write_config

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


def config(upstream: FakeUpstream, origins: list[str] | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        }
    }
    if origins is not None:
        cfg["server"] = {"cors_origins": origins}
    return cfg


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>chat ui</title><p>a chat UI</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def page_origin() -> Iterator[str]:
    """A web page on its own port: another origin than OLP's."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed: apt-get install -y chromium")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), args=ARGS, headless=True
        )
        try:
            yield context
        finally:
            context.close()


FETCH = """async ([url, key]) => {
  try {
    const resp = await fetch(url + "/v1/chat/completions", {
      method: "POST",
      headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json",
                "X-Stainless-OS": "Linux"},
      body: JSON.stringify({model: "m", messages: [{role: "user", content: "hi"}]}),
    });
    const body = await resp.json();
    return {status: resp.status, text: body.choices[0].message.content,
            provider: resp.headers.get("x-olp-provider-used"),
            requestId: resp.headers.get("x-request-id")};
  } catch (err) {
    return {error: String(err)};
  }
}"""


def call_from_page(browser: Any, origin: str, server: ThreadServer) -> dict[str, Any]:
    page = browser.new_page()
    page.goto(origin)
    result: dict[str, Any] = page.evaluate(FETCH, [server.base_url, OWNER_TOKEN])
    page.close()
    return result


def test_a_page_from_an_allowed_origin_calls_olp(
    tmp_path: Path, upstream: FakeUpstream, page_origin: str, browser: Any
) -> None:
    upstream.script(Text("hello page"))
    with olp_server(tmp_path, config(upstream, [page_origin])) as server:
        result = call_from_page(browser, page_origin, server)
    assert result.get("status") == 200, result
    assert result["text"] == "hello page"
    assert result["provider"] == "up"  # exposed to the page's script
    assert result["requestId"].startswith("req_")


def test_a_page_is_refused_without_cors_origins(
    tmp_path: Path, upstream: FakeUpstream, page_origin: str, browser: Any
) -> None:
    with olp_server(tmp_path, config(upstream, None)) as server:
        result = call_from_page(browser, page_origin, server)
    assert "Failed to fetch" in result.get("error", ""), result
    assert upstream.calls == 0  # the preflight failed: the request itself was never sent


def test_a_page_from_another_origin_is_refused(
    tmp_path: Path, upstream: FakeUpstream, page_origin: str, browser: Any
) -> None:
    with olp_server(tmp_path, config(upstream, ["https://chat.example.com"])) as server:
        result = call_from_page(browser, page_origin, server)
    assert "Failed to fetch" in result.get("error", ""), result
    assert upstream.calls == 0


def test_preflight_answer(tmp_path: Path, upstream: FakeUpstream) -> None:
    origin = "https://chat.example.com"
    with olp_server(tmp_path, config(upstream, [origin])) as server:
        resp = httpx.options(
            f"{server.base_url}/v1/chat/completions",
            headers={
                "origin": origin,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type, x-api-key, "
                "anthropic-version, openai-beta, x-stainless-arch, x-evil",
            },
        )
        other = httpx.options(
            f"{server.base_url}/v1/chat/completions",
            headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
        )
    assert resp.status_code == 204
    assert resp.headers["access-control-allow-origin"] == origin
    assert "POST" in resp.headers["access-control-allow-methods"]
    allowed = {h.strip() for h in resp.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "x-api-key", "anthropic-version", "x-stainless-arch"} <= allowed
    assert "x-evil" not in allowed
    assert int(resp.headers["access-control-max-age"]) > 0
    assert other.status_code == 405
    assert "access-control-allow-origin" not in other.headers


def test_errors_expose_retry_after_and_olp_headers(tmp_path: Path, upstream: FakeUpstream) -> None:
    with olp_server(tmp_path, config(upstream, ["*"])) as server:
        resp = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            headers={"origin": "http://any.example", "authorization": f"Bearer {OWNER_TOKEN}"},
            json={"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        )
    assert resp.status_code == 404
    assert resp.headers["access-control-allow-origin"] == "http://any.example"
    exposed = resp.headers["access-control-expose-headers"]
    assert "x-olp-request-id" in exposed and "retry-after" in exposed


@pytest.mark.parametrize(
    ("server", "auth", "words"),
    [
        ({"cors_origins": ["*"]}, {"allow_anonymous": True}, "allow_anonymous"),
        ({"cors_origins": ["https://a.example/"]}, {}, "no path"),
        ({"cors_origins": ["chat.example.com"]}, {}, "must be an origin"),
        ({"cors_origins": "https://a.example"}, {}, "array"),
    ],
)
def test_bad_cors_origins_are_config_errors(
    tmp_path: Path, server: dict[str, Any], auth: dict[str, Any], words: str
) -> None:
    write_config(tmp_path, {"server": server, "auth": auth})
    with pytest.raises(ConfigError) as caught:
        load_config({"OLP_HOME": str(tmp_path)})
    assert words in str(caught.value)
    assert "server.cors_origins" in str(caught.value)
