"""`health()` and `quota()` of the CLI providers, with the fake CLI as the binary."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Message
from olp.providers.base import HopContext, Provider
from olp.providers.claude_cli import ClaudeCliProvider
from olp.providers.qwen_cli import QwenCliProvider
from olp.providers.vibe_cli import VibeCliProvider

from fakes.cli import fake_env, install

PROVIDERS = {"claude": ClaudeCliProvider, "qwen": QwenCliProvider}
LOGIN_FILES = {"claude": ".claude/.credentials.json", "qwen": ".qwen/oauth_creds.json"}


def make(tmp_path: Path, cli: str, *, command: str | None = None, login: bool = True) -> Provider:
    bin_dir = install(tmp_path / "bin", cli)
    home = tmp_path / "home"
    if login:
        (home / LOGIN_FILES[cli]).parent.mkdir(parents=True, exist_ok=True)
        (home / LOGIN_FILES[cli]).write_text("{}")
    config = ProviderConfig(
        cli,
        f"{cli}-cli",
        command=command or str(bin_dir / cli),
        env=fake_env(tmp_path / "rec.jsonl", "success_stream_json_partial"),
        user_home=home,
    )
    provider: Provider = PROVIDERS[cli](config)
    return provider


@pytest.mark.parametrize("cli", ["claude", "qwen"])
def test_health_reports_binary_version_and_login(tmp_path: Path, cli: str) -> None:
    health = asyncio.run(make(tmp_path, cli).health())
    assert health.ok, health
    assert health.checks[0] == f"binary: {tmp_path / 'bin' / cli}"
    assert health.checks[1] == f"version: 9.9.9 ({cli}, fake)"
    assert health.checks[2].startswith(f"logged in: yes (~/{LOGIN_FILES[cli]} present")
    assert health.checks[3].startswith("drops: temperature, top_p")
    assert health.checks[4] == "client tools: yes, over MCP (tool_choice: auto, none)"
    assert not (tmp_path / "rec.jsonl").exists()  # no model was called


@pytest.mark.parametrize("cli", ["claude", "qwen"])
def test_health_without_login_names_the_fix(tmp_path: Path, cli: str) -> None:
    health = asyncio.run(make(tmp_path, cli, login=False).health())
    assert not health.ok
    assert health.checks[-1].startswith("logged in: no")
    assert health.fix is not None and f"run `{cli}`" in health.fix


def test_health_without_binary_names_the_install_command(tmp_path: Path) -> None:
    health = asyncio.run(make(tmp_path, "claude", command="claude-not-here").health())
    assert not health.ok
    assert "claude-not-here not found on PATH" in health.checks[0]
    assert health.fix == "npm i -g @anthropic-ai/claude-code"


def test_claude_quota_comes_from_the_latest_rate_limit_event(tmp_path: Path) -> None:
    provider = make(tmp_path, "claude")
    assert provider.quota() is None
    assert isinstance(provider.capabilities.max_concurrent, int)
    config = ProviderConfig(
        "claude",
        "claude-cli",
        command=str(tmp_path / "bin" / "claude"),
        env=fake_env(tmp_path / "rec.jsonl", "sub_success_allowed_warning"),
    )
    provider = ClaudeCliProvider(config)
    request = ChatRequest(model="claude-sonnet-4-5", messages=(Message("user", "hi"),))

    async def run() -> None:
        async for _ in provider.stream(request, HopContext("r1")):
            pass
        await provider.aclose()

    asyncio.run(run())
    snapshot = provider.quota()
    assert snapshot is not None
    assert snapshot.reset_at == 1795970041.0
    assert "five_hour" in snapshot.source
    assert snapshot.extra == {"rejected": 0.0}


def test_a_cli_without_the_bridge_says_tools_skip_it(tmp_path: Path) -> None:
    bin_dir = install(tmp_path / "bin", "vibe")
    env = fake_env(tmp_path / "rec.jsonl", "success_streaming", MISTRAL_API_KEY="k")
    config = ProviderConfig("vibe", "vibe-cli", command=str(bin_dir / "vibe"), env=env)
    health = asyncio.run(VibeCliProvider(config).health())
    assert health.ok, health
    assert health.checks[-1] == "client tools: no (a request with tools skips this provider)"
