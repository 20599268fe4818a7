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
  auto-update off;
- or, with the request's client tools bridged (`bridges_tools`), OLP's MCP bridge as the
  only MCP server (`mcpServers.olp.httpUrl`), and its tools as the only ones: the CLI
  names them `mcp_olp_<name>` (`gemini_tool_name`), and `tools.core = ["mcp_olp_*"]` is
  the policy's allow-list (every other tool, built-in or not, is denied and not even
  declared to the model), which also lets a headless run call them without asking. Two
  turns (`model.maxSessionTurns = 2`): a call the bridge refuses for its arguments goes
  back to the model once.
The prompt goes on stdin (`-p ""`: stdin is appended to the empty `-p` text). The
request's system text replaces Gemini's own system prompt through `GEMINI_SYSTEM_MD`
(a file in the private home; `~/` is expanded by the CLI).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "ADDED_PARAMETERS",
    "CREDENTIAL_FILES",
    "DEFAULT_COMMAND",
    "INSTALL_HINT",
    "LOGIN_HINT",
    "SETTINGS_FILE",
    "SYSTEM_FILE",
    "argv",
    "auth_type",
    "child_env",
    "gemini_tool_name",
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
# The bridge's name in the CLI's settings; the CLI calls its tools mcp_<server>_<tool>.
MCP_SERVER = "olp"
TOOL_PREFIX = f"mcp_{MCP_SERVER}_"
# A parameter the CLI adds to every tool it declares (true: run after the turn's earlier
# calls); not the client's, so it is dropped from the calls (unless the tool has its own).
ADDED_PARAMETERS = ("wait_for_previous",)
# The CLI's limit on a function name (it shortens a longer one) and what it replaces.
_NAME_LIMIT = 63
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_\-.:]")
# A call refused for its arguments goes back to the model once: that try is the second turn.
_CHECKED_TURNS = 2
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


def gemini_tool_name(name: str) -> str:
    """What the CLI calls the bridge's tool `name` (its model sees and calls this name)."""
    valid = _NOT_IN_NAME.sub("_", TOOL_PREFIX + name)
    return valid if len(valid) <= _NAME_LIMIT else f"{valid[:30]}...{valid[-30:]}"


def settings(auth: str, mcp_url: str | None = None) -> dict[str, Any]:
    """`mcp_url`: the MCP bridge serving the request's tools, if they are bridged."""
    tools = {"core": [TOOL_PREFIX + "*"] if mcp_url else ["__none__"]}
    servers = {MCP_SERVER: {"httpUrl": mcp_url}} if mcp_url else {}
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
        "tools": tools,
        "mcpServers": servers,
        "mcp": {"allowed": list(servers)},
        "model": {"maxSessionTurns": _CHECKED_TURNS if mcp_url else 1},
    }


def home_files(auth: str, system: str) -> dict[str, bytes]:
    """The run's settings (no MCP server) and its system prompt."""
    files = settings_files(auth)
    if system:
        files[SYSTEM_FILE] = system.encode()
    return files


def settings_files(auth: str, mcp_url: str | None = None) -> dict[str, bytes]:
    """The run's settings file; `mcp_url`: the MCP bridge endpoint of a bridged run."""
    document = settings(auth, mcp_url)
    return {SETTINGS_FILE: orjson.dumps(document, option=orjson.OPT_INDENT_2)}


def child_env(system: str) -> dict[str, str]:
    """`system`: the request's system text (written to `SYSTEM_FILE`). The system-wide
    settings (which win over the run's) and system defaults (merged into them) are the
    run's own file too: the machine's cannot add tools or MCP servers to a run."""
    own = f"../home/{SETTINGS_FILE}"  # (relative to the working directory, HOME's sibling)
    env = {
        "NO_COLOR": "1",
        "TERM": "dumb",
        "GEMINI_CLI_SYSTEM_SETTINGS_PATH": own,
        "GEMINI_CLI_SYSTEM_DEFAULTS_PATH": own,
    }
    if system:
        env["GEMINI_SYSTEM_MD"] = f"~/{SYSTEM_FILE}"
    return env
