"""`messages` of a Chat Completions request -> IR messages.

Paths in errors are built only when failing: this runs for every message of every request.

Legacy forms are mapped onto the current ones:
- an assistant `function_call {name, arguments}` becomes one tool call whose id is
  `call_` + the first 24 hex digits of sha256(name + "\\0" + arguments);
- a `function` message becomes a `tool` message answering the latest earlier
  `function_call` of that name that has no answer yet, so ids pair up the way upstreams
  require; with no such call its id is `call_` + sha256(name)[:24].

An assistant `refusal` (content part or message field) is kept as text: it is what the
assistant said, and the next turn needs it as context.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import orjson

from olp.ir import ContentPart, ImagePart, Message, TextPart, ToolCall
from olp.wire.openai_chat._checks import bounded, invalid, kind, show

__all__ = ["legacy_call_id", "parse_messages"]

_ROLES_TEXT = "system, developer, user, assistant, tool, function"
# Maps each accepted detail to itself, typed as the IR's literal.
_DETAILS: dict[str, Literal["auto", "low", "high"]] = {
    "auto": "auto",
    "low": "low",
    "high": "high",
}
# Roles whose plain-string message needs no further check, typed as the IR's literal.
_PLAIN_ROLES: dict[str, Literal["system", "developer", "user"]] = {
    "user": "user",
    "system": "system",
    "developer": "developer",
}
_UNSUPPORTED_PARTS = frozenset({"input_audio", "file", "refusal"})
_CONTENT_HINT = "expected a string or an array of content parts"


def legacy_call_id(name: str, arguments: str | None = None) -> str:
    """The deterministic id given to legacy function calls and their results."""
    seed = name if arguments is None else f"{name}\0{arguments}"
    return "call_" + hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def parse_messages(value: object) -> tuple[Message, ...]:
    if type(value) is not list or not value:
        raise invalid("messages", "must be a non-empty array")
    # Legacy function calls still waiting for their `function` answer: name -> id.
    pending: dict[str, str] = {}
    out: list[Message] = []
    append = out.append
    for i, raw in enumerate(value):
        if type(raw) is not dict:
            raise invalid(f"messages[{i}]", f"must be an object (got {kind(raw)})")
        role = raw.get("role")
        content = raw.get("content")
        # (`type(role) is str` first: a list or object role is unhashable.)
        if (
            type(content) is str
            and type(role) is str
            and role in _PLAIN_ROLES
            and "name" not in raw
        ):
            # Most messages: plain text from the user or system; skip the general path.
            append(Message(_PLAIN_ROLES[role], content))
        elif role == "assistant":
            append(_assistant(raw, i, pending))
        elif role == "tool":
            append(_tool(raw, i))
        elif type(role) is str and role in _PLAIN_ROLES:
            append(_simple(raw, i, _PLAIN_ROLES[role]))
        elif role == "function":
            append(_function(raw, i, pending))
        elif role is None:
            raise invalid(f"messages[{i}].role", f"required (one of {_ROLES_TEXT})")
        else:
            raise invalid(f"messages[{i}].role", f"must be one of {_ROLES_TEXT} (got {show(role)})")
    return tuple(out)


def _simple(raw: dict[str, Any], i: int, role: Literal["system", "developer", "user"]) -> Message:
    content = raw.get("content")
    if type(content) is not str:
        # Images only from the user: OpenAI rejects them in system and developer messages.
        content = _parts(content, i, images=role == "user", refusal=False)
    return Message(role, content, name=_name(raw, i))


def _name(raw: dict[str, Any], i: int) -> str | None:
    name = raw.get("name")
    if name is None or type(name) is str:
        return name
    raise invalid(f"messages[{i}].name", f"must be a string (got {kind(name)})")


def _assistant(raw: dict[str, Any], i: int, pending: dict[str, str]) -> Message:
    content = raw.get("content")
    if content is not None and type(content) is not str:
        content = _parts(content, i, images=False, refusal=True) or None
    if content is None:
        refusal = raw.get("refusal")
        if type(refusal) is str and refusal:
            content = refusal
    calls: tuple[ToolCall, ...] = ()
    raw_calls = raw.get("tool_calls")
    if raw_calls is not None:
        calls = _tool_calls(raw_calls, i)
    legacy = raw.get("function_call")
    if legacy is not None:
        if calls:
            raise invalid(f"messages[{i}].function_call", "cannot be combined with tool_calls")
        call = _legacy_call(legacy, i)
        pending[call.name] = call.id
        calls = (call,)
    return Message("assistant", content, name=_name(raw, i), tool_calls=calls)


def _tool(raw: dict[str, Any], i: int) -> Message:
    call_id = raw.get("tool_call_id")
    if type(call_id) is not str or not call_id:
        raise invalid(
            f"messages[{i}].tool_call_id", "required for tool messages (a non-empty string)"
        )
    content = raw.get("content")
    if type(content) is not str:
        content = _parts(content, i, images=False, refusal=False)
    return Message("tool", content, tool_call_id=call_id)


def _function(raw: dict[str, Any], i: int, pending: dict[str, str]) -> Message:
    name = raw.get("name")
    if type(name) is not str or not name:
        raise invalid(f"messages[{i}].name", "required for function messages (the function's name)")
    content = raw.get("content")
    if content is None:
        content = ""
    elif type(content) is not str:
        raise invalid(f"messages[{i}].content", f"must be a string or null (got {kind(content)})")
    call_id = pending.pop(name, None) or legacy_call_id(name)
    return Message("tool", content, tool_call_id=call_id)


def _parts(value: object, i: int, *, images: bool, refusal: bool) -> tuple[ContentPart, ...]:
    if type(value) is not list:
        raise invalid(f"messages[{i}].content", f"{_CONTENT_HINT} (got {kind(value)})")
    if not value and not refusal:
        raise invalid(f"messages[{i}].content", "must not be an empty array")
    return tuple(_part(p, i, j, images, refusal) for j, p in enumerate(value))


def _part(part: object, i: int, j: int, images: bool, refusal: bool) -> ContentPart:
    if type(part) is not dict:
        raise invalid(f"messages[{i}].content[{j}]", f"must be an object (got {kind(part)})")
    ptype = part.get("type")
    if ptype == "text":
        return TextPart(_part_text(part, "text", i, j))
    if ptype == "image_url":
        if not images:
            raise invalid(
                f"messages[{i}].content[{j}].type",
                "image_url parts are only allowed in user messages",
            )
        return _image(part.get("image_url"), i, j)
    if ptype == "refusal" and refusal:
        return TextPart(_part_text(part, "refusal", i, j))
    path = f"messages[{i}].content[{j}].type"
    if type(ptype) is str and ptype in _UNSUPPORTED_PARTS:
        raise invalid(path, f"content part type {ptype!r} is not supported")
    if ptype is None:
        raise invalid(path, "required ('text' or 'image_url')")
    raise invalid(path, f"unknown content part type {show(ptype)} (expected 'text' or 'image_url')")


def _part_text(part: dict[str, Any], key: str, i: int, j: int) -> str:
    text = part.get(key)
    if type(text) is not str:
        raise invalid(f"messages[{i}].content[{j}].{key}", f"must be a string (got {kind(text)})")
    return text


def _image(value: object, i: int, j: int) -> ImagePart:
    path = f"messages[{i}].content[{j}].image_url"
    if type(value) is str:
        url: object = value
        detail: object = None
    elif type(value) is dict:
        url = value.get("url")
        detail = value.get("detail")
        path += ".url"
    else:
        raise invalid(path, f"must be an object with a url, or a URL string (got {kind(value)})")
    if type(url) is not str or not url:
        raise invalid(path, "required (a non-empty URL string)")
    if detail is None:
        return ImagePart(url)
    known = _DETAILS.get(detail) if type(detail) is str else None
    if known is None:
        raise invalid(
            f"messages[{i}].content[{j}].image_url.detail",
            f"must be 'auto', 'low' or 'high' (got {show(detail)})",
        )
    return ImagePart(url, known)


def _tool_calls(value: object, i: int) -> tuple[ToolCall, ...]:
    if type(value) is not list:
        raise invalid(f"messages[{i}].tool_calls", f"must be an array (got {kind(value)})")
    return tuple(_tool_call(c, i, k) for k, c in enumerate(value))


def _tool_call(call: object, i: int, k: int) -> ToolCall:
    if type(call) is not dict:
        raise invalid(f"messages[{i}].tool_calls[{k}]", f"must be an object (got {kind(call)})")
    call_id = call.get("id")
    if type(call_id) is not str or not call_id:
        raise invalid(f"messages[{i}].tool_calls[{k}].id", "required (a non-empty string)")
    ctype = call.get("type")
    if ctype is not None and ctype != "function":
        raise invalid(
            f"messages[{i}].tool_calls[{k}].type",
            f"only 'function' tool calls are supported (got {show(ctype)})",
        )
    fn = call.get("function")
    if type(fn) is not dict:
        raise invalid(
            f"messages[{i}].tool_calls[{k}].function",
            "required (an object with name and arguments)",
        )
    name, arguments = _name_and_arguments(fn, f"messages[{i}].tool_calls[{k}].function")
    return ToolCall(call_id, name, arguments)


def _legacy_call(value: object, i: int) -> ToolCall:
    path = f"messages[{i}].function_call"
    if type(value) is not dict:
        raise invalid(path, f"must be an object with name and arguments (got {kind(value)})")
    name, arguments = _name_and_arguments(value, path)
    return ToolCall(legacy_call_id(name, arguments), name, arguments)


def _name_and_arguments(fn: dict[str, Any], path: str) -> tuple[str, str]:
    name = fn.get("name")
    if type(name) is not str or not name:
        raise invalid(f"{path}.name", "required (a non-empty string)")
    arguments = fn.get("arguments")
    if type(arguments) is str:
        return name, arguments
    # Some clients echo arguments back decoded; the IR keeps the JSON text models emit.
    if type(arguments) is dict:
        return name, orjson.dumps(bounded(arguments, f"{path}.arguments")).decode()
    raise invalid(f"{path}.arguments", f"required (a string of JSON; got {kind(arguments)})")
