"""IR → what Google's `gemini -p` is given: argv, a private `settings.json`, env, prompt.

Pure: no I/O. Gemini CLI (0.61) reads `~/.gemini/settings.json`; the private HOME's is
its whole configuration:
- the auth type: `gemini-api-key` when the provider's env has `GEMINI_API_KEY`,
  `vertex-ai` with `GOOGLE_GENAI_USE_VERTEXAI`, else `oauth-personal` (the owner's Google
  login, `~/.gemini/oauth_creds.json` linked in). Without a selected type it exits 41;
- `general.maxAttempts = 1` and `general.retryFetchErrors = false`: no retries of its own
  (default: 10 attempts, ~220 s of backoff on a 429/5xx) — verified against the real
  CLI: one upstream request, and the error at once;
- no tools (`tools.core = ["__none__"]`), no MCP servers, one turn
  (`model.maxSessionTurns = 1`), no folder-trust prompt, telemetry, usage statistics and
  auto-update off.
The prompt goes on stdin (`-p ""`: stdin is appended to the empty `-p` text). The
request's system text replaces Gemini's own system prompt through `GEMINI_SYSTEM_MD`
(a file in the private home; `~/` is expanded by the CLI).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "CREDENTIAL_FILES",
    "DEFAULT_COMMAND",
    "INSTALL_HINT",
    "LOGIN_HINT",
    "SETTINGS_FILE",
    "SYSTEM_FILE",
    "argv",
    "auth_type",
    "child_env",
    "home_files",
    "settings",
]

DEFAULT_COMMAND = "gemini"
INSTALL_HINT = "npm install -g @google/gemini-cli"
# What to run when the CLI is not logged in (`olp doctor`, detection, setup).
LOGIN_HINT = "run `gemini` once and choose Login with Google"
SETTINGS_FILE = ".gemini/settings.json"
SYSTEM_FILE = ".gemini/system.md"
# The Google login (`gemini` → "Login with Google"), linked read-only.
CREDENTIAL_FILES = (".gemini/oauth_creds.json", ".gemini/google_accounts.json")
_API_KEY_VARS = ("GEMINI_API_KEY",)
_VERTEX_VARS = ("GOOGLE_GENAI_USE_VERTEXAI",)


def auth_type(env: Mapping[str, str]) -> str:
    if any(env.get(v) for v in _API_KEY_VARS):
        return "gemini-api-key"
    if any(env.get(v, "").lower() in ("1", "true") for v in _VERTEX_VARS):
        return "vertex-ai"
    return "oauth-personal"


def argv(model: str) -> tuple[str, ...]:
    # `--model=` form: a model name starting with "-" cannot become a flag.
    return ("-p", "", "--output-format", "stream-json", f"--model={model}")


def settings(auth: str) -> dict[str, Any]:
    return {
        "security": {"auth": {"selectedType": auth}, "folderTrust": {"enabled": False}},
        "general": {
            "maxAttempts": 1,
            "retryFetchErrors": False,
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "tools": {"core": ["__none__"]},
        "mcpServers": {},
        "model": {"maxSessionTurns": 1},
    }


def home_files(auth: str, system: str) -> dict[str, bytes]:
    files = {SETTINGS_FILE: orjson.dumps(settings(auth), option=orjson.OPT_INDENT_2)}
    if system:
        files[SYSTEM_FILE] = system.encode()
    return files


def child_env(system: str) -> dict[str, str]:
    env = {"NO_COLOR": "1", "TERM": "dumb"}
    if system:
        env["GEMINI_SYSTEM_MD"] = f"~/{SYSTEM_FILE}"
    return env
