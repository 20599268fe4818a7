"""With no config file, find what this machine already has: API keys, local servers and
logged-in subscription CLIs — whatever the installed provider plugins say to look for."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import orjson

from olp.config.model import CHILD_ENV_ALLOWLIST, ProviderConfig
from olp.registry.known import Known

__all__ = ["OLLAMA_URL", "detect_providers"]

OLLAMA_URL = "http://127.0.0.1:11434"


def detect_providers(
    env: Mapping[str, str], known: Known, *, probe_local: bool = True
) -> tuple[dict[str, ProviderConfig], list[str]]:
    """Providers found on this machine, and notes saying what was found and what to do."""
    providers: dict[str, ProviderConfig] = {}
    notes: list[str] = []
    for ptype, api in known.apis:
        if env.get(api.key_env):
            base_url, problem = api.endpoint(env)
            providers[api.name] = ProviderConfig(
                name=api.name,
                type=ptype,
                base_url=base_url,
                api_key_env=api.key_env,
                api_key=env[api.key_env],
                models=api.models,
            )
            notes.append(f"found {api.key_env}: provider {api.name!r} ({base_url})")
            if problem:
                notes.append(problem)
    if probe_local:
        ollama = _ollama_models()
        if ollama is not None:
            providers["ollama"] = ProviderConfig(
                name="ollama", type="openai-http", base_url=f"{OLLAMA_URL}/v1", models=ollama
            )
            notes.append(f"found Ollama on {OLLAMA_URL} with {len(ollama)} model(s)")
    _detect_clis(env, known, providers, notes)
    if not providers:
        keys = ", ".join(api.key_env for _, api in known.apis)
        clis = ", ".join(cli.name for ptype, cli in known.clis if known.tier(ptype) == "D")
        notes.append(
            f"no providers found: set an API key variable ({keys}), log in to a "
            f"subscription CLI ({clis}), start Ollama, or run `olp setup` to write a config file"
        )
    notes.append(
        "to add more or build fallback chains, write $OLP_HOME/config.json "
        "(see docs/configuration.md), then run `olp config check`"
    )
    return providers, notes


def _detect_clis(
    env: Mapping[str, str], known: Known, providers: dict[str, ProviderConfig], notes: list[str]
) -> None:
    """Logged-in subscription CLIs on PATH (only the PATH and HOME given in `env`).

    Risk tiers C and B are opt-in (docs/providers.md): found, reported, never enabled
    without the owner writing them into config.json (B with "consent": true).
    """
    path, home = env.get("PATH"), env.get("HOME")
    if not path or not home:
        return
    inherited = {k: env[k] for k in CHILD_ENV_ALLOWLIST if k in env}
    for ptype, cli in known.clis:
        binary = shutil.which(cli.command, path=path)
        if binary is None or cli.name in providers:
            continue
        if not any((Path(home) / rel).is_file() for rel in cli.credential_files):
            login = " or ".join(f"~/{rel}" for rel in cli.credential_files)
            notes.append(f"found {binary} but not its login ({login}): {cli.login_hint}")
            continue
        tier = known.tier(ptype)
        if tier != "D":
            how = ' with "consent": true' if tier == "B" else ""
            notes.append(
                f"found {binary}, logged in, but not enabled: {ptype} is risk tier "
                f"{tier} (opt-in); add it to config.json{how} (see docs/providers.md)"
            )
            continue
        providers[cli.name] = ProviderConfig(
            name=cli.name,
            type=ptype,
            command=binary,
            models=cli.models,
            user_home=Path(home),
            inherited_env=inherited,
        )
        notes.append(f"found {binary}, logged in: provider {cli.name!r} ({ptype})")


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
