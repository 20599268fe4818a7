"""`olp setup`: the planner (pure) for several machines, the local-server probes against real
HTTP servers, and the command itself as a subprocess with a controlled PATH and HOME.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from olp.accounts.keystore import KeyStore, keys_db_path
from olp.cli.setup_detect import probe_ollama, probe_openai_compatible
from olp.cli.setup_plan import (
    FAMILIES,
    FoundCli,
    FoundServer,
    Machine,
    build_config,
    candidates,
    default_plan,
    plan_chains,
)
from olp.cli.setup_render import render_config
from olp.config import Config, load_config
from olp.providers.loader import known_providers, load_plugins
from olp.registry import load_registry

REGISTRY = load_registry()
PLUGINS = load_plugins()
KNOWN = known_providers(PLUGINS, REGISTRY)
CLI_FACTS = dict(KNOWN.clis)


def cli(
    type_: str, *, login: str = "yes", works: bool = True, env: tuple[str, ...] = ()
) -> FoundCli:
    return FoundCli(
        type=type_,
        facts=CLI_FACTS[type_],
        path=f"/usr/bin/{type_.removesuffix('-cli')}",
        version="1.0",
        works=works,
        login=login,  # type: ignore[arg-type]
        login_source="~/.x" if login == "yes" else "",
        login_env=env,
    )


OLLAMA = FoundServer("ollama", "Ollama", "http://127.0.0.1:11434/v1", ("llama3.2", "qwen2.5"))


def loads(
    config: Mapping[str, Any], tmp_path: Path, env: Mapping[str, str] | None = None
) -> Config:
    """The config as `olp start` would load it (ConfigError if it is not valid)."""
    home = tmp_path / "check"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_bytes(render_config(config))
    return load_config({"OLP_HOME": str(home), **(env or {})}, detect_local_servers=False)


def hops(chain: list[dict[str, str]]) -> list[str]:
    return [f"{h['provider']}/{h['model']}" for h in chain]


# ---------------------------------------------------------------- the planner (pure)


def test_nothing_found_gives_an_empty_valid_config_and_says_what_to_do(tmp_path: Path) -> None:
    plan = default_plan(Machine(), KNOWN, REGISTRY)
    assert plan.config["providers"] == {}
    assert plan.config["routing"]["chains"] == {}
    assert plan.providers == ()
    note = " ".join(plan.notes)
    for hint in ("claude", "codex", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "Ollama"):
        assert hint in note
    config = loads(plan.config, tmp_path)
    assert config.providers == {}


def test_only_openai_key(tmp_path: Path) -> None:
    plan = default_plan(Machine(api_keys=("OPENAI_API_KEY",)), KNOWN, REGISTRY)
    assert plan.config["providers"] == {
        "openai": {
            "type": "openai-http",
            "base_url": "https://api.openai.com/v1",
            "api_key_env": "OPENAI_API_KEY",
            "models": ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-5", "gpt-5-mini"],
        }
    }
    chains = plan.config["routing"]["chains"]
    assert {name: hops(c) for name, c in chains.items()} == {
        "gpt-5": ["openai/gpt-5"],
        "codex": ["openai/gpt-5-codex"],
        "default": ["openai/gpt-5"],
    }
    config = loads(plan.config, tmp_path, {"OPENAI_API_KEY": "sk-x"})
    assert config.providers["openai"].api_key == "sk-x"


def test_claude_codex_anthropic_and_ollama(tmp_path: Path) -> None:
    machine = Machine(
        clis=(cli("claude-cli"), cli("codex-cli")),
        api_keys=("ANTHROPIC_API_KEY",),
        servers=(OLLAMA,),
    )
    plan = default_plan(machine, KNOWN, REGISTRY)
    assert list(plan.config["providers"]) == ["claude", "codex", "anthropic", "ollama"]
    assert plan.config["providers"]["ollama"] == {
        "type": "openai-http",
        "base_url": "http://127.0.0.1:11434/v1",
        "models": ["llama3.2", "qwen2.5"],
    }
    chains = {name: hops(c) for name, c in plan.config["routing"]["chains"].items()}
    assert chains == {
        "sonnet": ["claude/claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"],
        "opus": ["claude/claude-opus-4-1", "anthropic/claude-opus-4-1"],
        "haiku": ["claude/claude-haiku-4-5", "anthropic/claude-haiku-4-5"],
        "gpt-5": ["codex/gpt-5"],
        "codex": ["codex/gpt-5-codex"],
        "local": ["ollama/llama3.2"],
        # Subscriptions first, then API keys, then local.
        "default": [
            "claude/claude-sonnet-4-5",
            "codex/gpt-5",
            "anthropic/claude-sonnet-4-5",
            "ollama/llama3.2",
        ],
    }
    assert plan.notes == ()
    config = loads(plan.config, tmp_path, {"ANTHROPIC_API_KEY": "k"})
    assert [h.provider for h in config.routing.chains["default"]] == [
        "claude", "codex", "anthropic", "ollama"
    ]  # fmt: skip


def test_openrouter_is_the_last_hop_of_every_family(tmp_path: Path) -> None:
    machine = Machine(
        clis=(cli("claude-cli"), cli("vibe-cli")),
        api_keys=("OPENROUTER_API_KEY", "MISTRAL_API_KEY", "ANTHROPIC_API_KEY"),
    )
    plan = default_plan(machine, KNOWN, REGISTRY)
    chains = {name: hops(c) for name, c in plan.chains.items()}
    assert chains["sonnet"] == [
        "claude/claude-sonnet-4-5",
        "anthropic/claude-sonnet-4-5",
        "openrouter/anthropic/claude-sonnet-4.5",
    ]
    assert chains["devstral"] == [
        "vibe/devstral-medium-latest",
        "mistral/devstral-medium-latest",
        "openrouter/mistralai/devstral-medium",
    ]
    assert chains["gemini-pro"] == ["openrouter/google/gemini-2.5-pro"]
    assert chains["default"][-1] == "openrouter/anthropic/claude-sonnet-4.5"
    assert chains["default"][:2] == ["claude/claude-sonnet-4-5", "vibe/devstral-medium-latest"]
    loads(plan.config, tmp_path)


def test_risk_tiers_b_and_c_are_never_added_by_yes() -> None:
    machine = Machine(clis=(cli("claude-cli"), cli("gemini-cli"), cli("qwen-cli")))
    plan = default_plan(machine, KNOWN, REGISTRY)
    assert list(plan.config["providers"]) == ["claude"]
    assert "gemini-pro" not in plan.chains
    assert "qwen-coder" not in plan.chains
    notes = "\n".join(plan.notes)
    assert "qwen (qwen-cli) found but not added: risk tier B" in notes
    assert "gemini (gemini-cli) found but not added: risk tier C" in notes
    assert "without --yes" in notes
    # They are still candidates: the interactive wizard asks about them.
    found, _ = candidates(machine, KNOWN, REGISTRY)
    qwen = next(c for c in found if c.name == "qwen")
    assert qwen.tier == "B" and qwen.needs_consent and not qwen.default_on
    assert not next(c for c in found if c.name == "gemini").default_on


def test_choosing_a_tier_b_provider_records_consent(tmp_path: Path) -> None:
    found, _ = candidates(Machine(clis=(cli("qwen-cli"),)), KNOWN, REGISTRY)
    config = build_config(found, plan_chains(found))
    assert config["providers"]["qwen"]["consent"] is True
    assert hops(config["routing"]["chains"]["qwen-coder"]) == ["qwen/qwen3-coder-plus"]
    assert loads(config, tmp_path).providers["qwen"].consent is True


def test_unusable_clis_are_left_out_with_the_fix() -> None:
    machine = Machine(
        clis=(
            cli("claude-cli", login="no"),
            cli("codex-cli", works=False),
            cli("vibe-cli"),
        )
    )
    without_vibe = {t: p for t, p in PLUGINS.items() if t != "vibe-cli"}
    plan = default_plan(machine, known_providers(without_vibe, REGISTRY), REGISTRY)
    assert plan.config["providers"] == {}
    notes = "\n".join(plan.notes)
    assert "claude found, but not logged in: run `claude` once and log in" in notes
    assert "codex at /usr/bin/codex fails `codex --version`" in notes
    assert "no vibe-cli provider plugin installed" in notes
    assert "no usable provider found" in notes


def test_login_that_cannot_be_checked_is_kept() -> None:
    # macOS keeps Claude Code's login in the Keychain: setup cannot see it, doctor can.
    plan = default_plan(Machine(clis=(cli("claude-cli", login="unknown"),)), KNOWN, REGISTRY)
    assert list(plan.config["providers"]) == ["claude"]


def test_login_by_variable_is_passed_to_the_child(tmp_path: Path) -> None:
    machine = Machine(clis=(cli("claude-cli", env=("CLAUDE_CODE_OAUTH_TOKEN",)),))
    plan = default_plan(machine, KNOWN, REGISTRY)
    entry = plan.config["providers"]["claude"]
    assert entry["env"] == {"CLAUDE_CODE_OAUTH_TOKEN": "${CLAUDE_CODE_OAUTH_TOKEN}"}
    config = loads(plan.config, tmp_path, {"CLAUDE_CODE_OAUTH_TOKEN": "tok"})
    assert config.providers["claude"].env == {"CLAUDE_CODE_OAUTH_TOKEN": "tok"}


def test_local_servers_without_models_get_no_hop(tmp_path: Path) -> None:
    empty = FoundServer("ollama", "Ollama", "http://127.0.0.1:11434/v1", ())
    lms = FoundServer("lmstudio", "LM Studio", "http://127.0.0.1:1234/v1", ("phi-4",))
    plan = default_plan(Machine(servers=(empty, lms)), KNOWN, REGISTRY)
    assert list(plan.config["providers"]) == ["ollama", "lmstudio"]
    assert "models" not in plan.config["providers"]["ollama"]
    assert {n: hops(c) for n, c in plan.chains.items()} == {
        "local": ["lmstudio/phi-4"],
        "default": ["lmstudio/phi-4"],
    }
    assert any("serves no model yet" in n for n in plan.notes)
    loads(plan.config, tmp_path)


def test_family_models_are_in_the_registry() -> None:
    # Canonical ids for first-party hops: OLP prices and resolves them (OpenRouter has its own).
    for _family, family_hops in FAMILIES:
        for provider, model in family_hops:
            if provider != "openrouter":
                assert REGISTRY.model(model) is not None, model


def test_render_config_is_the_same_json() -> None:
    machine = Machine(clis=(cli("claude-cli"),), api_keys=("OPENAI_API_KEY",), servers=(OLLAMA,))
    config = default_plan(machine, KNOWN, REGISTRY).config
    text = render_config(config)
    assert orjson.loads(text) == config
    assert b'{"provider": "claude", "model": "claude-sonnet-4-5"}' in text
    assert all(len(line) <= 100 for line in text.decode().splitlines())


# ---------------------------------------------------------------- local-server probes


@pytest.fixture
def json_server() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A real HTTP server on 127.0.0.1 answering GET path → body from a dict."""
    routes: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = routes.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body or b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", routes
    finally:
        server.shutdown()
        server.server_close()


def test_probe_ollama(json_server: tuple[str, dict[str, bytes]]) -> None:
    base, routes = json_server
    routes["/api/tags"] = orjson.dumps({"models": [{"name": "llama3.2"}, {"name": 3}, {}]})
    assert probe_ollama(base) == ("llama3.2",)
    routes["/api/tags"] = b"not json"
    assert probe_ollama(base) is None


def test_probe_openai_compatible(json_server: tuple[str, dict[str, bytes]]) -> None:
    base, routes = json_server
    routes["/v1/models"] = orjson.dumps(
        {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "owned_by": "vllm"}]}
    )
    assert probe_openai_compatible(f"{base}/v1") == (("Qwen/Qwen3-8B",), "vllm")


def test_probes_of_nothing_listening_are_nones() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert probe_ollama(f"http://127.0.0.1:{port}") is None
    assert probe_openai_compatible(f"http://127.0.0.1:{port}/v1") is None


# ---------------------------------------------------------------- the command


class Machine_:
    """A tmp machine: `bin/` as the whole PATH, `home/` as HOME, `home/.olp` as OLP_HOME."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.home = root / "home"
        self.olp_home = self.home / ".olp"
        self.bin.mkdir()
        self.home.mkdir()
        self.config = self.olp_home / "config.json"

    def add_cli(self, name: str, *, login: str | None = None, exit_code: int = 0) -> None:
        script = self.bin / name
        script.write_text(f'#!/bin/sh\necho "{name} 9.9.9 (fake)"\nexit {exit_code}\n')
        script.chmod(0o755)
        if login:
            cred = self.home / login
            cred.parent.mkdir(parents=True, exist_ok=True)
            cred.write_text("{}")

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = {"PATH": str(self.bin), "HOME": str(self.home), "OLP_HOME": str(self.olp_home)}
        full_env.update(env or {})
        proc = subprocess.run(
            [sys.executable, "-m", "olp", "setup", "--no-local", *args],
            env=full_env,
            input=stdin if stdin is not None else "",
            capture_output=True,
            encoding="utf-8",
            timeout=60,
            check=False,
        )
        assert "Traceback" not in proc.stdout + proc.stderr
        return proc

    def load(self, env: Mapping[str, str] | None = None) -> Config:
        return load_config({"OLP_HOME": str(self.olp_home), **(env or {})})


@pytest.fixture
def machine(tmp_path: Path) -> Machine_:
    m = Machine_(tmp_path)
    m.add_cli("claude", login=".claude/.credentials.json")
    m.add_cli("codex", login=".codex/auth.json")
    return m


KEY_ENV = {"ANTHROPIC_API_KEY": "sk-ant-test"}


def owner_key_of(out: str) -> str:
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("Your owner key"))
    key = lines[i + 2].strip()
    assert key.startswith("olp_") and len(key) == 47
    return key


def test_setup_yes_writes_a_valid_config_and_an_owner_key(machine: Machine_) -> None:
    proc = machine.run("--yes", "--port", "4111", env=KEY_ENV)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "checking claude… " in out and "logged in (~/.claude/.credentials.json)" in out
    assert "checking vibe… not on PATH" in out
    assert "checking API key variables… set: ANTHROPIC_API_KEY" in out

    config = machine.load(KEY_ENV)
    assert config.server.port == 4111
    assert stat.S_IMODE(machine.config.stat().st_mode) == 0o600
    assert [h.provider for h in config.routing.chains["sonnet"]] == ["claude", "anthropic"]
    if "codex-cli" in load_plugins():
        assert [h.provider for h in config.routing.chains["gpt-5"]] == ["codex"]
        assert config.routing.chains["default"][1].provider == "codex"
    assert "sk-ant-test" not in machine.config.read_text()  # secrets stay in the env

    # The owner key: printed once here, stored only as a hash in the key store.
    key = owner_key_of(out)
    assert out.count("Your owner key") == 1
    store = KeyStore.open(keys_db_path(machine.olp_home))
    try:
        owners = [r for r in store.list_keys() if r.tier == "owner"]
        assert len(owners) == 1
        assert [h for h, _ in store.active_secrets()] == [hashlib.sha256(key.encode()).hexdigest()]
    finally:
        store.close()
    assert key.encode() not in b"".join(p.read_bytes() for p in machine.olp_home.iterdir())

    # Client settings with the real port and key.
    for client in ("curl", "openai SDK", "Continue", "Cline", "Aider", "Open WebUI"):
        assert client in out
    assert "http://127.0.0.1:4111/v1" in out
    assert f'api_key="{key}"' in out
    assert f"--openai-api-key {key}" in out
    assert f"OPENAI_API_KEY={key}" in out
    assert "next: `olp start`, then `olp doctor`" in out
    assert "already running on this home applies its providers and chains" in out


def test_rerun_with_yes_refuses_and_leaves_the_file(machine: Machine_) -> None:
    assert machine.run("--yes", env=KEY_ENV).returncode == 0
    before = machine.config.read_bytes()
    proc = machine.run("--yes")
    assert proc.returncode == 2
    assert "already exists" in proc.stderr and "--force" in proc.stderr
    assert machine.config.read_bytes() == before
    assert not list(machine.olp_home.glob("config.json.bak-*"))


def test_rerun_with_force_keeps_a_backup_and_the_owner_key(machine: Machine_) -> None:
    first = machine.run("--yes", env=KEY_ENV)
    key = owner_key_of(first.stdout)
    before = machine.config.read_bytes()
    proc = machine.run("--yes", "--force")  # no ANTHROPIC_API_KEY this time
    assert proc.returncode == 0, proc.stderr
    backups = list(machine.olp_home.glob("config.json.bak-*"))
    assert len(backups) == 1
    assert backups[0].read_bytes() == before
    assert stat.S_IMODE(backups[0].stat().st_mode) == 0o600
    assert "anthropic" not in machine.load().providers
    assert "Backed up the previous config to" in proc.stdout
    # The existing owner key is kept, never shown again, and how to replace it is said.
    assert "Your owner key" not in proc.stdout
    assert key not in proc.stdout
    assert "olp keys rotate key_" in proc.stdout
    assert "<your OLP key>" in proc.stdout


def test_nothing_found(tmp_path: Path) -> None:
    m = Machine_(tmp_path)
    proc = m.run("--yes")
    assert proc.returncode == 0, proc.stderr
    assert "no usable provider found" in proc.stdout
    assert "OPENAI_API_KEY" in proc.stdout
    assert m.load().providers == {}


def test_broken_cli_is_reported_not_added(tmp_path: Path) -> None:
    m = Machine_(tmp_path)
    m.add_cli("claude", login=".claude/.credentials.json", exit_code=1)
    proc = m.run("--yes")
    assert proc.returncode == 0, proc.stderr
    assert "`--version` failed" in proc.stdout
    assert m.load().providers == {}


def test_interactive_answers_from_stdin(tmp_path: Path) -> None:
    m = Machine_(tmp_path)
    m.add_cli("claude", login=".claude/.credentials.json")
    m.add_cli("qwen", login=".qwen/oauth_creds.json")
    # claude? yes · qwen (tier B, consent)? yes · anthropic? no · chains · port · write? yes
    answers = "y\ny\nn\nsonnet, qwen-coder\n4567\ny\n"
    proc = m.run(env=KEY_ENV, stdin=answers)
    assert proc.returncode == 0, proc.stderr
    assert "is risk tier B" in proc.stdout
    config = m.load(KEY_ENV)
    assert sorted(config.providers) == ["claude", "qwen"]
    assert config.providers["qwen"].consent is True
    assert sorted(config.routing.chains) == ["qwen-coder", "sonnet"]
    assert config.server.port == 4567
    assert "http://127.0.0.1:4567/v1" in proc.stdout
    owner_key_of(proc.stdout)


def test_interactive_rerun_asks_before_overwriting(machine: Machine_) -> None:
    assert machine.run("--yes").returncode == 0
    before = machine.config.read_bytes()
    proc = machine.run(stdin="n\n")
    assert proc.returncode == 0, proc.stderr
    assert "Overwrite it? (a backup is kept as config.json.bak-<timestamp>)" in proc.stdout
    assert "nothing changed" in proc.stdout
    assert machine.config.read_bytes() == before

    # Yes, then accept every default (Enter): replaced, with a backup.
    proc = machine.run(stdin="y\n" + "\n" * 10)
    assert proc.returncode == 0, proc.stderr
    assert len(list(machine.olp_home.glob("config.json.bak-*"))) == 1
    machine.load()


def test_unwritable_home_is_a_clear_error(tmp_path: Path) -> None:
    m = Machine_(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = m.run("--yes", "--home", str(blocker / "olp"))
    assert proc.returncode == 2
    assert "cannot write" in proc.stderr and "--home" in proc.stderr
    assert not os.path.exists(blocker / "olp")


def test_sdk_base_url_variables_are_followed(machine: Machine_) -> None:
    # Where the vendor's SDK would go (OPENAI_BASE_URL, ANTHROPIC_BASE_URL), OLP goes too.
    env = {
        "OPENAI_API_KEY": "sk-x",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1/",
        "ANTHROPIC_API_KEY": "sk-ant-x",
        "ANTHROPIC_BASE_URL": "not a url",
    }
    proc = machine.run("--yes", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "OPENAI_BASE_URL is set: openai goes to http://127.0.0.1:9/v1" in proc.stdout
    assert "ANTHROPIC_BASE_URL='not a url' is not an http(s) URL" in proc.stdout
    providers = machine.load(env).providers
    assert providers["openai"].base_url == "http://127.0.0.1:9/v1"
    assert providers["anthropic"].base_url == "https://api.anthropic.com"


def test_a_second_login_of_a_cli_becomes_a_pool_member(tmp_path: Path) -> None:
    from olp.cli.setup_detect import detect_machine

    bin_dir, home, accounts = tmp_path / "bin", tmp_path / "home", tmp_path / "accounts"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text("#!/bin/sh\necho '2.1.197 (Claude Code)'\n")
    claude.chmod(0o755)
    for login in (home, accounts / "partner", accounts / "my partner"):
        (login / ".claude").mkdir(parents=True)
        (login / ".claude" / ".credentials.json").write_text("{}")
    (accounts / "empty").mkdir()  # no login in it: not an account
    env = {"PATH": str(bin_dir), "HOME": str(home)}
    lines: list[str] = []
    machine = detect_machine(env, KNOWN, lines.append, probe_local=False, accounts_dir=accounts)
    # A folder whose name cannot be part of a provider name is said, and left out: the
    # config written must load.
    assert [(a.cli.type, a.name) for a in machine.accounts] == [("claude-cli", "partner")]
    assert any("a second claude login" in line for line in lines)
    assert any("'claude-my partner'" in line and "rename the folder" in line for line in lines)
    plan = default_plan(machine, KNOWN, REGISTRY)
    partner = plan.config["providers"]["claude-partner"]
    assert partner["credentials_home"] == str(accounts / "partner")
    assert partner["type"] == "claude-cli"
    pooled = [hop for hops in plan.chains.values() for hop in hops if "pool" in hop]
    assert pooled and all(hop["pool"] == ["claude", "claude-partner"] for hop in pooled)
    config = loads(plan.config, tmp_path)  # a valid config.json, as olp start loads it
    assert config.providers["claude-partner"].user_home == accounts / "partner"
