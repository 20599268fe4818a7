"""Without a config file, logged-in subscription CLIs on PATH become providers."""

from __future__ import annotations

from pathlib import Path

from olp.config import load_config
from olp.providers.loader import known_providers, load_plugins
from olp.registry import load_registry

from fakes.cli import install

KNOWN = known_providers(load_plugins(), load_registry())


def test_logged_in_cli_on_path_is_detected(tmp_path: Path) -> None:
    bin_dir = install(tmp_path / "bin", "claude", "qwen", "codex", "gemini")
    home = tmp_path / "home"
    for rel in (".codex/auth.json", ".gemini/oauth_creds.json"):
        (home / rel).parent.mkdir(parents=True)
        (home / rel).write_text("{}")
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text("{}")
    (home / ".qwen").mkdir()
    (home / ".qwen" / "oauth_creds.json").write_text("{}")
    env = {
        "OLP_HOME": str(tmp_path / "olp"),
        "PATH": f"{bin_dir}:/usr/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "OLP_OWNER_TOKEN": "secret",
    }
    config = load_config(env, known=KNOWN, detect_local_servers=False)
    claude = config.providers["claude"]
    assert claude.type == "claude-cli"
    assert claude.command == str(bin_dir / "claude")
    assert "claude-sonnet-4-5" in claude.models
    assert claude.user_home == home
    assert dict(claude.inherited_env) == {"PATH": f"{bin_dir}:/usr/bin", "LANG": "C.UTF-8"}
    assert config.providers["codex"].type == "codex-cli"
    # Tiers B and C: found, but opt-in only (B also needs consent).
    assert "qwen" not in config.providers
    assert "gemini" not in config.providers
    assert any("qwen-cli is risk tier B" in note and "consent" in note for note in config.notes)
    assert any("gemini-cli is risk tier C" in note for note in config.notes)


def test_cli_without_login_is_only_a_note(tmp_path: Path) -> None:
    bin_dir = install(tmp_path / "bin", "claude")
    env = {"OLP_HOME": str(tmp_path / "olp"), "PATH": str(bin_dir), "HOME": str(tmp_path)}
    config = load_config(env, known=KNOWN, detect_local_servers=False)
    assert "claude" not in config.providers
    assert any("~/.claude/.credentials.json" in note for note in config.notes)
