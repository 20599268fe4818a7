"""`olp --version`, `--help`, `olp config check` and `olp doctor`, run as the real executable.

Every run gets an environment built from scratch (PATH, HOME and OLP_HOME in a tmp dir), so
no real API key of the machine running the tests leaks in.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from olp import __version__

GOOD_KEY = "sk-test-good-key-0123456789"
KEY_VAR = "FAKE_OPENAI_KEY"


@dataclass
class Olp:
    home: Path

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, config: Any = None
    ) -> subprocess.CompletedProcess[str]:
        olp_home = self.home / ".olp"
        olp_home.mkdir(parents=True, exist_ok=True)
        if config is not None:
            data = config if isinstance(config, str) else orjson.dumps(config).decode()
            (olp_home / "config.json").write_text(data, encoding="utf-8")
        full_env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "OLP_HOME": str(olp_home)}
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "olp", *args],
            env=full_env,
            capture_output=True,
            encoding="utf-8",
            timeout=60,
            check=False,
        )


@pytest.fixture
def olp(tmp_path: Path) -> Olp:
    return Olp(tmp_path)


def assert_clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr
    assert "Traceback" not in proc.stdout


# ---------------------------------------------------------------- version and help


def test_version(olp: Olp) -> None:
    proc = olp.run("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"olp {__version__}"


@pytest.mark.parametrize(
    ("args", "must_say"),
    [
        ((), ["Quick start", "olp config check", "olp doctor"]),
        (("start",), ["Start the proxy"]),
        (("config",), ["Examples", "olp config check --json"]),
        (("config", "check"), ["Examples", "Exit status", "--json", "JSON path"]),
        (("doctor",), ["Examples", "Exit status", "--timeout", "risk tier"]),
    ],
)
def test_help_of_every_command(olp: Olp, args: tuple[str, ...], must_say: list[str]) -> None:
    for flag in ("--help", "-h"):
        proc = olp.run(*args, flag)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("Usage: olp")
        for text in must_say:
            assert text in proc.stdout, (args, text)


# ---------------------------------------------------------------- config check: valid

VALID = {
    "providers": {
        "alpha": {
            "type": "openai-http",
            "base_url": "https://api.openai.com/v1",
            "api_key_env": "OPENAI_API_KEY",
            "models": ["gpt-4o-mini"],
        },
        "claude": {
            "type": "anthropic-http",
            "api_key_env": "ANTHROPIC_API_KEY",
            "models": ["claude-sonnet-4-5", "claude-haiku-4-5"],
        },
        "spare": {"type": "openai-http", "base_url": "http://127.0.0.1:9/v1", "enabled": False},
    },
    "routing": {
        "chains": {
            "sonnet": [
                {"provider": "claude", "model": "claude-sonnet-4-5"},
                {"provider": "alpha", "model": "gpt-4o-mini"},
            ]
        }
    },
}
SECRET = "sk-super-secret-value-42"
BOTH_KEYS = {"OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET + "-a"}


def test_config_check_prints_source_providers_and_chains(olp: Olp) -> None:
    proc = olp.run("config", "check", config=VALID, env=BOTH_KEYS)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"config: {olp.home / '.olp' / 'config.json'}" in out
    assert re.search(r"\n  sonnet\s+→ claude/claude-sonnet-4-5 → alpha/gpt-4o-mini", out)
    # Declared models and registry aliases of declared models are listed too.
    assert re.search(r"\n  gpt-4o-mini\s+→ alpha/gpt-4o-mini\s+\(declared\)", out)
    assert re.search(r"\n  haiku\s+→ claude/claude-haiku-4-5\s+\(alias\)", out)
    assert "alpha  openai-http, enabled, tier D" in out
    assert "spare  openai-http, disabled" in out
    assert "OPENAI_API_KEY (set)" in out
    assert "e.g. alpha/gpt-4o-mini" in out
    assert "warnings" not in out
    assert "a running `olp start` applies this file within a second" in out
    # It names what a reload leaves for a restart, and only that (olp.server.reload).
    reload_note = " ".join(out[out.index("a running") :].split())
    assert (
        "except server.host, server.port, server.shutdown_grace_s, server.cors_origins, "
        "cache.enabled" in reload_note
    )
    assert "ttl_s" not in reload_note and "ledger" not in reload_note
    assert SECRET not in out + proc.stderr
    assert_clean(proc)


def test_config_written_with_a_byte_order_mark_is_read(olp: Olp) -> None:
    # Windows Notepad starts a UTF-8 file with a BOM; the JSON after it is what counts.
    proc = olp.run("config", "check", config="\ufeff" + orjson.dumps(VALID).decode(), env=BOTH_KEYS)
    assert proc.returncode == 0, proc.stderr
    assert "alpha  openai-http, enabled" in proc.stdout
    assert_clean(proc)


def test_config_check_marks_hops_a_usd_budget_cannot_use(olp: Olp) -> None:
    config = {
        "providers": {
            **VALID["providers"],
            "local": {
                "type": "openai-http",
                "base_url": "http://127.0.0.1:9/v1",
                "models": ["my-finetune", "free-model"],
            },
        },
        "pricing": {"free-model": {"input": 0, "output": 0}},
    }
    proc = olp.run("config", "check", config=config, env=BOTH_KEYS)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"\n  my-finetune\s+→ local/my-finetune\*\s+\(declared\)", proc.stdout)
    assert re.search(r"\n  free-model\s+→ local/free-model\s+\(declared\)", proc.stdout)
    assert "* no price: keys with a USD budget skip this hop" in proc.stdout
    report = orjson.loads(olp.run("config", "check", "--json", config=config, env=BOTH_KEYS).stdout)
    models = {m["model"]: m for m in report["models"]}
    assert models["my-finetune"]["chain"][0]["priced"] is False
    assert models["free-model"]["chain"][0]["priced"] is True


def test_config_check_json(olp: Olp) -> None:
    proc = olp.run("config", "check", "--json", config=VALID, env=BOTH_KEYS)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout
    report = orjson.loads(proc.stdout)
    assert report["ok"] is True
    assert report["config"]["source"] == "file"
    models = {m["model"]: m for m in report["models"]}
    assert models["sonnet"]["kind"] == "chain"
    assert models["sonnet"]["chain"] == [
        {"provider": "claude", "model": "claude-sonnet-4-5", "priced": True},
        {"provider": "alpha", "model": "gpt-4o-mini", "priced": True},
    ]
    assert models["haiku"]["kind"] == "alias"
    providers = {p["name"]: p for p in report["providers"]}
    assert providers["alpha"]["api_key_env"] == "OPENAI_API_KEY"
    assert providers["alpha"]["api_key_set"] is True
    assert providers["spare"]["enabled"] is False
    assert providers["claude"]["risk_tier"] == "D"
    assert report["direct"] == ["alpha", "claude"]
    assert report["warnings"] == []


def test_config_check_warns_but_exits_zero(olp: Olp) -> None:
    config = orjson.loads(orjson.dumps(VALID))
    config["routing"]["chains"]["sonnet"].insert(1, {"provider": "spare", "model": "x"})
    config["routing"]["soft_triggers"] = {"claude": {"credit_pool_percent_threshold": 90}}
    proc = olp.run("config", "check", config=config, env={"OPENAI_API_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "routing.chains.sonnet[1]: provider 'spare' is disabled" in out
    assert "set providers.spare.enabled to true" in out
    assert "providers.claude.api_key_env: ANTHROPIC_API_KEY is not set" in out
    assert "export ANTHROPIC_API_KEY=" in out
    assert "routing.soft_triggers.claude.credit_pool_percent_threshold: can never fire" in out
    # The disabled hop is skipped in the resolved chain.
    assert re.search(r"sonnet\s+→ claude/claude-sonnet-4-5 → alpha/gpt-4o-mini", out)
    assert "3 warning(s)" in out
    assert_clean(proc)


# ---------------------------------------------------------------- config check: invalid


def _provider(**extra: Any) -> dict[str, Any]:
    return {"providers": {"alpha": {"type": "openai-http", **extra}}}


INVALID: dict[str, tuple[Any, list[str]]] = {
    "bad_json": (
        '{"providers": {\n  "alpha": {"type": "openai-http",}\n}}',
        ["invalid JSON", "line 2 column"],
    ),
    "unknown_key": ({"servr": {"port": 1}}, ["servr: unknown key", "fix: remove it"]),
    "wrong_type": ({"server": {"port": "3456"}}, ["server.port: must be an integer"]),
    "bad_url": (_provider(base_url="not-a-url"), ["providers.alpha.base_url: not a URL"]),
    "chain_unknown_provider": (
        {**_provider(), "routing": {"chains": {"sonnet": [{"provider": "ghost", "model": "m"}]}}},
        ["routing.chains.sonnet[0].provider: unknown provider 'ghost'"],
    ),
    "secret_in_file": (
        _provider(api_key=SECRET),
        ["providers.alpha.api_key: unknown key", "set api_key_env"],
    ),
    "soft_trigger_unknown_provider": (
        {**_provider(), "routing": {"soft_triggers": {"ghost": {"five_hour_capacity": 5}}}},
        ["routing.soft_triggers.ghost: unknown provider 'ghost'"],
    ),
    "unknown_type": (
        {"providers": {"alpha": {"type": "warp-drive"}}},
        ["providers.alpha.type: unknown provider type 'warp-drive'", "types OLP knows"],
    ),
    "bad_env_port": ({}, ["OLP_PORT: must be a port number"]),
    "too_many_warm": (
        {"providers": {"c": {"type": "claude-cli", "warm": 500}}},
        ["providers.c.warm: must be"],
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_config_check_invalid(olp: Olp, case: str) -> None:
    config, must_say = INVALID[case]
    env = {"OLP_PORT": "99999"} if case == "bad_env_port" else {}
    proc = olp.run("config", "check", config=config, env=env)
    assert proc.returncode == 2, proc.stdout
    for text in must_say:
        assert text in proc.stderr, (case, text, proc.stderr)
    assert "run `olp config check` again" in proc.stderr
    assert SECRET not in proc.stderr + proc.stdout
    assert_clean(proc)


def test_config_check_invalid_json_output_lists_every_problem(olp: Olp) -> None:
    config = {"bogus": 1, **_provider(base_url="ftp://x")}
    proc = olp.run("config", "check", "--json", config=config)
    assert proc.returncode == 2
    report = orjson.loads(proc.stdout)
    assert report["ok"] is False
    paths = {p["path"] for p in report["problems"]}
    assert paths == {"bogus", "providers.alpha.base_url"}
    assert_clean(proc)


# ---------------------------------------------------------------- config check: detection


def test_config_check_without_file_lists_detected_providers(olp: Olp) -> None:
    proc = olp.run("config", "check", env={"OPENAI_API_KEY": "x"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "providers detected on this machine" in out
    assert "found OPENAI_API_KEY" in out
    assert "openai  openai-http, enabled" in out
    assert re.search(r"gpt-4o\s+→ openai/gpt-4o", out)
    assert "to add more" in out
    assert "docs/configuration.md" in out
    assert "applies this file" not in out  # there is no file yet
    assert_clean(proc)


# ---------------------------------------------------------------- doctor


@dataclass
class FakeOpenAI:
    """`GET /v1/models`: 200 for the right bearer key, 401 otherwise."""

    key: str
    delay_s: float = 0.0
    port: int = 0
    seen_auth: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def models(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        self.seen_auth.append(auth)
        await asyncio.sleep(self.delay_s)
        if auth != f"Bearer {self.key}":
            error = {"message": "Incorrect API key", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=401)
        return web.json_response({"object": "list", "data": [{"id": "gpt-4o-mini"}]})


@contextmanager
def fake_openai(key: str, delay_s: float = 0.0) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(key, delay_s)
    app = web.Application()
    app.router.add_get("/v1/models", fake.models)
    runner = web.AppRunner(app)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    fake.port = sock.getsockname()[1]
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.SockSite(runner, sock).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        sock.close()


def _doctor_config(base_url: str, **extra: Any) -> dict[str, Any]:
    alpha = {"type": "openai-http", "base_url": base_url, "api_key_env": KEY_VAR}
    return {"providers": {"alpha": alpha, **extra}}


def test_doctor_reachable_provider_is_ok(olp: Olp) -> None:
    with fake_openai(GOOD_KEY) as fake:
        spare = {"type": "openai-http", "enabled": False}
        config = _doctor_config(fake.base_url, spare=spare)
        proc = olp.run("doctor", config=config, env={KEY_VAR: GOOD_KEY})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert fake.seen_auth == [f"Bearer {GOOD_KEY}"]
    assert "checking alpha…" in proc.stderr
    assert "checking spare" not in proc.stderr
    assert "alpha: ok" in proc.stdout
    assert f"{KEY_VAR} is set" in proc.stdout
    assert "risk tier D" in proc.stdout
    assert "spare: off" in proc.stdout
    assert "all 1 provider(s) ok (1 disabled)" in proc.stdout
    assert GOOD_KEY not in proc.stdout + proc.stderr
    assert_clean(proc)


def test_doctor_json(olp: Olp) -> None:
    with fake_openai(GOOD_KEY) as fake:
        proc = olp.run(
            "doctor", "--json", config=_doctor_config(fake.base_url), env={KEY_VAR: GOOD_KEY}
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = orjson.loads(proc.stdout)
    assert report["ok"] is True
    (alpha,) = report["providers"]
    assert alpha["status"] == "ok"
    assert alpha["risk_tier"] == "D"
    assert [c["name"] for c in alpha["checks"]] == ["configured", "credentials", "reachable"]
    assert all(c["ok"] for c in alpha["checks"])
    assert proc.stderr == ""  # no progress lines in JSON mode


def test_doctor_wrong_key_is_a_problem_with_a_fix(olp: Olp) -> None:
    with fake_openai(GOOD_KEY) as fake:
        proc = olp.run("doctor", config=_doctor_config(fake.base_url), env={KEY_VAR: "sk-wrong"})
    assert proc.returncode == 1
    assert "alpha: problem" in proc.stdout
    assert "rejected" in proc.stdout
    assert f"fix: set {KEY_VAR} to a valid key" in proc.stdout
    assert "1 of 1 provider(s) have problems: alpha" in proc.stdout
    assert_clean(proc)


def test_doctor_unreachable_provider(olp: Olp) -> None:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    proc = olp.run(
        "doctor", "--timeout", "5", config=_doctor_config(base_url), env={KEY_VAR: GOOD_KEY}
    )
    assert proc.returncode == 1
    assert re.search(r"ERR reachable\s+no \(", proc.stdout)
    assert f"fix: check that {base_url} is reachable" in proc.stdout
    assert_clean(proc)


def test_doctor_gives_up_at_the_timeout(olp: Olp) -> None:
    with fake_openai(GOOD_KEY, delay_s=1.5) as fake:
        proc = olp.run(
            "doctor",
            "--timeout",
            "0.5",
            config=_doctor_config(fake.base_url),
            env={KEY_VAR: GOOD_KEY},
        )
    assert proc.returncode == 1
    assert fake.seen_auth == [f"Bearer {GOOD_KEY}"]
    assert "no answer before the --timeout ran out" in proc.stdout
    assert f"fix: check that {fake.base_url} answers from this machine" in proc.stdout
    assert_clean(proc)


def test_doctor_key_variable_unset(olp: Olp) -> None:
    with fake_openai(GOOD_KEY) as fake:
        proc = olp.run("doctor", config=_doctor_config(fake.base_url))
    assert proc.returncode == 1
    assert re.search(rf"ERR credentials\s+{KEY_VAR} is not set", proc.stdout)
    assert f"fix: export {KEY_VAR}=<your key>" in proc.stdout
    # The upstream answered the key-less probe (401, as a real one does): it is reachable,
    # and the key is the one problem (not "rejected": none was sent).
    assert re.search(r"ok  reachable\s+yes \(HTTP 401 without a key", proc.stdout)
    assert "rejected" not in proc.stdout
    # Without a key the server still answers; the key is never sent empty.
    assert fake.seen_auth == [""]
    assert_clean(proc)


def test_doctor_unknown_type_is_that_providers_problem(olp: Olp) -> None:
    config = {"providers": {"odd": {"type": "warp-drive"}}}
    proc = olp.run("doctor", config=config)
    assert proc.returncode == 1
    assert "odd: problem" in proc.stdout
    assert "unknown type 'warp-drive'" in proc.stdout
    assert "risk tier unknown" in proc.stdout
    assert_clean(proc)


def test_doctor_invalid_config_exits_2(olp: Olp) -> None:
    proc = olp.run("doctor", config=_provider(base_url="nope"))
    assert proc.returncode == 2
    assert "providers.alpha.base_url: not a URL" in proc.stderr
    assert_clean(proc)


def test_doctor_without_any_provider(olp: Olp) -> None:
    proc = olp.run("doctor")
    assert proc.returncode == 1
    assert "no enabled provider found on this machine" in proc.stdout
    assert "fix: set an API key variable such as OPENAI_API_KEY" in proc.stdout
    assert_clean(proc)
