"""Checking a model's JSON against the client's JSON Schema (`jsonschema`, any draft).

    problem = schema_error(answer, schema)   # None when the answer is valid

The message says where and what, short enough to hand back to a model for a retry or to a
client in an error: `/n: 'four' is not of type 'integer'`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from jsonschema import Draft202012Validator, SchemaError, validators
from jsonschema.exceptions import best_match

from olp.errors import Failure, ProviderError

__all__ = ["arguments_error", "invalid_tool_call", "schema_error", "without_added"]


def schema_error(instance: Any, schema: Mapping[str, Any]) -> str | None:
    """What is wrong with `instance` (decoded JSON) under `schema`, or None if nothing is."""
    plain = dict(schema)
    validator = validators.validator_for(plain, default=Draft202012Validator)
    try:
        validator.check_schema(plain)
    except SchemaError as exc:
        return f"the schema itself is invalid: {exc.message}"
    error = best_match(validator(plain).iter_errors(instance))
    if error is None:
        return None
    where = "/" + "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}"


def arguments_error(arguments: Any, schema: Mapping[str, Any] | None) -> str | None:
    """What is wrong with a tool call's `arguments` (decoded) under its parameters'
    schema (None: any object), or None if nothing is."""
    if not isinstance(arguments, dict):
        return "the arguments are not a JSON object"
    return schema_error(arguments, schema) if schema else None


def without_added(arguments: Any, schema: Mapping[str, Any] | None, added: Collection[str]) -> Any:
    """A call's `arguments` (decoded) without the `added` ones its tool does not declare:
    a CLI may add parameters of its own to every tool it offers (gemini's
    `wait_for_previous`), which are neither the client's nor checked against its schema."""
    if not added or not isinstance(arguments, dict):
        return arguments
    properties = schema.get("properties") if schema else None
    declared = properties if isinstance(properties, Mapping) else {}
    return {k: v for k, v in arguments.items() if k not in added or k in declared}


def invalid_tool_call(cli: str, provider: str, problem: str) -> ProviderError:
    """The hop's end when the model's tool call through `cli` is still off its tool's
    schema (or of no tool of the request) after its one retry."""
    return ProviderError(
        Failure.UPSTREAM_ERROR,
        f"{cli}: the model's tool call is invalid (after one retry: {problem})",
        provider=provider,
    )
