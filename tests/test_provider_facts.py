"""Each provider fact has one home, its plugin: what config-less detection, `olp setup` and
`olp doctor` show is what the plugin declares, so they cannot drift apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from olp.cli.setup_plan import FAMILIES, FoundCli, Machine, candidates, default_plan
from olp.config import load_config
from olp.providers.loader import known_providers, load_plugins
from olp.registry import load_registry

from fakes.cli import fake_env, install

REGISTRY = load_registry()
PLUGINS = load_plugins()
KNOWN = known_providers(PLUGINS, REGISTRY)
CLI_TYPES = [ptype for ptype, _ in KNOWN.clis]


def found(ptype: str, *, login: str = "yes") -> FoundCli:
    facts = dict(KNOWN.clis)[ptype]
    return FoundCli(ptype, facts, f"/usr/bin/{facts.command}", "1.0", True, login)  # type: ignore[arg-type]


def test_every_builtin_cli_and_api_declares_its_facts() -> None:
    assert CLI_TYPES == ["claude-cli", "codex-cli", "vibe-cli", "gemini-cli", "qwen-cli"]
    assert [api.name for _, api in KNOWN.apis] == [
        "anthropic", "openai", "mistral", "deepseek", "groq", "openrouter"
    ]  # fmt: skip
    for ptype, cli in KNOWN.clis:
        # The registry's default executable is the one the plugin runs.
        info = REGISTRY.provider_type(ptype)
        assert info is not None and info.command == cli.command
        assert cli.default_model in cli.models
        for model in cli.models:
            assert REGISTRY.model(model) is not None, (ptype, model)


@pytest.mark.parametrize("ptype", CLI_TYPES)
def test_detection_names_the_plugins_login_file_and_hint(tmp_path: Path, ptype: str) -> None:
    cli = PLUGINS[ptype].cli
    assert cli is not None
    bin_dir = install(tmp_path / "bin", cli.command)
    env = {"OLP_HOME": str(tmp_path / "olp"), "PATH": str(bin_dir), "HOME": str(tmp_path)}
    config = load_config(env, known=KNOWN, detect_local_servers=False)
    note = next(n for n in config.notes if n.startswith(f"found {bin_dir / cli.command}"))
    assert note.endswith(f": {cli.login_hint}")
    for rel in cli.credential_files:
        assert f"~/{rel}" in note


def test_detected_providers_serve_the_plugins_models(tmp_path: Path) -> None:
    claude = PLUGINS["claude-cli"].cli
    assert claude is not None
    bin_dir = install(tmp_path / "bin", claude.command)
    login = tmp_path / claude.credential_files[0]
    login.parent.mkdir(parents=True)
    login.write_text("{}")
    env = {
        "OLP_HOME": str(tmp_path / "olp"),
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        **{api.key_env: "k" for _, api in KNOWN.apis},
    }
    config = load_config(env, known=KNOWN, detect_local_servers=False)
    assert config.providers[claude.name].models == claude.models
    for ptype, api in KNOWN.apis:
        detected = config.providers[api.name]
        assert (detected.type, detected.base_url) == (ptype, api.base_url)
        assert (detected.api_key_env, detected.models) == (api.key_env, api.models)


def test_setup_writes_the_plugins_models_defaults_and_hints() -> None:
    logged_in = Machine(clis=tuple(found(t) for t in CLI_TYPES))
    chosen, _ = candidates(logged_in, KNOWN, REGISTRY)
    by_name = {c.name: c for c in chosen}
    for _, cli in KNOWN.clis:
        assert by_name[cli.name].entry["models"] == list(cli.models)
        assert by_name[cli.name].default_model == cli.default_model
        assert cli.product in by_name[cli.name].summary
    logged_out = Machine(clis=tuple(found(t, login="no") for t in CLI_TYPES))
    notes = "\n".join(default_plan(logged_out, KNOWN, REGISTRY).notes)
    for _, cli in KNOWN.clis:
        assert f"{cli.name} found, but not logged in: {cli.login_hint}, then run" in notes


def test_doctor_shows_the_plugins_login_files_and_hint(tmp_path: Path) -> None:
    cli = PLUGINS["claude-cli"].cli
    assert cli is not None
    bin_dir = install(tmp_path / "bin", cli.command)
    olp_home = tmp_path / ".olp"
    olp_home.mkdir()
    provider = {
        "type": "claude-cli",
        "command": str(bin_dir / cli.command),
        "env": fake_env(tmp_path / "rec.jsonl", "success_stream_json_partial"),
    }
    (olp_home / "config.json").write_bytes(orjson.dumps({"providers": {"claude": provider}}))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "OLP_HOME": str(olp_home)}
    proc = subprocess.run(
        [sys.executable, "-m", "olp", "doctor", "--json"],
        env=env,
        capture_output=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    checks = {c["name"]: c for c in orjson.loads(proc.stdout)["providers"][0]["checks"]}
    assert f"~/{cli.credential_files[0]}" in checks["credentials"]["detail"]
    assert not checks["reachable"]["ok"]
    assert checks["reachable"]["fix"].startswith(cli.login_hint)


def test_setups_default_chains_name_providers_the_plugins_declare() -> None:
    clis = {cli.name for _, cli in KNOWN.clis}
    declared = {cli.name: cli.models for _, cli in KNOWN.clis}
    declared |= {api.name: api.models for _, api in KNOWN.apis}
    for family, hops in FAMILIES:
        for provider, model in hops:
            assert provider in declared, (family, provider)
            # A subscription's hop serves a model its plugin declares (APIs take any model).
            if provider in clis:
                assert model in declared[provider], (family, provider, model)
