"""`vibe -p --output streaming` stdout, exit status, stderr and export.json → IR. Pure.

Stdout is JSONL of *finished* message entries (`{"type": "message", "role": "user" |
"assistant", "content": [{"type": "text", "text"}], …}`): no token deltas, so each
assistant entry is one TextDelta (Capabilities.streaming = "message"). There is no
terminal event: the answer ends at EOF, and the exit status says how (captured, and
documented in Vibe's own skill file):
- 0 finished → Finish("stop");
- 1 usage/config/auth: "Invalid API key …" or a missing key → AUTH_FAILED, else
  SPAWN_FAILED;
- 2 infrastructure (the model API, after Vibe's retries — off here): the stderr text
  `Error: Client error '429 Too Many Requests' …`, `Server error '503 …'`,
  `All connection attempts failed`, `Timed out waiting for the model …` → RATE_LIMITED,
  OVERLOADED / UPSTREAM_ERROR, TRANSPORT, TIMEOUT;
- 3 stopped on a limit (turn, token, price, time) → Finish("length") when there is an
  answer, SPAWN_FAILED when there is none.
Any answer followed by a non-zero exit is salvaged (docs/design.md §5 rule 4). Usage and cost
come from `--output-dir`'s export.json when it was written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from olp.errors import Failure, ProviderError
from olp.ir import Event, Finish, ReasoningDelta, TextDelta, Usage
from olp.providers._lenient import count, usd

__all__ = ["VibeStream", "classify", "usage_from_export"]

_STATUS = re.compile(r"\b([1-5]\d\d) [A-Z][A-Za-z ]+'")  # httpx: "'429 Too Many Requests'"
_AUTH = re.compile(r"invalid api key|api key.*(?:missing|not set|not found)|unauthori[sz]ed", re.I)
_QUOTA = re.compile(
    r"insufficient_quota|quota (?:exceeded|exhausted)|capacity exceeded|billing", re.I
)
_CONNECTION = re.compile(
    r"connection attempts failed|connect(?:ion)? ?error|refused|name resolution", re.I
)
_TIMEOUT = re.compile(r"timed out|timeout", re.I)
# export.json `error.code` → taxonomy, when stderr says nothing clearer.
_EXPORT_CODES = {
    "rate_limit": Failure.RATE_LIMITED,
    "invalid_api_key": Failure.AUTH_FAILED,
    "backend_error": Failure.UPSTREAM_ERROR,
}
_TEXT_TYPES = ("text", "output_text")
_REASONING_TYPES = ("thinking", "reasoning")


class VibeStream:
    """One `vibe -p` run's stdout, line by line (`LineTranslator`-shaped)."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False  # Vibe has no terminal event: EOF decides
        # See `LineTranslator.answer_lines`: the assistant's messages, not the echo.
        self.answer_lines = 0
        self._content = False

    def feed(self, line: bytes) -> list[Event]:
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            return []
        if not isinstance(entry, dict) or entry.get("type") != "message":
            return []
        if entry.get("role") != "assistant":
            return []
        self.answer_lines += 1
        events: list[Event] = []
        for part in entry.get("content") or ():
            events += self._part(part)
        return events

    def _part(self, part: Any) -> list[Event]:
        if not isinstance(part, dict):
            return []
        kind, text = part.get("type"), part.get("text") or part.get("thinking")
        if not isinstance(text, str) or not text:
            return []
        if kind in _REASONING_TYPES:
            return [ReasoningDelta(text)]
        if kind not in _TEXT_TYPES:
            return []
        # Two assistant entries in one run (text around a tool step) are two paragraphs.
        events: list[Event] = [TextDelta("\n\n")] if self._content else []
        self._content = True
        return [*events, TextDelta(text)]

    def end(
        self, status: int | None, stderr: str, export: Mapping[str, Any] | None = None
    ) -> list[Event]:
        usage = usage_from_export(export)
        tail = [usage] if usage is not None else []
        if status == 0 and self._content:
            return [*tail, Finish("stop")]
        if self._content:
            return [*tail, Finish("length")]  # salvage: an answer, then a non-zero exit
        raise classify(self.provider, status, stderr, export)


def classify(
    provider: str, status: int | None, stderr: str, export: Mapping[str, Any] | None = None
) -> ProviderError:
    """A run that gave no answer → the taxonomy error its exit status and text mean."""
    text = _error_text(stderr, export)
    http = _status(text)
    failure = _failure(status, text, http, _export_code(export))
    return ProviderError(
        failure,
        f"vibe exited with status {status}: {text or 'no error text'}",
        provider=provider,
        upstream_status=http,
    )


def _failure(status: int | None, text: str, http: int | None, code: str | None) -> Failure:
    if status == 0:
        return Failure.SPAWN_FAILED  # finished without an answer
    if status == 1:
        return Failure.AUTH_FAILED if _AUTH.search(text) else Failure.SPAWN_FAILED
    if status == 3:
        return Failure.SPAWN_FAILED  # a limit stopped it before any answer
    if http is not None:
        return _http_failure(http, text)
    if _AUTH.search(text):
        return Failure.AUTH_FAILED
    if _CONNECTION.search(text):
        return Failure.TRANSPORT
    if _TIMEOUT.search(text):
        return Failure.TIMEOUT
    if status == 2:
        return _EXPORT_CODES.get(code or "", Failure.UPSTREAM_ERROR)
    return Failure.SPAWN_FAILED


def _http_failure(http: int, text: str) -> Failure:
    if http == 429:
        return Failure.QUOTA_EXHAUSTED if _QUOTA.search(text) else Failure.RATE_LIMITED
    if http in (401, 403):
        return Failure.AUTH_FAILED
    if http in (400, 404, 413, 422):
        return Failure.INVALID_REQUEST
    if http in (503, 529):
        return Failure.OVERLOADED
    return Failure.UPSTREAM_ERROR


def _status(text: str) -> int | None:
    match = _STATUS.search(text)
    return int(match.group(1)) if match else None


def _error_text(stderr: str, export: Mapping[str, Any] | None) -> str:
    """Vibe's `Error: …` lines (stderr), else export.json's error message."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith("Error:")), None)
    if start is not None:
        return " ".join(lines[start:])[:1000].removeprefix("Error: ")
    error = (export or {}).get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:1000]
    return " ".join(lines)[-600:]


def _export_code(export: Mapping[str, Any] | None) -> str | None:
    error = (export or {}).get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def usage_from_export(export: Mapping[str, Any] | None) -> Usage | None:
    """export.json `usage` (+ `cost_usd` when Vibe knows the model's price) → Usage."""
    usage = (export or {}).get("usage")
    if not isinstance(usage, dict):
        return None
    prompt, completion = count(usage.get("input_tokens")), count(usage.get("output_tokens"))
    if not prompt and not completion:
        return None
    cost = (export or {}).get("cost_usd")
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_prompt_tokens=count(usage.get("cached_input_tokens")),
        # 0.0 means "no price known for this model", not "free".
        cost_usd=usd(cost) or None,
    )
