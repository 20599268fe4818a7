"""`claude-cli` translation (pure): request → invocation, stdout lines → IR events,
failures → the taxonomy. The formats are in tests/fixtures/cli/README.md §1."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from olp.config.model import Timeouts
from olp.errors import Failure, ProviderError
from olp.ir import ChatRequest, Event, Finish, TextDelta, json_default
from olp.observability import event_logger
from olp.providers._claude_stream import (
    ClaudeStreamParser,
    RateLimitInfo,
    ToolTurns,
    finish_reason,
    usage_from,
)
from olp.providers._cli_stream import exit_failure, salvage
from olp.providers._json_schema import invalid_tool_call, schema_error
from olp.providers._prompt import COMMON_CLI_DROPS, DEFAULT_SYSTEM_PROMPT, serialise
from olp.providers._reset_time import parse_reset
from olp.providers._subprocess import CliInvocation
from olp.providers.claude_cli.tools_gate import STATUS_REQUEST, ToolsGate

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import BridgedRun

__all__ = [
    "CREDENTIALS",
    "CREDENTIAL_ENV",
    "DEFAULT_COMMAND",
    "DEFAULT_SYSTEM_PROMPT",
    "DROPS",
    "INSTALL_HINT",
    "LOGIN_HINT",
    "WARM_DEFAULT",
    "ClaudeTranslator",
    "build_invocation",
    "classify",
    "held_prompt",
    "mcp_files",
    "output_schema",
]

log = event_logger("olp.providers.claude_cli")

DEFAULT_COMMAND = "claude"
INSTALL_HINT = "npm i -g @anthropic-ai/claude-code"
# What to run when the CLI is not logged in (`olp doctor`, detection, setup).
LOGIN_HINT = "run `claude` once and log in with /login (or `claude setup-token`)"
# `claude` stores its login here (Linux; on macOS it is in the Keychain, see the docs).
# Only this file is linked in: ~/.claude.json is rewritten on every start and concurrent
# CLIs sharing it corrupt it.
CREDENTIALS = ((".claude/.credentials.json", ".claude/.credentials.json"),)
CREDENTIAL_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
# Client tools go through the MCP bridge; a `tool_choice` it cannot honour is refused.
DROPS = (*(d for d in COMMON_CLI_DROPS if not d.startswith("tool")), "images", "n > 1")
# One process waiting for its prompt (~150-280 MB) saves 2-4 s of start-up per request.
WARM_DEFAULT = 1
# Passed on through the CLI's environment rather than dropped.
HONOURED = frozenset({"max_tokens", "reasoning_effort"})
# With client tools bridged: `tool_choice` auto/none and `parallel_tool_calls` are
# honoured too (none: the tools are not offered; false: only the first call is answered).
HONOURED_WITH_TOOLS = HONOURED | {"tools", "tool_choice", "parallel_tool_calls"}
# The bridge's name in the CLI's MCP config; Claude Code calls its tools mcp__<name>__<tool>.
MCP_SERVER = "olp"
TOOL_PREFIX = f"mcp__{MCP_SERVER}__"
# The bridge's MCP config, written into the private HOME; the CLI runs in a sibling
# directory (`_sandbox`), and reads it through this path relative to its cwd.
MCP_CONFIG_FILE = ".olp-mcp.json"
_MCP_CONFIG_ARG = f"../home/{MCP_CONFIG_FILE}"
# A permission rule naming a server allows each of its tools.
_ALLOW_BRIDGE = f"mcp__{MCP_SERVER}"
# With a schema to meet — `response_format` through the CLI's own `--json-schema` (its
# StructuredOutput tool checks it), or bridged tools' parameters (the bridge checks
# them) — a mismatch goes back to the model as a tool error for one more try: that try
# is the second turn.
_CHECKED_TURNS = "2"
_ANY_OBJECT: Mapping[str, Any] = {"type": "object"}
_THINKING_BUDGET = {"none": 0, "minimal": 0, "low": 4_000, "medium": 10_000, "high": 31_999}

_FLAGS = (
    "-p",
    "--output-format", "stream-json",
    "--verbose",
    "--include-partial-messages",
    "--tools", "",
    "--strict-mcp-config",
    "--setting-sources", "",
    "--no-session-persistence",
    "--disable-slash-commands",
    "--max-turns", "1",
    "--input-format", "stream-json",
)  # fmt: skip
# The id of the `initialize` control request; its answer on stdout is not content.
_INIT_ID = "olp-init"


def mcp_files(url: str) -> dict[str, bytes]:
    """The `--mcp-config` file naming the bridge endpoint at `url` as the only MCP server."""
    config = {"mcpServers": {MCP_SERVER: {"type": "http", "url": url}}}
    return {MCP_CONFIG_FILE: orjson.dumps(config)}


def output_schema(request: ChatRequest) -> Mapping[str, Any] | None:
    """The JSON Schema the answer must match (`response_format`), or None for free text."""
    format_ = request.response_format
    if format_ is None or format_.type == "text":
        return None
    spec = format_.json_schema
    schema = spec.get("schema") if format_.type == "json_schema" and spec else None
    return schema if isinstance(schema, Mapping) else _ANY_OBJECT


def build_invocation(
    request: ChatRequest, timeouts: Timeouts, tools_run: BridgedRun | None = None
) -> CliInvocation:
    """`tools_run`: the request's client tools when `bridges_tools(request)`, else None.

    The CLI reads its stdin lines, and answers the one request they make: an `initialize`
    control request that sets the system prompt (so it is neither in the process list nor
    capped by argv's size, and the command line is the same for every system prompt),
    and the conversation as one user message. It reads them before it does anything for
    the request, so the same invocation can be started ahead — with client tools too:
    their MCP server (OLP's bridge) is one of the child's own, which lists no tools until
    the request's are bound to it, and every tool of that server is allowed, whatever it
    is called. A bridged run's user message waits for the CLI to have the tools
    (`tools_gate`; `held_prompt()` gives it): its stdin stays open."""
    schema = output_schema(request)
    system, conversation = _prompt(request)
    args: tuple[str, ...] = (*_FLAGS, "--model", request.model)
    if schema is not None or tools_run is not None:
        turns = args.index("--max-turns") + 1
        args = (*args[:turns], _CHECKED_TURNS, *args[turns + 1 :])
    if schema is not None:
        args = (*args, "--json-schema", orjson.dumps(schema, default=json_default).decode())
    initialize = _initialize(system)
    if tools_run is not None:
        args = (*args, "--mcp-config", _MCP_CONFIG_ARG, "--allowedTools", _ALLOW_BRIDGE)
    return CliInvocation(
        args=args,
        stdin=initialize + (STATUS_REQUEST if tools_run else _user(conversation)),
        env=_env(request, timeouts),
        credentials=CREDENTIALS,
        keep_stdin_open=tools_run is not None,
        waits_for_prompt=True,
        mcp_files=None if tools_run is None else mcp_files,
        tools_run=tools_run,
    )


def held_prompt(request: ChatRequest) -> bytes:
    """A bridged run's user message, written once the CLI has the tools (`tools_gate`)."""
    return _user(_prompt(request)[1])


def _prompt(request: ChatRequest) -> tuple[str, str]:
    """The system prompt and the conversation as the CLI is given them."""
    honoured = HONOURED_WITH_TOOLS if request.tools else HONOURED
    # With a schema, `--json-schema` says it: no instruction in the system prompt.
    flat = request if output_schema(request) is None else replace(request, response_format=None)
    prompt = serialise(flat, honoured=honoured)
    return prompt.system or DEFAULT_SYSTEM_PROMPT, prompt.prompt


def _initialize(system: str) -> bytes:
    initialize = {
        "type": "control_request",
        "request_id": _INIT_ID,
        "request": {"subtype": "initialize", "systemPrompt": system},
    }
    return orjson.dumps(initialize) + b"\n"


def _user(conversation: str) -> bytes:
    user = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": conversation}]},
    }
    return orjson.dumps(user) + b"\n"


def _env(request: ChatRequest, timeouts: Timeouts) -> dict[str, str]:
    effort = request.extra.get("reasoning_effort")
    env = {
        # OLP's fallback reacts; the CLI's own 10 retries would take ~3 minutes.
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # The CLI's per-request cap; OLP's own idle/first-byte deadlines catch stalls.
        "API_TIMEOUT_MS": str(timeouts.total_ms),
        "MAX_THINKING_TOKENS": str(_THINKING_BUDGET.get(str(effort), 0)),
    }
    if request.max_tokens is not None:
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(request.max_tokens)
    return env


class ClaudeTranslator:
    """stream-json lines → events; see `olp.providers._cli_stream.LineTranslator`."""

    def __init__(
        self,
        provider: str,
        now: Callable[[], float],
        on_rate_limit: Callable[[RateLimitInfo], None] | None = None,
        command: str = DEFAULT_COMMAND,
        *,
        tools: bool = False,
        parallel_tool_calls: bool = True,
        schema: Mapping[str, Any] | None = None,
        tool_schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
        on_retry: Callable[[int], None] | None = None,
        held_prompt: bytes | None = None,
    ) -> None:
        """`tools`: client tools are bridged; `parallel_tool_calls=False`: answer only the
        model's first call of a turn (the CLI cannot forbid it several); `schema`: the
        answer is the CLI's structured output, checked against it (`output_schema`);
        `tool_schemas`: each bridged tool's parameters, which a turn's calls must match,
        else `on_retry(calls)` and the next turn is read instead; `held_prompt`: a bridged
        run's user message, written by `reply()` once the CLI has the tools."""
        self.provider = provider
        self._gate = (
            None
            if held_prompt is None
            else ToolsGate(
                provider,
                MCP_SERVER,
                (tool_schemas or {}).keys(),
                held_prompt,
                prefix=TOOL_PREFIX,
                now=now,
            )
        )
        self.command = command
        self.parser = ClaudeStreamParser(TOOL_PREFIX if tools else None)
        self._turns = ToolTurns(
            self.parser, tool_schemas or {}, on_retry, parallel=parallel_tool_calls
        )
        self._schema = schema
        # The CLI's last word on a structured answer that did not match the schema.
        self._schema_complaint: str | None = None
        self.unparsable = 0
        self._now = now
        self._on_rate_limit = on_rate_limit

    @property
    def done(self) -> bool:
        return self.parser.done

    @property
    def answer_lines(self) -> int:
        return self.parser.answer_lines

    def reply(self) -> bytes | None:
        """The held user message of a bridged run once the CLI has the tools, or another
        status request while it lacks them (`tools_gate`)."""
        return None if self._gate is None else self._gate.reply()

    def feed(self, line: bytes) -> list[Event]:
        doc = _decode(line)
        if doc is None:
            if line.strip():
                self.unparsable += 1
                log.debug("cli_unparsable_line", provider=self.provider, line=line[:200])
            return []
        if self._gate is not None:
            self._gate.feed(doc)
        before = self.parser.rate_limit
        events = self.parser.feed(doc)
        if self._schema is not None:
            # Text around the structured-output call is not the answer; the call is.
            events = [e for e in events if not isinstance(e, TextDelta)]
            self._schema_complaint = _tool_error(doc) or self._schema_complaint
        events = self._turns.screen(events)
        info = self.parser.rate_limit
        if info is not None and info is not before and self._on_rate_limit is not None:
            self._on_rate_limit(info)
        return events

    def end(self, status: int | None, stderr: str) -> list[Event]:
        if self.parser.tools_called:
            return self._turns.finish()
        result = self.parser.result
        if result is None:
            return self._no_result(status, stderr)
        if result.get("is_error") is True:
            raise self._error(result)
        usage = usage_from(result.get("usage"), result.get("total_cost_usd"))
        if self._schema is not None:
            return [self._structured(result, self._schema), usage, Finish("stop")]
        return [usage, Finish(finish_reason(result.get("stop_reason") or self.parser.stop_reason))]

    def _structured(self, result: Mapping[str, Any], schema: Mapping[str, Any]) -> TextDelta:
        """The CLI's structured output as the answer's text, checked against `schema`."""
        answer = result.get("structured_output")
        if answer is None:
            raise self._off_schema("the CLI gave no structured output")
        problem = schema_error(answer, schema)
        if problem is not None:
            raise self._off_schema(problem)
        return TextDelta(orjson.dumps(answer).decode())

    def _off_schema(self, problem: str) -> ProviderError:
        return ProviderError(
            Failure.UPSTREAM_ERROR,
            f"claude: the answer does not match the response_format schema ({problem})",
            provider=self.provider,
        )

    def _no_result(self, status: int | None, stderr: str) -> list[Event]:
        if self.parser.content_seen:
            return salvage(None)
        if self.parser.error_kind is not None:
            raise self._error({"result": self.parser.error_text})
        detail = "without a result event"
        if self.unparsable:
            detail += f" ({self.unparsable} unparsable line(s) on stdout)"
        raise exit_failure(self.provider, self.command, status, stderr, detail)

    def _error(self, result: Mapping[str, Any]) -> ProviderError:
        out_of_turns = result.get("subtype") == "error_max_turns"
        if out_of_turns and self._turns.complaint is not None:
            return invalid_tool_call("claude", self.provider, self._turns.complaint)
        if out_of_turns and self._schema is not None:
            complaint = self._schema_complaint or "it answered without the structured output"
            return self._off_schema(f"after one retry: {complaint}")
        status = result.get("api_error_status")
        return classify(
            self.provider,
            text=str(result.get("result") or self.parser.error_text or "unknown error"),
            status=status if isinstance(status, int) else None,
            kind=self.parser.error_kind,
            rate_limit=self.parser.rate_limit,
            now=self._now(),
        )


_USAGE_LIMIT = re.compile(
    r"hit your (?:session |weekly |opus |sonnet |usage |org's monthly |monthly spend )?limit"
    r"|usage limit reached|limit reached\s*[·∙]\s*resets|out of usage credits"
    r"|limit will reset|(?:5-hour|weekly) limit reached",
    re.IGNORECASE,
)
_AUTH = re.compile(
    r"invalid api key|not logged in|please run /login|oauth token (?:has )?expired"
    r"|authentication[_ ](?:error|failed)|invalid bearer token",
    re.IGNORECASE,
)
_KINDS: dict[str, Failure] = {
    "rate_limit": Failure.RATE_LIMITED,
    "overloaded": Failure.OVERLOADED,
    "authentication_failed": Failure.AUTH_FAILED,
    "oauth_org_not_allowed": Failure.AUTH_FAILED,
    "billing_error": Failure.QUOTA_EXHAUSTED,
    "invalid_request": Failure.INVALID_REQUEST,
    "model_not_found": Failure.INVALID_REQUEST,
}


def classify(
    provider: str,
    *,
    text: str,
    status: int | None,
    kind: str | None,
    rate_limit: RateLimitInfo | None,
    now: float,
) -> ProviderError:
    """A Claude Code error (result text, api_error_status, assistant `error`) → taxonomy."""
    message = f"claude: {text}"
    rejected = rate_limit is not None and rate_limit.status == "rejected"
    quota_signal = rejected and rate_limit is not None and rate_limit.kind is not None
    if _USAGE_LIMIT.search(text) or quota_signal:
        resets = rate_limit.resets_at if rate_limit is not None and rejected else None
        return ProviderError(
            Failure.QUOTA_EXHAUSTED,
            message,
            provider=provider,
            upstream_status=status,
            reset_at=resets or parse_reset(text, now),
        )
    failure = _failure(text, status, kind)
    return ProviderError(failure, message, provider=provider, upstream_status=status)


def _failure(text: str, status: int | None, kind: str | None) -> Failure:
    if status == 429:
        return Failure.RATE_LIMITED
    if status in (529, 503) or "overloaded" in text.lower():
        return Failure.OVERLOADED
    if status in (401, 403) or _AUTH.search(text):
        return Failure.AUTH_FAILED
    if status in (400, 404, 413, 422):
        return Failure.INVALID_REQUEST
    if kind in _KINDS:
        return _KINDS[kind]
    if status is None and "unable to connect" in text.lower():
        return Failure.TRANSPORT
    if status is None and "timed out" in text.lower():
        return Failure.TIMEOUT
    return Failure.UPSTREAM_ERROR


def _tool_error(doc: Mapping[str, Any]) -> str | None:
    """The text of an `is_error` tool result the CLI gave the model, if `doc` is one."""
    message = doc.get("message") if doc.get("type") == "user" else None
    blocks = message.get("content") if isinstance(message, dict) else None
    for block in blocks if isinstance(blocks, list) else ():
        if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error"):
            content = block.get("content")
            return content[:500] if isinstance(content, str) else None
    return None


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None
