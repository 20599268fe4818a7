"""With no config file, find what this machine already has: API keys and local servers."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from olp.config.model import ProviderConfig

__all__ = ["KNOWN_API_KEYS", "KnownApi", "detect_providers"]


@dataclass(frozen=True, slots=True)
class KnownApi:
    env: str
    name: str
    type: str
    base_url: str
    # A few well-known models so plain model names resolve without a config file;
    # `name/<any-model>` always works too.
    models: tuple[str, ...]


KNOWN_API_KEYS = (
    KnownApi(
        "OPENAI_API_KEY",
        "openai",
        "openai-http",
        "https://api.openai.com/v1",
        ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-5", "gpt-5-mini"),
    ),
    KnownApi(
        "ANTHROPIC_API_KEY",
        "anthropic",
        "anthropic-http",
        "https://api.anthropic.com",
        ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"),
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


def detect_providers(
    env: Mapping[str, str], *, probe_local: bool = True
) -> tuple[dict[str, ProviderConfig], list[str]]:
    """Providers found on this machine, and notes saying what was found and what to do."""
    providers: dict[str, ProviderConfig] = {}
    notes: list[str] = []
    for api in KNOWN_API_KEYS:
        if env.get(api.env):
            providers[api.name] = ProviderConfig(
                name=api.name,
                type=api.type,
                base_url=api.base_url,
                api_key_env=api.env,
                api_key=env[api.env],
                models=api.models,
            )
            notes.append(f"found {api.env}: provider {api.name!r} ({api.base_url})")
    if probe_local:
        ollama = _ollama_models()
        if ollama is not None:
            providers["ollama"] = ProviderConfig(
                name="ollama", type="openai-http", base_url=f"{OLLAMA_URL}/v1", models=ollama
            )
            notes.append(f"found Ollama on {OLLAMA_URL} with {len(ollama)} model(s)")
    if not providers:
        notes.append(
            "no providers found: set an API key variable ("
            + ", ".join(a.env for a in KNOWN_API_KEYS)
            + "), start Ollama, or write a config file"
        )
    notes.append(
        "to add more or build fallback chains, write $OLP_HOME/config.json "
        "(see docs/configuration.md), then run `olp config check`"
    )
    return providers, notes


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
