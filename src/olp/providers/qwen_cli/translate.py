"""`qwen-cli` translation (pure): request → invocation, stdout lines → IR events,
failures → the taxonomy. Qwen Code's stream-json is Claude Code's (tests/fixtures/cli/README.md §5),
with one trap: an API failure is reported as a *successful* answer whose text is
`[API Error: 401 …]`, exit status 0. So the start of every answer is held back until it
cannot be such a text, and those answers become errors, never content.

Qwen Code also retries 429 and 5xx answers for minutes with nothing on stdout; its only
word about them is a line in its debug log (`[RETRY] Attempt 1 failed with status 429`).
The invocation links that log to the child's stderr, and the first such line is the
run's failure: OLP ends the run and the chain falls back at once.

Qwen Code runs without `--bare`: that mode loads no MCP server at all (`--mcp-config`
included), so client tools could not reach the model through OLP's MCP bridge, and it
reads no settings, so its usage statistics stay on. What `--bare` kept out is kept out by
the settings OLP writes into the private HOME instead (`run_settings`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from olp.errors import Failure, ProviderError
from olp.ir import ChatRequest, Event, Finish, TextDelta
from olp.observability import event_logger
from olp.providers._claude_stream import ClaudeStreamParser, ToolTurns, finish_reason, usage_from
from olp.providers._cli_stream import exit_failure, salvage
from olp.providers._json_schema import invalid_tool_call
from olp.providers._prompt import COMMON_CLI_DROPS, DEFAULT_SYSTEM_PROMPT, serialise
from olp.providers._reset_time import parse_reset
from olp.providers._subprocess import CliInvocation

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import BridgedRun

__all__ = [
    "API_ERROR",
    "CREDENTIALS",
    "CREDENTIAL_ENV",
    "DEFAULT_COMMAND",
    "DROPS",
    "HONOURED",
    "INSTALL_HINT",
    "LOGIN_HINT",
    "QwenTranslator",
    "auth_type",
    "build_invocation",
    "classify",
    "run_settings",
]

log = event_logger("olp.providers.qwen_cli")

DEFAULT_COMMAND = "qwen"
INSTALL_HINT = "npm i -g @qwen-code/qwen-code"
# What to run when the CLI is not logged in (`olp doctor`, detection, setup).
LOGIN_HINT = "run `qwen` once and log in with /auth (Qwen OAuth)"
# Qwen OAuth login (`qwen` → /auth); API keys come through the provider's `env`.
CREDENTIALS = ((".qwen/oauth_creds.json", ".qwen/oauth_creds.json"),)
CREDENTIAL_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")
# Client tools go through the MCP bridge; a `tool_choice` it cannot honour is refused.
DROPS = (
    *(d for d in COMMON_CLI_DROPS if not d.startswith("tool")),
    "reasoning_effort",
    "images",
    "n > 1",
)
# Passed on through the CLI's environment rather than dropped.
HONOURED = frozenset({"max_tokens"})
# With client tools: `tool_choice` auto/none and `parallel_tool_calls` are honoured too
# (none: the tools are not offered; false: only the first call is answered).
HONOURED_WITH_TOOLS = HONOURED | {"tools", "tool_choice", "parallel_tool_calls"}
API_ERROR = "[API Error:"
# The bridge's name in the CLI's settings; Qwen Code calls its tools mcp__<name>__<tool>.
MCP_SERVER = "olp"
TOOL_PREFIX = f"mcp__{MCP_SERVER}__"
_SETTINGS_FILE = ".qwen/settings.json"
_MAX_TOOL_NAME = 63
# No --bare: it would load no MCP server, and it keeps usage statistics on (settings are
# what turns them off, and --bare reads none). `run_settings` does the rest of its work.
# One turn to answer; with bridged tools, one more after a call off the tools' schemas,
# and a model that keeps calling a missing tool ends there (Qwen Code exits 53 with
# "Reached max session turns").
_FLAGS = (
    "--output-format", "stream-json",
    "--include-partial-messages",
    "--chat-recording", "false",
)  # fmt: skip
_TURNS, _BRIDGED_TURNS = "1", "2"
# `tools.core` is an allow-list of Qwen Code's core tools; naming none of them (MCP tools
# are not core, and need no place in it) switches every one off.
_NO_CORE_TOOL = "none"
# Its tools that are not core: denied.
_NON_CORE_TOOLS = (
    "agent",
    "ask_user_question",
    "exit_plan_mode",
    "send_message",
    "skill",
    "task_stop",
    "todo_write",
    "tool_search",
    "web_fetch",
)
# Context files are looked for under this name only (the default QWEN.md and AGENTS.md
# are looked for from the working directory up to the repository holding it).
_NO_CONTEXT_FILE = "OLP-NO-CONTEXT-FILE.md"


def auth_type(env: Mapping[str, str]) -> str:
    """Which of Qwen Code's back ends the owner's `env` sets up (else their Qwen login)."""
    if env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"):
        return "openai"
    if env.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    if env.get("GEMINI_API_KEY"):
        return "gemini"
    return "qwen-oauth"


def _cli_tool_name(name: str) -> str:
    """What Qwen Code calls the bridged tool `name`: `mcp__olp__<name>`, with characters
    outside [a-zA-Z0-9_.-] replaced, and cut to 63 (its first 28 and last 32 characters)."""
    valid = re.sub(r"[^a-zA-Z0-9_.-]", "_", TOOL_PREFIX + name)
    return valid if len(valid) <= _MAX_TOOL_NAME else f"{valid[:28]}___{valid[-32:]}"


def run_settings(mcp_url: str | None) -> bytes:
    """The run's `settings.json`: what `--bare` did, without its faults, and the bridge.

    - `mcp_url`: the MCP bridge, the only MCP server, trusted (no confirmation to ask
      for); None: no MCP server;
    - every built-in tool is off (`tools.core`, `permissions.deny`); with `tool_search`
      gone, Qwen Code offers the MCP tools themselves instead of deferring them behind it;
    - no context files, no auto memory (its prompt section and its background requests),
      no environment message before the prompt, no next-speaker check, no usage
      statistics or telemetry, no IDE;
    - `$version`: the current settings version, so the file is not rewritten.
    """
    settings: dict[str, Any] = {
        "$version": 4,
        "tools": {"core": [_NO_CORE_TOOL]},
        "permissions": {"deny": list(_NON_CORE_TOOLS)},
        "context": {"fileName": _NO_CONTEXT_FILE},
        "memory": {"enableManagedAutoMemory": False},
        "model": {"skipStartupContext": True, "skipNextSpeakerCheck": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ide": {"enabled": False},
    }
    if mcp_url is not None:
        settings["mcpServers"] = {MCP_SERVER: {"httpUrl": mcp_url, "trust": True}}
    return orjson.dumps(settings)


def mcp_files(url: str) -> dict[str, bytes]:
    """The run's settings naming the MCP bridge endpoint at `url`."""
    return {_SETTINGS_FILE: run_settings(url)}


def build_invocation(
    request: ChatRequest,
    env: Mapping[str, str],
    *,
    session_id: str,
    tools_run: BridgedRun | None = None,
) -> CliInvocation:
    """`tools_run`: the request's client tools when `bridges_tools(request)`, else None.

    The prompt goes on stdin with no positional prompt: Qwen Code reads a piped stdin as
    the prompt (a positional one would be visible in the process list).

    The run's `run_settings` are the private HOME's `settings.json` and the system
    settings and system defaults too (their path is relative to the working directory, a
    sibling of HOME), so the machine's system-wide settings, which would win over them or
    be merged into them, are not read. The
    output-language rule Qwen Code writes and reads back into every system prompt is
    /dev/null. One request per answer. `session_id` (a UUID) names the run's debug log,
    which is linked to stderr (see the module docstring).
    """
    honoured = HONOURED_WITH_TOOLS if request.tools else HONOURED
    prompt = serialise(request, honoured=honoured)
    turns = _TURNS if tools_run is None else _BRIDGED_TURNS
    args = [*_FLAGS, "--max-session-turns", turns]
    args += ["--auth-type", auth_type(env), "-m", request.model, "--session-id", session_id]
    args += ["--system-prompt", prompt.system or DEFAULT_SYSTEM_PROMPT]
    # The system settings (which win) and system defaults (merged in) are that file too.
    own = f"../home/{_SETTINGS_FILE}"
    child_env = {"QWEN_CODE_SYSTEM_SETTINGS_PATH": own, "QWEN_CODE_SYSTEM_DEFAULTS_PATH": own}
    if request.max_tokens is not None:
        child_env["QWEN_CODE_MAX_OUTPUT_TOKENS"] = str(request.max_tokens)
    return CliInvocation(
        args=tuple(args),
        stdin=prompt.prompt.encode(),
        env=child_env,
        home_files={_SETTINGS_FILE: run_settings(None)},
        mcp_files=None if tools_run is None else mcp_files,
        tools_run=tools_run,
        # Qwen Code loads the first `.env` it finds from its working directory up to `/`
        # (for variables not set already): an empty one here ends that search.
        work_files={".env": b""},
        credentials=CREDENTIALS,
        home_links={
            f".qwen/debug/{session_id}.txt": "/dev/stderr",
            ".qwen/output-language.md": "/dev/null",
        },
    )


class QwenTranslator:
    """stream-json lines → events; see `olp.providers._cli_stream.LineTranslator`."""

    def __init__(
        self,
        provider: str,
        now: Callable[[], float],
        command: str = DEFAULT_COMMAND,
        *,
        tool_schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
        parallel_tool_calls: bool = True,
        on_retry: Callable[[int], None] | None = None,
    ) -> None:
        """`tool_schemas`: the bridged tools' parameters (None: no tools bridged); see
        `ToolTurns` for them, `parallel_tool_calls` and `on_retry`."""
        self.provider = provider
        self.command = command
        self.parser = ClaudeStreamParser(
            None if tool_schemas is None else TOOL_PREFIX,
            {_cli_tool_name(name): name for name in tool_schemas or ()},
        )
        self._turns = ToolTurns(
            self.parser,
            tool_schemas or {},
            on_retry,
            parallel=parallel_tool_calls,
            cli_checks_arguments=True,  # (`params/city must be string`, to the model)
        )
        self.unparsable = 0
        self._now = now
        self._held = ""  # the answer's start, until it cannot be "[API Error: …"
        self._decided = False
        self._error_text: str | None = None
        self._released = False

    @property
    def done(self) -> bool:
        return self.parser.done

    @property
    def answer_lines(self) -> int:
        return self.parser.answer_lines

    def feed(self, line: bytes) -> list[Event]:
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            if line.strip():
                self.unparsable += 1
                log.debug("cli_unparsable_line", provider=self.provider, line=line[:200])
            return []
        return self._turns.screen(self._guard(self.parser.feed(doc)))

    def _guard(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if not isinstance(event, TextDelta):
                out.append(event)
            elif self._error_text is not None:
                self._error_text += event.text
            elif self._decided:
                out.append(event)
            else:
                self._held += event.text
                if len(self._held) < len(API_ERROR) and API_ERROR.startswith(self._held):
                    continue
                self._decided = True
                if self._held.startswith(API_ERROR):
                    self._error_text = self._held
                else:
                    out.append(TextDelta(self._held))
        self._released = self._released or any(isinstance(e, TextDelta) for e in out)
        return out

    def feed_stderr(self, line: bytes) -> ProviderError | None:
        """A retry notice from the debug log → the failure it reports."""
        match = _RETRY.search(line.decode("utf-8", "replace"))
        if match is None:
            return None
        status, detail = match.group(1), (match.group(2) or "").strip()
        if not detail.startswith(status):
            detail = f"{status} {detail}".strip()
        return classify(self.provider, f"{API_ERROR} {detail}]", self._now())

    def end(self, status: int | None, stderr: str) -> list[Event]:
        if self.parser.tools_called:
            return self._turns.finish()
        stderr = _without_debug_log(stderr)
        result = self.parser.result
        text = result.get("result") if result is not None else None
        if isinstance(text, str) and text.lstrip().startswith(API_ERROR):
            raise classify(self.provider, text.strip(), self._now())
        if self._error_text is not None:
            raise classify(self.provider, self._error_text.strip(), self._now())
        held: list[Event] = [TextDelta(self._held)] if self._held and not self._decided else []
        if result is None:
            return self._no_result(held, status, stderr)
        if result.get("is_error") is True:
            raise classify(self.provider, str(text or "unknown error"), self._now())
        usage = usage_from(result.get("usage"), None, cache_in_input=True)
        return [*held, usage, Finish(finish_reason(self.parser.stop_reason))]

    def _no_result(self, held: list[Event], status: int | None, stderr: str) -> list[Event]:
        if self._released or held:
            return [*held, *salvage(None)]
        if self._turns.complaint is not None:  # out of turns after a call off the schemas
            raise invalid_tool_call("qwen", self.provider, self._turns.complaint)
        detail = "without a result event"
        if self.unparsable:
            detail += f" ({self.unparsable} unparsable line(s) on stdout)"
        raise exit_failure(self.provider, self.command, status, stderr, detail)


_STATUS = re.compile(r"^\[API Error:\s*(\d{3})\b")
# `<timestamp> [WARN] [RETRY] Attempt 1 failed with status 429. Retrying with backoff...
# Error: 429 <the upstream's message>` (also `[Persistent] Attempt …`, `… Retrying after
# explicit delay …`).
_RETRY = re.compile(r"\[RETRY\].*?Attempt \d+ failed with status (\d{3})\b.*?(?:Error: (.*))?$")
_DEBUG_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z \[[A-Z]+\]")


def _without_debug_log(stderr: str) -> str:
    """Stderr without the debug log's entries (and their indented continuation lines)."""
    kept: list[str] = []
    in_entry = False
    for line in stderr.splitlines():
        if _DEBUG_LOG_LINE.match(line):
            in_entry = True
        elif not (in_entry and (not line.strip() or line[:1].isspace())):
            in_entry = False
            kept.append(line)
    return "\n".join(kept)


_QUOTA = re.compile(
    r"quota exceeded|insufficient_quota|exceeded your current quota|usage limit"
    r"|free tier|allocated quota",
    re.IGNORECASE,
)
_BY_STATUS: dict[int, Failure] = {
    401: Failure.AUTH_FAILED,
    403: Failure.AUTH_FAILED,
    429: Failure.RATE_LIMITED,
    503: Failure.OVERLOADED,
    529: Failure.OVERLOADED,
    400: Failure.INVALID_REQUEST,
    404: Failure.INVALID_REQUEST,
    413: Failure.INVALID_REQUEST,
    422: Failure.INVALID_REQUEST,
}


def classify(provider: str, text: str, now: float) -> ProviderError:
    """`[API Error: <status> <message>]` (or another failure text) → taxonomy."""
    match = _STATUS.match(text)
    status = int(match.group(1)) if match else None
    message = f"qwen: {text}"
    if _QUOTA.search(text):
        return ProviderError(
            Failure.QUOTA_EXHAUSTED,
            message,
            provider=provider,
            upstream_status=status,
            reset_at=parse_reset(text, now),
        )
    failure = _failure(text, status)
    return ProviderError(failure, message, provider=provider, upstream_status=status)


def _failure(text: str, status: int | None) -> Failure:
    if status is not None:
        if status in _BY_STATUS:
            return _BY_STATUS[status]
        return Failure.UPSTREAM_ERROR
    lowered = text.lower()
    if "connection error" in lowered or "fetch failed" in lowered or "econnrefused" in lowered:
        return Failure.TRANSPORT
    if "timed out" in lowered or "timeout" in lowered:
        return Failure.TIMEOUT
    if "api key" in lowered or "unauthorized" in lowered or "not authenticated" in lowered:
        return Failure.AUTH_FAILED
    return Failure.UPSTREAM_ERROR
