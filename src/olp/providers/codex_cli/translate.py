"""IR → what `codex app-server` is given: argv, a private `config.toml`, JSON-RPC requests.

Pure: no I/O. Why app-server rather than `codex exec --json` is in docs/providers.md (in
short: exec prints the answer only once it is complete; app-server streams tokens and
reports structured errors and rate limits).

The private `$CODEX_HOME` (the child's `~/.codex`) gets a fresh `config.toml` per spawn:
- approval `never`, read-only sandbox, every optional feature that could reach the
  network or the owner's files off (`FEATURES_OFF`), web search, `request_user_input`
  and the bundled skills off, analytics and OpenTelemetry off (otherwise a 5 s stall
  exporting at exit), no update check, no project docs;
- when the owner points the provider at an OpenAI-compatible Responses upstream through
  its `env` (`OPENAI_BASE_URL`, or just an `OPENAI_API_KEY`), a custom model provider
  `olp` with Codex's own retries off (`request_max_retries = 0`, `stream_max_retries = 0`)
  so OLP's fallback reacts at once; Codex ignores overrides of its built-in `openai`
  provider, so the ChatGPT login (linked `~/.codex/auth.json`) keeps Codex's defaults;
- the request's system messages (and JSON-mode instructions) in `system.md`, named by
  `model_instructions_file` (relative paths are resolved against `$CODEX_HOME`), which
  replaces Codex's own base instructions;
- with client tools (`mcp_url`), OLP's MCP bridge as the only MCP server `olp`, its tools
  approved (a call reaches the bridge, which holds it, instead of failing at once under
  approval `never` and sending the model on), and required (a bridge Codex cannot reach
  fails the run rather than leaving the model without the tools). Codex defers MCP tools
  behind its own `tool_search` tool and adds `apply_patch` for the models of its built-in
  catalogue; a one-entry catalogue (`CATALOG_FILE`) that does not list the requested model
  makes Codex use its generic model metadata instead, which has neither, so the client's
  tools are offered directly, as the `mcp__olp` namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from olp.ir import ChatRequest

__all__ = [
    "AUTH_FILE",
    "CATALOG_FILE",
    "CONFIG_FILE",
    "DEFAULT_COMMAND",
    "DEFAULT_OPENAI_BASE_URL",
    "FEATURES_OFF",
    "INSTALL_HINT",
    "LOGIN_HINT",
    "MCP_SERVER",
    "PROVIDER_ID",
    "SYSTEM_FILE",
    "TOOL_NAMESPACE",
    "RpcId",
    "Upstream",
    "argv",
    "config_toml",
    "decline",
    "home_files",
    "initialize",
    "initialized",
    "output_schema",
    "reasoning_effort",
    "thread_start",
    "turn_start",
    "upstream_from_env",
]

DEFAULT_COMMAND = "codex"
INSTALL_HINT = "npm install -g @openai/codex"
# What to run when the CLI is not logged in (`olp doctor`, detection, setup).
LOGIN_HINT = "run `codex login`"
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
# Custom model provider id in the private config.toml.
PROVIDER_ID = "olp"
CONFIG_FILE = ".codex/config.toml"
SYSTEM_FILE = ".codex/system.md"
# The ChatGPT login, linked read-only from the owner's home.
AUTH_FILE = ".codex/auth.json"
# The bridge's name in the MCP config; Codex offers its tools to the model as functions
# of the namespace `mcp__<name>`, and the model's calls name that namespace.
MCP_SERVER = "olp"
TOOL_NAMESPACE = f"mcp__{MCP_SERVER}"
# A model catalogue with one placeholder model, for bridged runs (module docstring).
CATALOG_FILE = ".codex/olp-models.json"
_PLACEHOLDER_MODEL = {
    "slug": "olp-placeholder",
    "display_name": "olp-placeholder",
    "supported_reasoning_levels": [],
    "shell_type": "default",
    "visibility": "hide",
    "supported_in_api": True,
    "priority": 0,
    "support_verbosity": False,
    "truncation_policy": {"mode": "tokens", "limit": 10000},
    "experimental_supported_tools": [],
    "base_instructions": "You are a helpful assistant.",
}

# `--disable` features of codex 0.171: plugins/apps reach GitHub and chatgpt.com at
# start; the rest are tools or agents a proxied chat turn must not use.
FEATURES_OFF = (
    "plugins",
    "apps",
    "shell_tool",
    "goals",
    "multi_agent",
    "image_generation",
    "browser_use",
    "computer_use",
    "tool_suggest",
    "skill_search",
    "hooks",
    "remote_plugin",
    "in_app_browser",
    "sleep_tool",
    "view_image",
)
_REASONING_EFFORTS = ("minimal", "low", "medium", "high", "xhigh")


class RpcId:
    """Ids of the three requests of one turn (responses are matched on them)."""

    INITIALIZE = 1
    THREAD_START = 2
    TURN_START = 3


@dataclass(frozen=True, slots=True)
class Upstream:
    """An OpenAI-compatible Responses endpoint the owner configured, or None (login)."""

    base_url: str
    env_key: str


def upstream_from_env(env: Mapping[str, str]) -> Upstream | None:
    """`OPENAI_BASE_URL`/`OPENAI_API_KEY` in the provider's `env` → a custom provider."""
    base_url = env.get("OPENAI_BASE_URL", "").strip()
    if not base_url and not env.get("OPENAI_API_KEY"):
        return None
    return Upstream(
        base_url=(base_url or DEFAULT_OPENAI_BASE_URL).rstrip("/"), env_key="OPENAI_API_KEY"
    )


def output_schema(request: ChatRequest) -> Mapping[str, Any] | None:
    """The JSON Schema of a `response_format` `json_schema` with `strict: true`, for the
    turn's `outputSchema` (Codex sends it to the model as a strict Responses `text.format`,
    which the OpenAI API refuses for a schema strict mode does not take: so only a client
    that asked for strict gets it), or None: the format stays an instruction."""
    format_ = request.response_format
    spec = format_.json_schema if format_ is not None and format_.type == "json_schema" else None
    schema = spec.get("schema") if spec is not None and spec.get("strict") is True else None
    return schema if isinstance(schema, Mapping) else None


def argv() -> tuple[str, ...]:
    args: list[str] = ["app-server"]
    for feature in FEATURES_OFF:
        args += ["--disable", feature]
    return tuple(args)


def config_toml(
    model: str,
    *,
    upstream: Upstream | None,
    has_system: bool,
    idle_timeout_ms: int,
    reasoning_effort: str | None = None,
    mcp_url: str | None = None,
) -> str:
    """`mcp_url`: the bridge serving the request's tools (module docstring), or None."""
    lines = [
        f"model = {_toml_str(model)}",
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        "check_for_update_on_startup = false",
        'web_search = "disabled"',
        "project_doc_max_bytes = 0",
    ]
    if has_system:
        lines.append(f"model_instructions_file = {_toml_str(SYSTEM_FILE.split('/')[-1])}")
    if reasoning_effort in _REASONING_EFFORTS:
        lines.append(f"model_reasoning_effort = {_toml_str(reasoning_effort or '')}")
    if upstream is not None:
        lines.append(f"model_provider = {_toml_str(PROVIDER_ID)}")
    if mcp_url is not None:
        lines.append(f"model_catalog_json = {_toml_str(CATALOG_FILE.split('/')[-1])}")
    lines += [
        "",
        # A question for a user nobody is there to answer (it would be declined).
        "[tools.experimental_request_user_input]",
        "enabled = false",
        "",
        # Codex's bundled skills (image generation, its own docs, a skill installer) are
        # otherwise described to the model in every request, files to read included.
        "[skills.bundled]",
        "enabled = false",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[otel]",
        'exporter = "none"',
        'trace_exporter = "none"',
        'metrics_exporter = "none"',
    ]
    if upstream is not None:
        lines += [
            "",
            f"[model_providers.{PROVIDER_ID}]",
            'name = "OLP upstream"',
            f"base_url = {_toml_str(upstream.base_url)}",
            f"env_key = {_toml_str(upstream.env_key)}",
            'wire_api = "responses"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            # Only applies once the stream started; OLP's idle timeout covers the rest.
            f"stream_idle_timeout_ms = {max(1000, idle_timeout_ms)}",
        ]
    if mcp_url is not None:
        lines += [
            "",
            f"[mcp_servers.{MCP_SERVER}]",
            f"url = {_toml_str(mcp_url)}",
            "required = true",
            'default_tools_approval_mode = "approve"',
        ]
    return "\n".join(lines) + "\n"


def home_files(config: str, system: str | None, *, tools: bool = False) -> dict[str, bytes]:
    """`tools`: the run bridges client tools (it gets the placeholder model catalogue)."""
    files = {CONFIG_FILE: config.encode()}
    if system:
        files[SYSTEM_FILE] = system.encode()
    if tools:
        files[CATALOG_FILE] = orjson.dumps({"models": [_PLACEHOLDER_MODEL]})
    return files


def reasoning_effort(extra: Mapping[str, Any]) -> str | None:
    value = extra.get("reasoning_effort")
    return value if isinstance(value, str) and value in _REASONING_EFFORTS else None


# -- JSON-RPC (JSONL on stdio, no "jsonrpc" member) -------------------------------------


def initialize(*, raw_events: bool = False) -> bytes:
    """`raw_events`: ask for the experimental API, which `thread_start(raw_events=True)`
    needs."""
    params: dict[str, Any] = {"clientInfo": {"name": "olp", "title": "OLP", "version": "0.1.0"}}
    if raw_events:
        params["capabilities"] = {"experimentalApi": True}
    return _rpc("initialize", RpcId.INITIALIZE, params)


def initialized() -> bytes:
    return orjson.dumps({"method": "initialized"}) + b"\n"


def thread_start(model: str, *, raw_events: bool = False) -> bytes:
    """`raw_events`: Codex also reports every Responses item as the model sent it
    (`rawResponseItem/completed`) and the end of each model response
    (`rawResponse/completed`): the only report of all of a turn's function calls, since
    Codex starts the MCP calls one at a time and the first one is held by the bridge."""
    params: dict[str, Any] = {
        "model": model,
        "approvalPolicy": "never",
        "sandbox": "read-only",
        # No session files: nothing of the conversation stays on disk.
        "ephemeral": True,
    }
    if raw_events:
        params["experimentalRawEvents"] = True
    return _rpc("thread/start", RpcId.THREAD_START, params)


def turn_start(
    thread_id: str,
    prompt: str,
    images: tuple[str, ...] = (),
    schema: Mapping[str, Any] | None = None,
) -> bytes:
    """The turn: the prompt text, then its images (URLs or `data:` URLs), which the
    prompt names `[image 1]`, `[image 2]`, … in place; `schema`: its `outputSchema`."""
    parts: list[dict[str, str]] = [{"type": "text", "text": prompt}]
    parts += [{"type": "image", "url": url} for url in images]
    params: dict[str, Any] = {"threadId": thread_id, "input": parts}
    if schema is not None:
        params["outputSchema"] = schema
    return _rpc("turn/start", RpcId.TURN_START, params)


def decline(request_id: Any) -> bytes:
    """The error answer to a request the server sent us (OLP approves nothing)."""
    error = {"code": -32601, "message": "not available through OLP (no interactive user)"}
    return orjson.dumps({"id": request_id, "error": error}) + b"\n"


def _rpc(method: str, rpc_id: int, params: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"method": method, "id": rpc_id, "params": params}) + b"\n"


def _toml_str(value: str) -> str:
    """A TOML basic string. JSON escapes are valid TOML escapes, except that TOML also
    forbids a raw DEL; non-ASCII stays raw (TOML has no surrogate-pair escapes)."""
    return orjson.dumps(value).decode().replace("\x7f", "\\u007f")
