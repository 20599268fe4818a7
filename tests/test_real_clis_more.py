"""The real `codex` and `gemini` CLIs (and `vibe` where Python >= 3.12 is available) end to
end through OLP, against a fake upstream on 127.0.0.1 reached through the provider's
`env`: a streamed answer, a rate limit that falls back to the next hop, a usage limit
that cools the provider down until its reset.

The CLIs are installed by `real_cli` (cached between runs); without a reachable registry
these tests skip, loudly. Codex speaks the OpenAI Responses API and Gemini the Gemini
API, both served by `ResponsesGeminiUpstream`; the second hop is a FakeUpstream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from olp.config.model import ProviderConfig
from olp.providers._reset_time import parse_reset
from olp.providers.gemini_cli.events import next_midnight
from olp.providers.loader import load_plugins
from real_cli import RealCli, real_cli
from real_cli_chat import ANSWER, SYSTEM, detail, post, real_cli_config, stream_chat

from fakes.responses_gemini_upstream import (
    ResponsesGeminiUpstream,
    codex_rate_limit_headers,
    gemini_error,
    requests_to,
    responses_error,
    responses_usage_limit,
)
from fakes.upstream import FakeUpstream, Hang, Text
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def codex() -> RealCli:
    return real_cli("codex")


@pytest.fixture(scope="module")
def gemini() -> RealCli:
    return real_cli("gemini")


@pytest.fixture
def upstream() -> Iterator[ResponsesGeminiUpstream]:
    with ResponsesGeminiUpstream() as up:
        yield up


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        up.script(*[Text("from beta")] * 4)
        yield up


def config(cli: str, real: RealCli, env: dict[str, str], beta: FakeUpstream) -> dict[str, Any]:
    return real_cli_config(cli, real, env, beta, routing={"max_cooldown_s": 3 * 86400})


def codex_env(up: ResponsesGeminiUpstream) -> dict[str, str]:
    return {"OPENAI_BASE_URL": up.openai_base_url, "OPENAI_API_KEY": "sk-fake-codex"}


def gemini_env(up: ResponsesGeminiUpstream) -> dict[str, str]:
    return {"GOOGLE_GEMINI_BASE_URL": up.gemini_base_url, "GEMINI_API_KEY": "fake-gemini-key"}


def provider_cooldown(server: ThreadServer) -> dict[str, Any]:
    quota = httpx.get(
        f"{server.base_url}/v0/management/quota",
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
    ).json()
    [entry] = [p for p in quota["providers"] if p["provider"] == "real"]
    [cooling] = entry["cooldowns"]
    return dict(cooling)


# -- both ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cli", "env", "path"),
    [("codex", codex_env, "/v1/responses"), ("gemini", gemini_env, ":streamGenerateContent")],
)
def test_hanging_upstream_falls_back_after_first_byte_ms(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    upstream: ResponsesGeminiUpstream,
    beta: FakeUpstream,
    cli: str,
    env: Any,
    path: str,
) -> None:
    """The upstream takes the request and never answers, while the CLI prints its own
    lines (codex: the JSON-RPC handshake, turn/started, the echoed prompt; gemini: init
    and the echoed prompt): none is the answer, so the hop falls back after
    `first_byte_ms`, long before `idle_ms`."""
    real: RealCli = request.getfixturevalue(cli)
    upstream.script(Hang(120))
    # Long enough for the CLI to start and send its request, even on a busy machine.
    timeouts = {"first_byte_ms": 15_000, "idle_ms": 120_000, "total_ms": 240_000}
    conf = real_cli_config(cli, real, env(upstream), beta, timeouts=timeouts)
    with olp_server(tmp_path, conf) as server:
        started = time.monotonic()
        resp = post(server)
        elapsed = time.monotonic() - started
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [failed] = detail(resp)
    assert (failed["code"], failed["trigger"]) == ("TIMEOUT", "fallback")
    assert "first-byte timeout" in failed["message"]
    assert len(requests_to(upstream, path)) == 1  # the CLI did reach the upstream
    assert elapsed < 45


# -- codex --------------------------------------------------------------------------------


def test_codex_streams_an_answer(
    tmp_path: Path, codex: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Text(ANSWER, chunks=4, delay_s=0.05, headers=codex_rate_limit_headers()))
    with olp_server(tmp_path, config("codex", codex, codex_env(upstream), beta)) as server:
        pieces, _, headers = stream_chat(server)
        quota = httpx.get(
            f"{server.base_url}/v0/management/quota",
            headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        ).json()
    assert "".join(pieces) == ANSWER
    assert len(pieces) == 4  # token streaming through app-server
    assert headers["x-olp-provider-used"] == "real"
    [request] = requests_to(upstream, "/v1/responses")
    body = request.json
    assert body["model"] == codex.model and body["stream"] is True
    first = body["input"][0]
    assert first["role"] == "developer" and first["content"][0]["text"] == SYSTEM
    assert "Say it." in json.dumps(body["input"][-1])
    [entry] = [p for p in quota["providers"] if p["provider"] == "real"]
    assert entry["five_hour_utilisation"]["value"] == pytest.approx(0.88)


def test_codex_rate_limit_falls_back_at_once(
    tmp_path: Path, codex: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(
        responses_error(429, "Rate limit reached (fake)", "rate_limit_exceeded", "requests")
    )
    with olp_server(tmp_path, config("codex", codex, codex_env(upstream), beta)) as server:
        started = time.monotonic()
        resp = post(server)
        elapsed = time.monotonic() - started
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [failed] = detail(resp)
    assert (failed["code"], failed["trigger"]) == ("RATE_LIMITED", "fallback")
    assert len(requests_to(upstream, "/v1/responses")) == 1  # codex's retries are off
    assert elapsed < 30


def test_codex_usage_limit_cools_the_provider_down_until_its_reset(
    tmp_path: Path, codex: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(responses_usage_limit(resets_in_s=2 * 3600))
    with olp_server(tmp_path, config("codex", codex, codex_env(upstream), beta)) as server:
        first = post(server)
        now = time.time()
        cooling = provider_cooldown(server)
        second = post(server)
    assert first.json()["choices"][0]["message"]["content"] == "from beta"
    [failed] = detail(first)
    assert failed["code"] == "QUOTA_EXHAUSTED"
    assert "usage limit" in failed["message"]
    # Codex prints "try again at H:MM PM": the reset to the minute, about 2 hours away.
    assert cooling["model"] is None
    assert cooling["until"] == pytest.approx(now + 2 * 3600, abs=90)
    assert parse_reset(failed["message"], now) == pytest.approx(cooling["until"], abs=1)
    assert [d["code"] for d in detail(second)] == ["COOLDOWN"]
    assert len(requests_to(upstream, "/v1/responses")) == 1


# -- gemini -------------------------------------------------------------------------------


def test_gemini_streams_an_answer(
    tmp_path: Path, gemini: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Text(ANSWER, chunks=4, delay_s=0.05))
    with olp_server(tmp_path, config("gemini", gemini, gemini_env(upstream), beta)) as server:
        pieces, _, headers = stream_chat(server)
    assert "".join(pieces) == ANSWER
    assert len(pieces) == 4
    assert headers["x-olp-provider-used"] == "real"
    [request] = requests_to(upstream, ":streamGenerateContent")
    assert f"/models/{gemini.model}:" in request.path
    body = request.json
    assert body["systemInstruction"]["parts"][0]["text"].startswith(SYSTEM)
    assert "Say it." in json.dumps(body["contents"])
    assert not [t for t in body.get("tools") or [] if t.get("functionDeclarations")]


def test_gemini_rate_limit_falls_back_at_once(
    tmp_path: Path, gemini: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(
        gemini_error(429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED")
    )
    with olp_server(tmp_path, config("gemini", gemini, gemini_env(upstream), beta)) as server:
        resp = post(server)
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [failed] = detail(resp)
    assert (failed["code"], failed["trigger"]) == ("RATE_LIMITED", "fallback")
    # general.maxAttempts = 1: one request instead of ten over ~220 s.
    assert len(requests_to(upstream, ":streamGenerateContent")) == 1


def test_gemini_daily_quota_cools_the_provider_down_until_midnight_pacific(
    tmp_path: Path, gemini: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(
        gemini_error(
            429,
            "Quota exceeded for quota metric 'Generate Content API requests per day'",
            "RESOURCE_EXHAUSTED",
        )
    )
    with olp_server(tmp_path, config("gemini", gemini, gemini_env(upstream), beta)) as server:
        first = post(server)
        now = time.time()
        cooling = provider_cooldown(server)
        second = post(server)
    assert first.json()["choices"][0]["message"]["content"] == "from beta"
    assert detail(first)[0]["code"] == "QUOTA_EXHAUSTED"
    assert cooling["model"] is None
    assert cooling["until"] == pytest.approx(next_midnight(now, False), abs=5)
    assert [d["code"] for d in detail(second)] == ["COOLDOWN"]
    assert len(requests_to(upstream, ":streamGenerateContent")) == 1


# -- vibe (PyPI, Python >= 3.12) ------------------------------------------------------------


@pytest.fixture(scope="module")
def vibe() -> RealCli:
    return real_cli("vibe")


def vibe_env(beta_or_up: FakeUpstream) -> dict[str, str]:
    return {"MISTRAL_BASE_URL": beta_or_up.openai_base_url, "MISTRAL_API_KEY": "sk-fake-vibe"}


def test_vibe_answers_in_one_message(
    tmp_path: Path, vibe: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Text(ANSWER, chunks=4))
    with olp_server(tmp_path, config("vibe", vibe, vibe_env(upstream), beta)) as server:
        pieces, _, headers = stream_chat(server)
    assert pieces == [ANSWER]  # vibe prints whole messages
    assert headers["x-olp-provider-used"] == "real"
    [request] = requests_to(upstream, "/v1/chat/completions")
    body = request.json
    assert body["model"] == vibe.model
    assert SYSTEM in json.dumps(body["messages"][-1])  # first in the prompt


def test_vibe_rate_limit_falls_back_at_once(
    tmp_path: Path, vibe: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(responses_error(429, "Requests rate limit exceeded", "rate_limit", "requests"))
    with olp_server(tmp_path, config("vibe", vibe, vibe_env(upstream), beta)) as server:
        resp = post(server)
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [failed] = detail(resp)
    assert (failed["code"], failed["trigger"]) == ("RATE_LIMITED", "fallback")
    # api_retry_max_elapsed_time = 0: one request instead of ~18 over 300 s.
    assert len(requests_to(upstream, "/v1/chat/completions")) == 1


# -- health: binary, version, login — never a model ------------------------------------


@pytest.mark.parametrize("cli", ["codex", "gemini", "vibe"])
def test_health_checks_binary_version_and_login_without_a_model(
    tmp_path: Path, cli: str, upstream: ResponsesGeminiUpstream
) -> None:
    real = real_cli(cli)
    owner = tmp_path / "owner"
    owner.mkdir()
    logged_out = _provider(cli, real, owner, {})
    keyed = _provider(cli, real, owner, _KEY_ENV[cli](upstream))
    missing = _provider(cli, real, owner, {}, command=str(tmp_path / "nowhere" / cli))
    bad, good, absent = (asyncio.run(p.health()) for p in (logged_out, keyed, missing))
    assert not bad.ok and bad.fix and _FIX[cli] in bad.fix
    assert any(c.startswith("version: ") and c[9:].strip() for c in bad.checks)
    assert good.ok and good.fix is None
    assert good.checks[-1] == _TOOLS[cli] or cli == "codex"  # codex does not say
    assert not absent.ok and "install" in (absent.fix or "")
    assert upstream.calls == 0  # no model was called


_KEY_ENV = {"codex": codex_env, "gemini": gemini_env, "vibe": vibe_env}
_FIX = {"codex": " login", "gemini": "Login with Google", "vibe": " --setup"}
_NO_TOOLS = "client tools: no (a request with tools skips this provider)"
_TOOLS = {
    "codex": "",
    "gemini": "client tools: yes, over MCP (tool_choice: auto, none)",
    "vibe": _NO_TOOLS,
}


def _provider(
    cli: str, real: RealCli, owner: Path, env: dict[str, str], command: str | None = None
) -> Any:
    plugin = load_plugins()[f"{cli}-cli"]
    pconf = ProviderConfig(
        name="real",
        type=f"{cli}-cli",
        command=command or str(real.command),
        env={"PATH": real.path, **env},
        user_home=owner,
    )
    return plugin.factory(pconf)
