"""`tools`, `tool_choice` and `response_format` (and their legacy `functions` forms)."""

from __future__ import annotations

import re
from typing import Any, Literal

from olp.ir import NamedToolChoice, ResponseFormat, Tool, ToolChoice
from olp.wire.openai_chat._checks import (
    as_bool,
    as_object,
    as_str,
    bounded,
    invalid,
    kind,
    show,
)

__all__ = ["parse_response_format", "parse_tool_choice", "parse_tools"]

# OpenAI's rule for function names; upstreams reject anything else, so say it here first.
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NAME_RULE = "1 to 64 characters from a-z, A-Z, 0-9, '_' and '-'"
# Maps each accepted string to itself, typed as the IR's literal.
_MODES: dict[str, Literal["auto", "none", "required"]] = {
    "auto": "auto",
    "none": "none",
    "required": "required",
}
_CHOICE_HINT = (
    "must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}"
)


def parse_tools(tools: object, functions: object) -> tuple[Tool, ...]:
    """`tools`, or the legacy `functions` list; both at once is ambiguous and rejected."""
    if tools is not None:
        if functions is not None:
            raise invalid(
                "functions", "cannot be combined with tools (functions is the legacy form)"
            )
        if type(tools) is not list:
            raise invalid("tools", f"must be an array (got {kind(tools)})")
        return tuple(_tool(t, i) for i, t in enumerate(tools))
    if functions is None:
        return ()
    if type(functions) is not list:
        raise invalid("functions", f"must be an array (got {kind(functions)})")
    return tuple(
        _function(as_object(f, f"functions[{i}]"), f"functions[{i}]")
        for i, f in enumerate(functions)
    )


def _tool(value: object, i: int) -> Tool:
    path = f"tools[{i}]"
    tool = as_object(value, path)
    ttype = tool.get("type")
    if ttype != "function":
        if ttype is None:
            raise invalid(f"{path}.type", "required ('function')")
        raise invalid(f"{path}.type", f"only 'function' tools are supported (got {show(ttype)})")
    fn = tool.get("function")
    if type(fn) is not dict:
        raise invalid(f"{path}.function", f"required (an object with a name; got {kind(fn)})")
    return _function(fn, f"{path}.function")


def _function(fn: dict[str, Any], path: str) -> Tool:
    name = fn.get("name")
    if type(name) is not str or _NAME.fullmatch(name) is None:
        if name is None:
            raise invalid(f"{path}.name", f"required ({_NAME_RULE})")
        raise invalid(f"{path}.name", f"must be {_NAME_RULE} (got {show(name)})")
    description = fn.get("description")
    if description is not None:
        description = as_str(description, f"{path}.description")
    parameters = fn.get("parameters")
    if parameters is not None:
        parameters = bounded(as_object(parameters, f"{path}.parameters"), f"{path}.parameters")
    strict = fn.get("strict")
    if strict is not None:
        strict = as_bool(strict, f"{path}.strict")
    return Tool(name, description, parameters, strict)


def parse_tool_choice(
    tool_choice: object, function_call: object, tools: tuple[Tool, ...]
) -> ToolChoice | None:
    """`tool_choice`, else the legacy `function_call`; a named choice must name a tool."""
    if tool_choice is not None:
        choice = _tool_choice(tool_choice)
        path = "tool_choice"
    elif function_call is not None:
        choice = _function_call(function_call)
        path = "function_call"
    else:
        return None
    if isinstance(choice, NamedToolChoice):
        if not any(t.name == choice.name for t in tools):
            where = f"{path}.function.name" if path == "tool_choice" else f"{path}.name"
            raise invalid(where, f"no tool named {show(choice.name)} in tools")
    elif choice == "required" and not tools:
        raise invalid(path, "'required' needs a non-empty tools array")
    return choice


def _tool_choice(value: object) -> ToolChoice:
    if type(value) is str:
        mode = _MODES.get(value)
        if mode is not None:
            return mode
        raise invalid("tool_choice", f"{_CHOICE_HINT} (got {show(value)})")
    if type(value) is not dict:
        raise invalid("tool_choice", f"{_CHOICE_HINT} (got {kind(value)})")
    ctype = value.get("type")
    if ctype != "function":
        raise invalid("tool_choice.type", f"only 'function' is supported (got {show(ctype)})")
    fn = value.get("function")
    if type(fn) is not dict:
        raise invalid("tool_choice.function", f"required (an object with a name; got {kind(fn)})")
    name = fn.get("name")
    if type(name) is not str or not name:
        raise invalid("tool_choice.function.name", "required (a non-empty string)")
    return NamedToolChoice(name)


def _function_call(value: object) -> ToolChoice:
    if value == "auto" or value == "none":
        return _MODES[value]
    if type(value) is not dict:
        raise invalid(
            "function_call", f"must be 'auto', 'none' or {{\"name\": ...}} (got {show(value)})"
        )
    name = value.get("name")
    if type(name) is not str or not name:
        raise invalid("function_call.name", "required (a non-empty string)")
    return NamedToolChoice(name)


def parse_response_format(value: object) -> ResponseFormat:
    fmt = as_object(value, "response_format")
    ftype = fmt.get("type")
    if ftype == "text" or ftype == "json_object":
        return ResponseFormat(ftype)
    if ftype != "json_schema":
        raise invalid(
            "response_format.type",
            f"must be 'text', 'json_object' or 'json_schema' (got {show(ftype)})",
        )
    spec = fmt.get("json_schema")
    if type(spec) is not dict:
        raise invalid("response_format.json_schema", f"required (an object; got {kind(spec)})")
    for key, value in spec.items():  # the whole object goes upstream, known keys or not
        bounded(value, f"response_format.json_schema.{key}")
    name = spec.get("name")
    if type(name) is not str or not name:
        raise invalid("response_format.json_schema.name", "required (a non-empty string)")
    for key, check in (("schema", as_object), ("strict", as_bool), ("description", as_str)):
        if spec.get(key) is not None:
            check(spec[key], f"response_format.json_schema.{key}")
    return ResponseFormat("json_schema", spec)
