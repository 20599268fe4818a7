"""With no config file, find what this machine already has: API keys and local servers."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from olp.config.model import ProviderConfig

__all__ = ["KNOWN_API_KEYS", "KNOWN_CLIS", "KnownApi", "KnownCli", "detect_providers"]


@dataclass(frozen=True, slots=True)
class KnownApi:
    env: str
    name: str
    type: str
    base_url: str
    # A few well-known models so plain model names resolve without a config file;
    # `name/<any-model>` always works too.
    models: tuple[str, ...]
    # The variable the vendor's own SDK reads its endpoint from (a gateway, a regional
    # endpoint, a corporate proxy): honoured here too, so OLP goes where the SDK would.
    base_url_env: str | None = None

    def endpoint(self, env: Mapping[str, str]) -> tuple[str, str | None]:
        """(the base URL to use, a note when `base_url_env` was set but not usable)."""
        if self.base_url_env is None or not env.get(self.base_url_env, "").strip():
            return self.base_url, None
        value = env[self.base_url_env].strip()
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            note = f"{self.base_url_env}={value!r} is not an http(s) URL: using {self.base_url}"
            return self.base_url, note
        return value.rstrip("/"), None


KNOWN_API_KEYS = (
    KnownApi(
        "OPENAI_API_KEY",
        "openai",
        "openai-http",
        "https://api.openai.com/v1",
        ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-5", "gpt-5-mini"),
        base_url_env="OPENAI_BASE_URL",
    ),
    KnownApi(
        "ANTHROPIC_API_KEY",
        "anthropic",
        "anthropic-http",
        "https://api.anthropic.com",
        ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"),
        base_url_env="ANTHROPIC_BASE_URL",
    ),
    KnownApi(
        "MISTRAL_API_KEY",
        "mistral",
        "openai-http",
        "https://api.mistral.ai/v1",
        (
            "mistral-large-latest",
            "mistral-small-latest",
            "codestral-latest",
            "devstral-medium-latest",
        ),
    ),
    KnownApi("OPENROUTER_API_KEY", "openrouter", "openai-http", "https://openrouter.ai/api/v1", ()),
    KnownApi(
        "GROQ_API_KEY",
        "groq",
        "openai-http",
        "https://api.groq.com/openai/v1",
        ("llama-3.3-70b-versatile", "llama-3.1-8b-instant"),
    ),
    KnownApi(
        "DEEPSEEK_API_KEY",
        "deepseek",
        "openai-http",
        "https://api.deepseek.com/v1",
        ("deepseek-chat", "deepseek-reasoner"),
    ),
)
OLLAMA_URL = "http://127.0.0.1:11434"


@dataclass(frozen=True, slots=True)
class KnownCli:
    """A subscription CLI: used without a config file when its binary is on PATH and
    its login file is in HOME."""

    type: str
    name: str
    command: str
    credentials: tuple[str, ...]  # relative to HOME; any one present means logged in
    login: str  # what to run when it is not
    models: tuple[str, ...]
    # Risk tiers C and B are opt-in (docs/providers.md): found, reported, never enabled
    # without the owner writing them into config.json (B with "consent": true).
    tier: str = "D"


KNOWN_CLIS = (
    KnownCli(
        "claude-cli",
        "claude",
        "claude",
        (".claude/.credentials.json",),
        "run `claude` and log in with /login",
        ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"),
    ),
    KnownCli(
        "codex-cli",
        "codex",
        "codex",
        (".codex/auth.json",),
        "run `codex login`",
        ("gpt-5", "gpt-5-codex"),
    ),
    KnownCli(
        "vibe-cli",
        "vibe",
        "vibe",
        (".vibe/.env",),
        "run `vibe` once and enter your Mistral API key",
        ("devstral-medium-latest", "mistral-large-latest"),
    ),
    KnownCli(
        "gemini-cli",
        "gemini",
        "gemini",
        (".gemini/oauth_creds.json",),
        "run `gemini` and sign in with Google",
        ("gemini-2.5-pro", "gemini-2.5-flash"),
        tier="C",
    ),
    KnownCli(
        "qwen-cli",
        "qwen",
        "qwen",
        (".qwen/oauth_creds.json",),
        "run `qwen` and log in with /auth",
        ("qwen3-coder-plus", "qwen3-coder-flash"),
        tier="B",
    ),
)


def detect_providers(
    env: Mapping[str, str], *, probe_local: bool = True
) -> tuple[dict[str, ProviderConfig], list[str]]:
    """Providers found on this machine, and notes saying what was found and what to do."""
    providers: dict[str, ProviderConfig] = {}
    notes: list[str] = []
    for api in KNOWN_API_KEYS:
        if env.get(api.env):
            base_url, problem = api.endpoint(env)
            providers[api.name] = ProviderConfig(
                name=api.name,
                type=api.type,
                base_url=base_url,
                api_key_env=api.env,
                api_key=env[api.env],
                models=api.models,
            )
            notes.append(f"found {api.env}: provider {api.name!r} ({base_url})")
            if problem:
                notes.append(problem)
    if probe_local:
        ollama = _ollama_models()
        if ollama is not None:
            providers["ollama"] = ProviderConfig(
                name="ollama", type="openai-http", base_url=f"{OLLAMA_URL}/v1", models=ollama
            )
            notes.append(f"found Ollama on {OLLAMA_URL} with {len(ollama)} model(s)")
    _detect_clis(env, providers, notes)
    if not providers:
        notes.append(
            "no providers found: set an API key variable ("
            + ", ".join(a.env for a in KNOWN_API_KEYS)
            + "), log in to a subscription CLI (claude, codex, vibe), start Ollama, "
            "or run `olp setup` to write a config file"
        )
    notes.append(
        "to add more or build fallback chains, write $OLP_HOME/config.json "
        "(see docs/configuration.md), then run `olp config check`"
    )
    return providers, notes


def _detect_clis(
    env: Mapping[str, str], providers: dict[str, ProviderConfig], notes: list[str]
) -> None:
    """Logged-in subscription CLIs on PATH (only the PATH and HOME given in `env`)."""
    # Imported here: load.py imports this module at its top.
    from olp.config.load import CHILD_ENV_ALLOWLIST

    path, home = env.get("PATH"), env.get("HOME")
    if not path or not home:
        return
    inherited = {k: env[k] for k in CHILD_ENV_ALLOWLIST if k in env}
    for cli in KNOWN_CLIS:
        binary = shutil.which(cli.command, path=path)
        if binary is None or cli.name in providers:
            continue
        if not any((Path(home) / rel).is_file() for rel in cli.credentials):
            login = " or ".join(f"~/{rel}" for rel in cli.credentials)
            notes.append(f"found {binary} but not its login ({login}): {cli.login}")
            continue
        if cli.tier != "D":
            how = ' with "consent": true' if cli.tier == "B" else ""
            notes.append(
                f"found {binary}, logged in, but not enabled: {cli.type} is risk tier "
                f"{cli.tier} (opt-in); add it to config.json{how} (see docs/providers.md)"
            )
            continue
        providers[cli.name] = ProviderConfig(
            name=cli.name,
            type=cli.type,
            command=binary,
            models=cli.models,
            user_home=Path(home),
            inherited_env=inherited,
        )
        notes.append(f"found {binary}, logged in: provider {cli.name!r} ({cli.type})")


def _ollama_models() -> tuple[str, ...] | None:
    try:
        with urllib.request.urlopen(f"{OLLAMA_URL}/api/tags", timeout=0.3) as resp:
            data = orjson.loads(resp.read(1_000_000))
    except (OSError, urllib.error.URLError, orjson.JSONDecodeError, ValueError):
        return None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list):
        return ()
    return tuple(
        m["name"] for m in models if isinstance(m, dict) and isinstance(m.get("name"), str)
    )
