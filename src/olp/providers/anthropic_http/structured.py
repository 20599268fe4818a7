"""Structured output over the Messages API: a forced tool call, validated (pure).

The Messages API has no `response_format`. Asking for JSON in the system prompt gets prose
or a fenced block now and then, which breaks a client's `parse`. Instead, when a request
asks for `json_object` or a `json_schema` whose root is an object, the answer is requested
as the input of one tool the model must call (`tool_choice: {"type": "tool"}`), whose
`input_schema` is the client's schema: the model then writes exactly one JSON object. The
call's input comes back to the client as the answer's plain JSON text (finish `stop`),
once it is whole and valid against the schema (`jsonschema`); an answer that is not is
this hop's failure (`UPSTREAM_ERROR`, so the chain falls back), never sent on.

Not used — the system-prompt instruction is, as before — when the request has tools of
its own (forcing ours would forbid them), when the schema's root is not an object (a tool
input must be one), or when the client turned Anthropic's extended thinking on through
its own wire (Anthropic refuses a forced tool with thinking).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import orjson

from olp.errors import Failure, ProviderError
from olp.ir import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from olp.wire.sse import SSEMessage

__all__ = ["JsonAnswer", "JsonAnswerEvents", "JsonAnswerStream", "json_answer"]

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_DEFAULT_NAME = "json_answer"
_ANY_OBJECT: Mapping[str, Any] = {"type": "object"}


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    """The tool the structured answer comes through, and the schema it must meet."""

    tool: str
    schema: dict[str, Any] | None  # None: any JSON object (`json_object`)

    def tool_spec(self) -> dict[str, Any]:
        return {
            "name": self.tool,
            "description": "Give your whole answer by calling this tool: its input is the answer.",
            "input_schema": self.schema if self.schema is not None else _ANY_OBJECT,
        }

    def tool_choice(self) -> dict[str, Any]:
        return {"type": "tool", "name": self.tool}


def json_answer(provider: str, request: ChatRequest, thinking: object) -> JsonAnswer | None:
    """How this request's structured answer is asked for, or None (a prose instruction).

    `thinking`: the client's own Messages `thinking` setting, if it sent one. Raises
    ProviderError(INVALID_REQUEST) for a schema that is not a JSON Schema.
    """
    rf = request.response_format
    if rf is None or rf.type == "text" or request.tools or _thinking_on(thinking):
        return None
    if rf.type == "json_object" or rf.json_schema is None:
        return JsonAnswer(_DEFAULT_NAME, None)
    schema = rf.json_schema.get("schema")
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    schema = dict(schema)  # (jsonschema takes dicts)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        param = "response_format.json_schema.schema"
        raise ProviderError(
            Failure.INVALID_REQUEST,
            f"{param}: not a valid JSON Schema ({exc.message[:300]})",
            provider=provider,
            param=param,
        ) from None
    name = rf.json_schema.get("name")
    tool = name if isinstance(name, str) and _TOOL_NAME.fullmatch(name) else _DEFAULT_NAME
    return JsonAnswer(tool, schema)


def _thinking_on(thinking: object) -> bool:
    return isinstance(thinking, Mapping) and thinking.get("type") not in (None, "disabled")


class JsonAnswerEvents:
    """Folds the forced call's events into the answer's text, checked at the end."""

    __slots__ = ("_answer", "_pieces", "_provider", "_usage")

    def __init__(self, provider: str, answer: JsonAnswer) -> None:
        self._provider = provider
        self._answer = answer
        self._pieces: list[str] = []
        self._usage: Usage | None = None

    def take(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if isinstance(event, ToolCallDelta):
                if event.index == 0:
                    self._pieces.append(event.arguments)
            elif isinstance(event, ReasoningDelta):
                out.append(event)
            elif isinstance(event, Usage):
                self._usage = event
            elif isinstance(event, Finish):
                out.extend(self._finish(event))
            # TextDelta: words around the forced call are not part of the answer.
        return out

    def _finish(self, finish: Finish) -> list[Event]:
        text = "".join(self._pieces)
        tail: list[Event] = [] if self._usage is None else [self._usage]
        if finish.reason == "length":  # cut off: the client sees so, unchecked
            return [*([TextDelta(text)] if text else []), *tail, Finish("length")]
        self._check(text)
        return [TextDelta(text), *tail, Finish("stop")]

    def _check(self, text: str) -> None:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise self._failed(f"not JSON ({exc})") from None
        schema = self._answer.schema
        if schema is None:
            if not isinstance(value, dict):
                raise self._failed("not a JSON object")
            return
        validator_class = jsonschema.validators.validator_for(schema)
        try:
            error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(value))
        except Exception as exc:  # e.g. a `$ref` OLP cannot resolve: unchecked is unsafe
            raise self._failed(f"it could not be checked against the schema ({exc})") from None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise self._failed(f"at {where}: {error.message[:300]}")

    def _failed(self, problem: str) -> ProviderError:
        return ProviderError(
            Failure.UPSTREAM_ERROR,
            f"the model's structured answer does not match the requested format: {problem}",
            provider=self._provider,
        )


class JsonAnswerStream:
    """A stream parser whose events go through `JsonAnswerEvents`."""

    __slots__ = ("_fold", "_parser", "done")

    def __init__(self, parser: Any, fold: JsonAnswerEvents) -> None:
        self._parser = parser
        self._fold = fold
        self.done = False

    def feed_message(self, message: SSEMessage) -> list[Event]:
        events = self._fold.take(self._parser.feed_message(message))
        self.done = self._parser.done
        return events
