"""`gemini -p --output-format stream-json` stdout and exit status → IR events. Pure.

Events (captured from gemini-cli 0.61): `init`, the user `message`, assistant
`{"type": "message", "role": "assistant", "content", "delta": true}` pieces → TextDelta
(real token streaming), then `result{status: "success", stats}` → Usage + Finish("stop"),
or `result{status: "error", error.message: "[API Error: …]"}`.

Errors: the exit status is the upstream HTTP status & 0xFF (429 → 173, 500 → 244,
503 → 247, 401 → 145), 1 for network and other errors, 41 for an auth set-up problem,
42 for bad input, 53 for the turn limit. The text decides what a 429 means: Google says
RESOURCE_EXHAUSTED for every 429, so a per-minute limit or a plain "Resource has been
exhausted" is RATE_LIMITED, while a per-day quota ("… requests per day", "exhausted your
daily quota") is QUOTA_EXHAUSTED until the next midnight Pacific time (when Google resets
daily quotas; UTC when the text says so), and "… reset after 1h2m3s" gives its own time.
An error result is not final until the exit status is known, so reading goes on to EOF.

With client tools bridged (`GeminiTools`), each call of the model is a
`{"type": "tool_use", "tool_name": "mcp_olp_<name>", "tool_id", "parameters"}` line,
written as the model's answer streams in; the CLI calls the tools only once the model's
turn is over, so its turn is whole when the MCP bridge gets a call (`woken()`) or the CLI
prints the first `tool_result` (a call the bridge never saw: no such tool). Then its calls
are the answer — `ToolCallDelta`s under the client's names, `Finish("tool_calls")` — or,
if one is of no tool of the request or off its tool's schema, the turn is retried once
(`on_retry`: the bridge lets the held calls go, the CLI hands the model the errors and
runs its second turn); a second such turn is an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from olp.errors import Failure, ProviderError
from olp.ir import Event, Finish, TextDelta, ToolCall, ToolCallDelta, Usage
from olp.providers._json_schema import arguments_error, invalid_tool_call, without_added
from olp.providers._lenient import count
from olp.providers.gemini_cli.translate import ADDED_PARAMETERS, TOOL_PREFIX

__all__ = [
    "GeminiStream",
    "GeminiTools",
    "classify",
    "next_midnight",
    "status_from_exit",
    "usage_from_stats",
]

# Exit status → the HTTP status it was truncated from (status & 0xFF).
_EXIT_STATUS = {
    (s & 0xFF): s for s in (400, 401, 403, 404, 408, 413, 422, 429, 500, 502, 503, 504, 529)
}
_CODE_IN_TEXT = re.compile(r'"code"\s*:\s*(\d{3})')
_PER_DAY = re.compile(r"per day|daily quota|daily limit|per_day|PerDay", re.IGNORECASE)
_PER_MINUTE = re.compile(r"per minute|per_minute|PerMinute", re.IGNORECASE)
_RESET_AFTER = re.compile(r"reset after\s+((?:\d+(?:\.\d+)?[hms])+)", re.IGNORECASE)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_EXHAUSTED_QUOTA = re.compile(r"exhausted your (?:daily )?(?:quota|capacity)", re.IGNORECASE)
_CONNECTION = re.compile(
    r"fetch failed|ECONNREFUSED|ENOTFOUND|ECONNRESET|EAI_AGAIN|socket hang up", re.IGNORECASE
)
_TIMEOUT = re.compile(r"timed? ?out|ETIMEDOUT|deadline exceeded", re.IGNORECASE)
_AUTH = re.compile(r"auth|credential|login|API key", re.IGNORECASE)
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_PACIFIC = "America/Los_Angeles"


@dataclass(frozen=True, slots=True)
class GeminiTools:
    """The client tools a run bridges, as the CLI's model knows them.

    `names`: the CLI's name of each tool → the client's; `schemas`: each tool's parameters
    by the client's name; `parallel=False`: only a turn's first call is answered (nothing
    tells the model to make one); `on_retry(calls)`: the bridge's `retry_turn`.
    """

    names: Mapping[str, str]
    schemas: Mapping[str, Mapping[str, Any] | None]
    parallel: bool = True
    on_retry: Callable[[int], None] = field(default=lambda calls: None)


class GeminiStream:
    """One `gemini -p` run's stdout, line by line (`LineTranslator`- and
    `WakeTranslator`-shaped)."""

    def __init__(self, provider: str, tools: GeminiTools | None = None) -> None:
        self.provider = provider
        self.done = False
        # See `LineTranslator.answer_lines`: not `init` or the echoed user message.
        self.answer_lines = 0
        self._content = False
        self._usage: Usage | None = None
        self._error: str | None = None
        self._tools = tools
        # This turn's calls: (the CLI's tool name, the call) in order.
        self._calls: list[tuple[str, ToolCall]] = []
        self._complaint: str | None = None  # why the first turn's calls were refused

    def feed(self, line: bytes) -> list[Event]:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            return []
        if not isinstance(event, dict):
            return []
        kind = event.get("type")
        if kind not in ("init", None) and not (kind == "message" and event.get("role") == "user"):
            self.answer_lines += 1
        if kind == "message" and event.get("role") == "assistant":
            content = event.get("content")
            # A whole (non-delta) message after deltas repeats them: skip it.
            whole = event.get("delta") is not True
            if isinstance(content, str) and content and not (whole and self._content):
                self._content = True
                return [TextDelta(content)]
        elif kind == "tool_use" and self._tools is not None:
            self._calls.append(_tool_call(event, len(self._calls)))
        elif kind == "tool_result" and self._calls:
            return self._turn_over()
        elif kind == "result":
            return self._result(event)
        elif kind == "error" and self._error is None:
            self._error = _message(event)
        return []

    def woken(self) -> list[Event]:
        """The MCP bridge got a call: the model's turn is over (if it made calls)."""
        return self._turn_over() if self._calls and not self.done else []

    def _turn_over(self) -> list[Event]:
        tools = self._tools
        assert tools is not None
        made, self._calls = self._calls, []
        checked = [_client_call(name, call, tools) for name, call in made]
        calls = [call for call, _ in checked if call is not None]
        problem = next((problem for _, problem in checked if problem is not None), None)
        if problem is None:
            self.done = True
            answered = calls if tools.parallel else calls[:1]
            deltas: list[Event] = [
                ToolCallDelta(index, call.id, call.name, call.arguments)
                for index, call in enumerate(answered)
            ]
            return [*deltas, Finish("tool_calls")]
        if self._complaint is not None:
            raise invalid_tool_call("gemini", self.provider, problem)
        self._complaint = problem
        # The CLI checks the arguments against the tool's schema itself: only the calls
        # that pass reach the bridge (and are held there).
        tools.on_retry(len(calls))
        return []

    def _result(self, event: dict[str, Any]) -> list[Event]:
        self._usage = usage_from_stats(event.get("stats"))
        if event.get("status") == "success":
            self.done = True
            return [*self._tail(), Finish("stop")]
        # Not done: the exit status (= the HTTP status) is still to come.
        self._error = _message(event) or self._error or "gemini reported an error"
        return []

    def end(self, status: int | None, stderr: str) -> list[Event]:
        if self.done:
            return []
        if self._content:
            return [*self._tail(), Finish("length")]  # salvage: content, then a failure
        raise classify(self.provider, status, self._error or "", stderr)

    def _tail(self) -> list[Event]:
        return [self._usage] if self._usage is not None else []


def _tool_call(event: dict[str, Any], index: int) -> tuple[str, ToolCall]:
    """A `tool_use` line: the CLI's tool name, and the call (under that name for now)."""
    name = str(event.get("tool_name") or "")
    raw_id = event.get("tool_id")
    call_id = _call_id(name, raw_id) if isinstance(raw_id, str) else f"call_{index}"
    arguments = event.get("parameters")
    text = orjson.dumps(arguments if isinstance(arguments, dict) else {}).decode()
    return name, ToolCall(call_id, name, text)


def _call_id(name: str, tool_id: str) -> str:
    """The call's id: the model's own (the CLI writes `<tool>__<id>`), or, where the
    model gave none and the CLI made one up (`<tool>_<ms>_<n>`), `call_<ms>_<n>`."""
    raw = tool_id.removeprefix(f"{name}__")
    made_up = raw.removeprefix(f"{name}_")
    return f"call_{made_up}" if made_up != raw else raw


def _client_call(
    name: str, call: ToolCall, tools: GeminiTools
) -> tuple[ToolCall | None, str | None]:
    """The call under the client's tool name, or why it cannot be the answer."""
    client = tools.names.get(name)
    if client is None:
        return None, f"{name.removeprefix(TOOL_PREFIX)}: not one of the request's tools"
    schema = tools.schemas.get(client)
    arguments = without_added(orjson.loads(call.arguments), schema, ADDED_PARAMETERS)
    problem = arguments_error(arguments, schema)
    if problem is not None:
        return None, f"{client}: {problem}"
    return ToolCall(call.id, client, orjson.dumps(arguments).decode()), None


def _message(event: dict[str, Any]) -> str | None:
    error = event.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    message = event.get("message")
    return message if isinstance(message, str) else None


def status_from_exit(status: int | None) -> int | None:
    """The HTTP status behind a gemini exit status, if it is one."""
    return _EXIT_STATUS.get(status) if status is not None and status > 1 else None


def classify(
    provider: str, status: int | None, message: str, stderr: str = "", *, now: float | None = None
) -> ProviderError:
    """A run without an answer → the taxonomy error its exit status and texts mean."""
    text = message or _last_lines(stderr)
    code = _CODE_IN_TEXT.search(text)
    http = int(code.group(1)) if code else status_from_exit(status)
    failure, retry_after, reset_at = _failure(status, http, text, now)
    return ProviderError(
        failure,
        f"gemini exited with status {status}: {text or 'no error text'}",
        provider=provider,
        upstream_status=http,
        retry_after=retry_after,
        reset_at=reset_at,
    )


def _failure(
    status: int | None, http: int | None, text: str, now: float | None
) -> tuple[Failure, float | None, float | None]:
    if http == 429:
        return _rate_or_quota(text, datetime.now(UTC).timestamp() if now is None else now)
    if http in (401, 403) or status == 41:
        return Failure.AUTH_FAILED, None, None
    if http in (400, 404, 413, 422) or status == 42:
        return Failure.INVALID_REQUEST, None, None
    if http in (503, 529):
        return Failure.OVERLOADED, None, None
    if http is not None and http >= 500:
        return Failure.UPSTREAM_ERROR, None, None
    if _CONNECTION.search(text):
        return Failure.TRANSPORT, None, None
    if _TIMEOUT.search(text):
        return Failure.TIMEOUT, None, None
    if status == 1 and _AUTH.search(text) and "API Error" not in text:
        return Failure.AUTH_FAILED, None, None
    if status == 1 and "API Error" in text:
        return Failure.UPSTREAM_ERROR, None, None
    return Failure.SPAWN_FAILED, None, None


def _rate_or_quota(text: str, now: float) -> tuple[Failure, float | None, float | None]:
    after = _reset_after(text)
    if _PER_DAY.search(text):
        return Failure.QUOTA_EXHAUSTED, None, next_midnight(now, "UTC" in text)
    if _EXHAUSTED_QUOTA.search(text):
        reset = now + after if after is not None else next_midnight(now, False)
        return Failure.QUOTA_EXHAUSTED, None, reset
    if after is not None:
        return Failure.RATE_LIMITED, after, None
    return Failure.RATE_LIMITED, 60.0 if _PER_MINUTE.search(text) else None, None


def _reset_after(text: str) -> float | None:
    match = _RESET_AFTER.search(text)
    if not match:
        return None
    return sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(match.group(1)))


def next_midnight(now: float, utc: bool) -> float:
    """The next midnight in Google's quota zone (Pacific time) or in UTC."""
    zone = UTC if utc else _pacific()
    local = datetime.fromtimestamp(now, zone)
    midnight = datetime(local.year, local.month, local.day, tzinfo=zone) + timedelta(days=1)
    return midnight.timestamp()


def _pacific() -> tzinfo:
    try:
        return ZoneInfo(_PACIFIC)
    except (ZoneInfoNotFoundError, ValueError):
        return timezone(timedelta(hours=-8), "PST")  # no tz database: standard time


def usage_from_stats(stats: Any) -> Usage | None:
    """`result.stats{input_tokens, output_tokens, cached}` → Usage."""
    if not isinstance(stats, dict):
        return None
    prompt, completion = count(stats.get("input_tokens")), count(stats.get("output_tokens"))
    if not prompt and not completion:
        return None
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_prompt_tokens=count(stats.get("cached")),
    )


def _last_lines(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith(" ")]
    useful = [ln for ln in lines if not ln.startswith(("Warning:", "Ripgrep", "[STARTUP]"))]
    return " ".join(useful[-3:])[-600:]
