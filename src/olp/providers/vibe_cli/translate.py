"""IR → what Mistral's `vibe -p` is given: argv, a private `config.toml`, the prompt.

Pure: no I/O. Vibe (mistral-vibe 3.0.2) reads `$VIBE_HOME/config.toml`, `~/.vibe` by
default, so the private HOME's `.vibe/config.toml` is its whole configuration:
- one provider `olp` and one model entry for the requested model: Mistral's API (backend
  `mistral`) unless the owner points the provider's `env.MISTRAL_BASE_URL` at another
  OpenAI-compatible server (backend `generic`); the key is `MISTRAL_API_KEY` (from the
  provider's env, or the owner's `~/.vibe/.env` written by `vibe --setup`, linked in);
- `api_retry_max_elapsed_time = 0`: no retries of its own (default: 300 s of them);
- `api_timeout` / `api_stream_idle_timeout` from OLP's timeouts: Vibe prints whole
  messages only, so OLP cannot see the upstream stall from stdout; Vibe can, and then
  exits 2 with "Timed out waiting for the model …";
- telemetry, update checks, notifications, the model catalog and the project-context
  and commit-signature sections of its system prompt off.
Vibe keeps its own agent system prompt and harness tools (they cannot be removed from
the request: docs/providers.md), so the request's system text goes first in the prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

__all__ = [
    "CONFIG_FILE",
    "CREDENTIALS_FILE",
    "DEFAULT_API_BASE",
    "DEFAULT_COMMAND",
    "EXPORT_FILE",
    "INSTALL_HINT",
    "LOGIN_HINT",
    "Upstream",
    "argv",
    "config_toml",
    "prompt_text",
    "upstream_from_env",
]

DEFAULT_COMMAND = "vibe"
INSTALL_HINT = "uv tool install mistral-vibe (needs Python >= 3.12)"
# What to run when the CLI is not logged in (`olp doctor`, detection, setup).
LOGIN_HINT = "run `vibe --setup` and enter your Mistral API key"
DEFAULT_API_BASE = "https://api.mistral.ai/v1"
CONFIG_FILE = ".vibe/config.toml"
# `vibe --setup` stores the key here; linked read-only from the owner's home.
CREDENTIALS_FILE = ".vibe/.env"
# Relative to the child's private working directory.
_OUTPUT_DIR = "olp-vibe-out"
EXPORT_FILE = f"{_OUTPUT_DIR}/export.json"
_ALIAS = "olp"


@dataclass(frozen=True, slots=True)
class Upstream:
    api_base: str
    backend: str  # "mistral" (Mistral's SDK) or "generic" (any OpenAI-compatible server)


def upstream_from_env(env: Mapping[str, str]) -> Upstream:
    base = env.get("MISTRAL_BASE_URL", "").strip().rstrip("/")
    if base:
        return Upstream(api_base=base, backend="generic")
    return Upstream(api_base=DEFAULT_API_BASE, backend="mistral")


def argv() -> tuple[str, ...]:
    # `-p` without a value: the prompt is read from stdin. One assistant turn.
    return ("-p", "--output", "streaming", "--max-turns", "1", "--output-dir", _OUTPUT_DIR)


def config_toml(model: str, upstream: Upstream, *, request_timeout_s: float, idle_s: float) -> str:
    return "\n".join(
        [
            f"active_model = {_toml_str(_ALIAS)}",
            "enable_telemetry = false",
            "enable_update_checks = false",
            "enable_notifications = false",
            "show_greeting = false",
            "experimental_enable_model_catalog = false",
            "include_project_context = false",
            "include_commit_signature = false",
            "api_retry_max_elapsed_time = 0.0",
            f"api_timeout = {max(1.0, request_timeout_s):.1f}",
            f"api_stream_idle_timeout = {max(1.0, idle_s):.1f}",
            "",
            "[[providers]]",
            f"name = {_toml_str(_ALIAS)}",
            f"api_base = {_toml_str(upstream.api_base)}",
            'api_key_env_var = "MISTRAL_API_KEY"',
            f"backend = {_toml_str(upstream.backend)}",
            "",
            "[[models]]",
            f"name = {_toml_str(model)}",
            f"provider = {_toml_str(_ALIAS)}",
            f"alias = {_toml_str(_ALIAS)}",
            "",
        ]
    )


def prompt_text(system: str, prompt: str) -> str:
    """Vibe has no system-prompt flag that replaces its own: the request's goes first."""
    if not system:
        return prompt
    return f"Follow these instructions:\n<instructions>\n{system}\n</instructions>\n\n{prompt}"


def _toml_str(value: str) -> str:
    """A TOML basic string (JSON escapes are TOML escapes; TOML also forbids raw DEL)."""
    return orjson.dumps(value).decode().replace("\x7f", "\\u007f")
