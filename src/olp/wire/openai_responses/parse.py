"""A Responses API request body (`POST /v1/responses`) -> `ChatRequest`, or `InvalidRequest`.

The Responses wire says the same things as Chat Completions in other words, so it maps
onto the one IR:

- `instructions` becomes a leading system message; `input` is a string (one user message)
  or a list of items: messages (`input_text`, `input_image`, `output_text` parts),
  `function_call` (an assistant turn's tool call; consecutive ones join one turn) and
  `function_call_output` (a tool message); `reasoning` items passed back are accepted and
  left out, since no upstream takes another model's reasoning back;
- `tools` holds function tools; a `custom` (free-form) tool, which Codex sends for
  `apply_patch`, becomes a function taking one string, `input`, and its calls come back
  as function calls; hosted tools (web_search, file_search, computer, ...) run at OpenAI
  and are refused, naming the type; `namespace` tool groups (Codex's sub-agent tools) are
  left out, since a call into one must name its namespace, which no upstream's answer
  carries;
- `text.format` is the response format, `max_output_tokens` the token limit,
  `reasoning.effort` and `text.verbosity` pass through like their chat counterparts;
- OLP keeps no responses: `previous_response_id`, `conversation` and `background` are
  refused; `store`, `include`, `truncation`, `prompt_cache_key` and the like are accepted
  and have no effect.

An explicit `null` means "not given", as on the chat route.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

import orjson

from olp.ir import (
    ChatRequest,
    ContentPart,
    ImagePart,
    Message,
    NamedToolChoice,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
)
from olp.wire._json import load_object
from olp.wire.openai_chat._checks import (
    as_bool,
    as_int,
    as_number,
    as_object,
    as_str,
    bounded,
    invalid,
    kind,
    model_name,
    show,
)

__all__ = ["CUSTOM_TOOL_ARGUMENT", "parse_responses_request"]

_T = TypeVar("_T")
# A custom tool's free-form text travels as this one string argument.
CUSTOM_TOOL_ARGUMENT = "input"
_MODES: dict[str, Literal["auto", "none", "required"]] = {
    "auto": "auto",
    "none": "none",
    "required": "required",
}
_ROLES: dict[str, Literal["system", "developer", "user", "assistant"]] = {
    "system": "system",
    "developer": "developer",
    "user": "user",
    "assistant": "assistant",
}
_DETAILS: dict[str, Literal["auto", "low", "high"]] = {"auto": "auto", "low": "low", "high": "high"}
# Keeping responses is what these need; OLP keeps none.
_STATEFUL = {
    "previous_response_id": "OLP keeps no responses; send the whole conversation in `input`",
    "conversation": "OLP keeps no conversations; send the whole conversation in `input`",
    "prompt": "stored prompt templates are not supported; send `instructions` and `input`",
}


def parse_responses_request(body: bytes) -> ChatRequest:
    return _request(load_object(body))


def _request(obj: dict[str, Any]) -> ChatRequest:
    get = obj.get
    model = model_name(get("model"))
    _refuse_stateful(obj)
    tools, custom = _tools(get("tools"))
    messages = (*_instructions(get("instructions")), *_input(get("input"), custom))
    if not messages:
        raise invalid("input", "required (a string or a non-empty array of items)")
    text = _opt(get("text"), as_object, "text") or {}
    reasoning = _opt(get("reasoning"), as_object, "reasoning") or {}
    return ChatRequest(
        model=model,
        messages=messages,
        stream=_opt(get("stream"), as_bool, "stream") or False,
        tools=tools,
        tool_choice=_tool_choice(get("tool_choice"), tools),
        parallel_tool_calls=_opt(get("parallel_tool_calls"), as_bool, "parallel_tool_calls"),
        response_format=_format(text.get("format")),
        temperature=_opt_number(get("temperature"), "temperature", 0.0, 2.0),
        top_p=_opt_number(get("top_p"), "top_p", 0.0, 1.0),
        max_tokens=_opt_positive(get("max_output_tokens"), "max_output_tokens"),
        max_tokens_field="max_completion_tokens",
        user=_opt(get("user"), as_str, "user"),
        extra=_extra(obj, text, reasoning),
    )


def _opt(value: object, check: Callable[[object, str], _T], path: str) -> _T | None:
    return None if value is None else check(value, path)


def _opt_number(value: object, path: str, lo: float, hi: float) -> float | None:
    return None if value is None else as_number(value, path, lo, hi)


def _opt_positive(value: object, path: str) -> int | None:
    return None if value is None else as_int(value, path, 1)


def _refuse_stateful(obj: dict[str, Any]) -> None:
    for key, why in _STATEFUL.items():
        if obj.get(key) is not None:
            raise invalid(key, f"not supported: {why}")
    if obj.get("background") is not None and as_bool(obj["background"], "background"):
        raise invalid("background", "not supported: OLP answers in the foreground only")


def _instructions(value: object) -> tuple[Message, ...]:
    if value is None:
        return ()
    text = as_str(value, "instructions")
    return (Message("system", text),) if text else ()


def _input(value: object, custom: frozenset[str]) -> tuple[Message, ...]:
    if value is None:
        return ()
    if type(value) is str:
        return (Message("user", value),)
    if type(value) is not list:
        raise invalid("input", f"must be a string or an array of items (got {kind(value)})")
    messages: list[Message] = []
    for i, raw in enumerate(value):
        item = as_object(raw, f"input[{i}]")
        message = _item(item, i, custom)
        if message is None:
            continue
        previous = messages[-1] if messages else None
        if message.tool_calls and previous is not None and _joins(previous):
            # A turn's calls (and the text before them) are one assistant message.
            messages[-1] = Message(
                "assistant",
                previous.content,
                tool_calls=(*previous.tool_calls, *message.tool_calls),
            )
        else:
            messages.append(message)
    return tuple(messages)


def _joins(message: Message) -> bool:
    return message.role == "assistant" and message.tool_call_id is None


def _item(item: dict[str, Any], i: int, custom: frozenset[str]) -> Message | None:
    itype = item.get("type")
    if itype is None or itype == "message":
        return _message(item, i)
    if itype == "function_call" or itype == "custom_tool_call":
        return Message("assistant", None, tool_calls=(_call(item, i, itype),))
    if itype == "function_call_output" or itype == "custom_tool_call_output":
        return _call_output(item, i)
    if itype == "reasoning":
        return None
    if itype == "item_reference":
        raise invalid(f"input[{i}].type", "item_reference is not supported: OLP keeps no items")
    raise invalid(
        f"input[{i}].type",
        "must be 'message', 'function_call', 'function_call_output', 'custom_tool_call', "
        f"'custom_tool_call_output' or 'reasoning' (got {show(itype)})",
    )


def _message(item: dict[str, Any], i: int) -> Message:
    path = f"input[{i}]"
    role_name = item.get("role")
    role = _ROLES.get(role_name) if type(role_name) is str else None
    if role is None:
        raise invalid(
            f"{path}.role",
            f"must be 'user', 'assistant', 'system' or 'developer' (got {show(role_name)})",
        )
    content = item.get("content")
    if type(content) is str:
        return Message(role, content)
    if type(content) is not list:
        raise invalid(f"{path}.content", f"must be a string or an array (got {kind(content)})")
    parts = tuple(_part(part, f"{path}.content[{j}]") for j, part in enumerate(content))
    if all(isinstance(p, TextPart) for p in parts):
        return Message(role, "".join(p.text for p in parts if isinstance(p, TextPart)))
    return Message(role, parts)


def _part(value: object, path: str) -> ContentPart:
    part = as_object(value, path)
    ptype = part.get("type")
    if ptype in ("input_text", "output_text", "text", "summary_text"):
        return TextPart(as_str(part.get("text"), f"{path}.text"))
    if ptype == "refusal":
        return TextPart(as_str(part.get("refusal"), f"{path}.refusal"))
    if ptype == "input_image":
        return _image(part, path)
    if ptype == "input_file":
        raise invalid(f"{path}.type", "input_file is not supported; send the text as input_text")
    raise invalid(
        f"{path}.type",
        f"must be 'input_text', 'input_image' or 'output_text' (got {show(ptype)})",
    )


def _image(part: dict[str, Any], path: str) -> ImagePart:
    url = part.get("image_url")
    if type(url) is not str or not url:
        if part.get("file_id") is not None:
            raise invalid(f"{path}.file_id", "files are not supported; send an image_url")
        raise invalid(f"{path}.image_url", "required (a URL or a data: URL)")
    detail = part.get("detail")
    if detail is None:
        return ImagePart(url)
    known = _DETAILS.get(detail) if type(detail) is str else None
    if known is None:
        raise invalid(f"{path}.detail", f"must be 'auto', 'low' or 'high' (got {show(detail)})")
    return ImagePart(url, known)


def _call(item: dict[str, Any], i: int, itype: str) -> ToolCall:
    path = f"input[{i}]"
    call_id = _required_str(item, "call_id", path)
    name = _required_str(item, "name", path)
    if itype == "custom_tool_call":
        text = as_str(item.get("input"), f"{path}.input")
        arguments = orjson.dumps({CUSTOM_TOOL_ARGUMENT: text}).decode()
    else:
        arguments = as_str(item.get("arguments"), f"{path}.arguments")
    return ToolCall(call_id, name, arguments)


def _call_output(item: dict[str, Any], i: int) -> Message:
    path = f"input[{i}]"
    call_id = _required_str(item, "call_id", path)
    output = item.get("output")
    if type(output) is str:
        return Message("tool", output, tool_call_id=call_id)
    if type(output) is not list:
        raise invalid(f"{path}.output", f"must be a string or an array (got {kind(output)})")
    parts = tuple(_part(part, f"{path}.output[{j}]") for j, part in enumerate(output))
    return Message("tool", parts, tool_call_id=call_id)


def _required_str(item: dict[str, Any], key: str, path: str) -> str:
    value = item.get(key)
    if type(value) is not str or not value:
        raise invalid(f"{path}.{key}", f"required (a non-empty string; got {show(value)})")
    return value


def _tools(value: object) -> tuple[tuple[Tool, ...], frozenset[str]]:
    """The tools, and the names of those that were `custom` (free-form) tools."""
    if value is None:
        return (), frozenset()
    if type(value) is not list:
        raise invalid("tools", f"must be an array (got {kind(value)})")
    tools: list[Tool] = []
    custom: set[str] = set()
    for i, raw in enumerate(value):
        tool = as_object(raw, f"tools[{i}]")
        ttype = tool.get("type")
        if ttype == "function":
            tools.append(_function_tool(tool, f"tools[{i}]"))
        elif ttype == "custom":
            tools.append(_custom_tool(tool, f"tools[{i}]"))
            custom.add(tools[-1].name)
        elif ttype == "namespace":
            continue  # see the module docstring
        else:
            raise invalid(
                f"tools[{i}].type",
                f"only 'function' and 'custom' tools are supported (got {show(ttype)}); "
                "hosted tools such as web_search, file_search or computer run only at OpenAI",
            )
    return tuple(tools), frozenset(custom)


def _function_tool(tool: dict[str, Any], path: str) -> Tool:
    name = _required_str(tool, "name", path)
    description = _opt(tool.get("description"), as_str, f"{path}.description")
    parameters = _opt(tool.get("parameters"), _json_object, f"{path}.parameters")
    strict = _opt(tool.get("strict"), as_bool, f"{path}.strict")
    return Tool(name, description, parameters, strict)


def _custom_tool(tool: dict[str, Any], path: str) -> Tool:
    name = _required_str(tool, "name", path)
    description = _opt(tool.get("description"), as_str, f"{path}.description") or ""
    parameters = {
        "type": "object",
        "properties": {CUSTOM_TOOL_ARGUMENT: {"type": "string"}},
        "required": [CUSTOM_TOOL_ARGUMENT],
        "additionalProperties": False,
    }
    how = f"Put the tool's whole free-form input in the string argument `{CUSTOM_TOOL_ARGUMENT}`."
    return Tool(name, f"{description}\n\n{how}".strip(), parameters)


def _json_object(value: object, path: str) -> dict[str, Any]:
    """Free-form JSON passed on as it is, within the nesting limit."""
    return bounded(as_object(value, path), path)


def _tool_choice(value: object, tools: tuple[Tool, ...]) -> ToolChoice | None:
    if value is None:
        return None
    if type(value) is str:
        mode = _MODES.get(value)
        if mode is None:
            raise invalid(
                "tool_choice", f"must be 'auto', 'none' or 'required' (got {show(value)})"
            )
        if mode == "required" and not tools:
            raise invalid("tool_choice", "'required' needs a non-empty tools array")
        return mode
    choice = as_object(value, "tool_choice")
    ctype = choice.get("type")
    if ctype != "function" and ctype != "custom":
        raise invalid(
            "tool_choice.type", f"only 'function' and 'custom' are supported (got {show(ctype)})"
        )
    name = _required_str(choice, "name", "tool_choice")
    if not any(t.name == name for t in tools):
        raise invalid("tool_choice.name", f"no tool named {show(name)} in tools")
    return NamedToolChoice(name)


def _format(value: object) -> ResponseFormat | None:
    if value is None:
        return None
    fmt = as_object(value, "text.format")
    ftype = fmt.get("type")
    if ftype == "text" or ftype == "json_object":
        return ResponseFormat(ftype)
    if ftype != "json_schema":
        raise invalid(
            "text.format.type",
            f"must be 'text', 'json_object' or 'json_schema' (got {show(ftype)})",
        )
    name = _required_str(fmt, "name", "text.format")
    spec: dict[str, Any] = {"name": name}
    spec["schema"] = _json_object(fmt.get("schema"), "text.format.schema")
    for key, check in (("strict", as_bool), ("description", as_str)):
        if fmt.get(key) is not None:
            spec[key] = check(fmt[key], f"text.format.{key}")
    return ResponseFormat("json_schema", spec)


def _extra(obj: dict[str, Any], text: dict[str, Any], reasoning: dict[str, Any]) -> dict[str, Any]:
    """The pass-through options, under their Chat Completions names."""
    extra: dict[str, Any] = {}
    effort = reasoning.get("effort")
    if effort is not None:
        extra["reasoning_effort"] = as_str(effort, "reasoning.effort")
    verbosity = text.get("verbosity")
    if verbosity is not None:
        extra["verbosity"] = as_str(verbosity, "text.verbosity")
    metadata = obj.get("metadata")
    if metadata is not None:
        extra["metadata"] = _json_object(metadata, "metadata")
    tier = obj.get("service_tier")
    if tier is not None:
        extra["service_tier"] = as_str(tier, "service_tier")
    store = obj.get("store")
    if store is not None:
        as_bool(store, "store")  # accepted, and never forwarded: OLP keeps nothing upstream
    return extra
