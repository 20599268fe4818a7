"""An Anthropic Messages request body -> `ChatRequest`, or `InvalidRequest` naming the field.

The Messages API's shapes, as the `anthropic` SDK and Claude Code send them:

- `system` (a string or text blocks) becomes one system message per block, and so does a
  turn whose role is `system`;
- a user turn's `tool_result` blocks become tool messages (in their place among the
  turn's other blocks, which stay one user message per run); an assistant turn's
  `thinking`/`redacted_thinking` blocks become its `reasoning`, its `tool_use` blocks its
  tool calls;
- `stop_sequences`, `temperature`, `top_p`, `max_tokens`, `tools`, `tool_choice` (with
  `disable_parallel_tool_use`) and `metadata.user_id` map to the IR's fields; `top_k`
  travels in `extra`, as on the chat route;
- every other top-level field (`thinking`, `context_management`, `output_config`,
  `service_tier`, …) and the `anthropic-beta` header are kept as they came in the
  request's `Passthrough`: an `anthropic-http` hop sends them on, other hops drop them.

Prompt-caching `cache_control` breakpoints are kept on the part, message (for a system
block, a tool result, an assistant turn's last block) or tool they mark; block citations
are accepted and not carried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from olp.errors import InvalidRequest
from olp.ir import (
    CacheControl,
    ChatRequest,
    ContentPart,
    ImagePart,
    Message,
    NamedToolChoice,
    Passthrough,
    ReasoningPart,
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

__all__ = ["WIRE", "parse_messages_request"]

WIRE = "anthropic_messages"

# Top-level fields read into the IR; any other goes to the `Passthrough`.
_MODELLED = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "stream",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "metadata",
        "tools",
        "tool_choice",
    }
)
_CHOICES: dict[str, ToolChoice] = {"auto": "auto", "any": "required", "none": "none"}
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def parse_messages_request(
    body: bytes, *, headers: Mapping[str, str] | None = None, counting: bool = False
) -> ChatRequest:
    """The request; `counting`: a count_tokens body (no `max_tokens`, never a stream).

    `headers`: the client's headers to keep for an Anthropic upstream (`anthropic-beta`).
    """
    doc = load_object(body)
    return _request(doc, headers or {}, counting)


def _request(doc: dict[str, Any], headers: Mapping[str, str], counting: bool) -> ChatRequest:
    get = doc.get
    model = model_name(get("model"))
    max_tokens = get("max_tokens")
    if max_tokens is not None or not counting:
        if max_tokens is None:
            raise invalid("max_tokens", "required (a positive integer)")
        max_tokens = as_int(max_tokens, "max_tokens", 1)
    tools = _tools(get("tools"))
    tool_choice, parallel = _tool_choice(get("tool_choice"), tools)
    stream = get("stream")
    top_k = get("top_k")
    return ChatRequest(
        model=model,
        messages=(*_system(get("system")), *_messages(get("messages"))),
        stream=False if stream is None or counting else as_bool(stream, "stream"),
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        temperature=_number(get("temperature"), "temperature"),
        top_p=_number(get("top_p"), "top_p"),
        max_tokens=max_tokens,
        stop=_stop_sequences(get("stop_sequences")),
        user=_user(get("metadata")),
        extra={} if top_k is None else {"top_k": as_int(top_k, "top_k", 0)},
        passthrough=_passthrough(doc, headers),
    )


def _number(value: object, path: str) -> float | None:
    return None if value is None else as_number(value, path, 0.0, 1.0)


def _stop_sequences(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise invalid("stop_sequences", f"must be an array of strings (got {kind(value)})")
    return tuple(s for i, s in enumerate(value) if as_str(s, f"stop_sequences[{i}]"))


def _user(metadata: object) -> str | None:
    if metadata is None:
        return None
    user = as_object(metadata, "metadata").get("user_id")
    return None if user is None else as_str(user, "metadata.user_id")


def _passthrough(doc: dict[str, Any], headers: Mapping[str, str]) -> Passthrough | None:
    fields = {k: bounded(v, k) for k, v in doc.items() if k not in _MODELLED and v is not None}
    if not fields and not headers:
        return None
    return Passthrough(WIRE, fields, dict(headers))


# -- system and messages -------------------------------------------------------------


def _system(value: object) -> tuple[Message, ...]:
    if value is None:
        return ()
    if type(value) is str:
        return (Message("system", value),) if value else ()
    if type(value) is not list:
        raise invalid("system", f"must be a string or an array of text blocks (got {kind(value)})")
    out: list[Message] = []
    for i, item in enumerate(value):
        block = as_object(item, f"system[{i}]")
        if block.get("type") != "text":
            raise invalid(f"system[{i}].type", f"must be 'text' (got {show(block.get('type'))})")
        said = as_str(block.get("text"), f"system[{i}].text")
        if said:
            out.append(Message("system", said, cache_control=_mark(block, f"system[{i}]")))
    return tuple(out)


def _mark(block: dict[str, Any], path: str) -> CacheControl | None:
    """A block's `cache_control` breakpoint, if it has one."""
    mark = block.get("cache_control")
    where = f"{path}.cache_control"
    return None if mark is None else bounded(as_object(mark, where), where)


def _system_turn(content: object, path: str) -> list[Message]:
    """A system message among the turns (Claude Code sends them): its text blocks."""
    out: list[Message] = []
    for j, block in enumerate(_blocks(content, path)):
        if block.get("type") != "text":
            raise _unsupported_block(block.get("type"), f"{path}.content[{j}]", "text")
        said = as_str(block.get("text"), f"{path}.content[{j}].text")
        if said:
            mark = _mark(block, f"{path}.content[{j}]")
            out.append(Message("system", said, cache_control=mark))
    return out


def _messages(value: object) -> tuple[Message, ...]:
    if type(value) is not list:
        raise invalid("messages", f"required (an array of messages; got {kind(value)})")
    if not value:
        raise invalid("messages", "must contain at least one message")
    out: list[Message] = []
    for i, item in enumerate(value):
        path = f"messages[{i}]"
        message = as_object(item, path)
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            out.extend(_user_turn(content, path))
        elif role == "assistant":
            out.append(_assistant_turn(content, path))
        elif role == "system":
            out.extend(_system_turn(content, path))
        else:
            raise invalid(
                f"{path}.role", f"must be 'user', 'assistant' or 'system' (got {show(role)})"
            )
    return tuple(out)


def _blocks(content: object, path: str) -> list[dict[str, Any]]:
    """A turn's content as blocks (a string is one text block)."""
    if type(content) is str:
        return [{"type": "text", "text": content}]
    if type(content) is not list:
        raise invalid(f"{path}.content", f"must be a string or an array (got {kind(content)})")
    return [as_object(b, f"{path}.content[{j}]") for j, b in enumerate(content)]


def _user_turn(content: object, path: str) -> list[Message]:
    out: list[Message] = []
    parts: list[ContentPart] = []
    for j, block in enumerate(_blocks(content, path)):
        where = f"{path}.content[{j}]"
        btype = block.get("type")
        if btype == "tool_result":
            if parts:
                out.append(_user_message(parts))
                parts = []
            out.append(_tool_result(block, where))
        elif btype == "text":
            said = as_str(block.get("text"), f"{where}.text")
            parts.append(TextPart(said, _mark(block, where)))
        elif btype == "image":
            parts.append(_image(block, where))
        else:
            raise _unsupported_block(btype, where, "text, image and tool_result")
    if parts or not out:
        out.append(_user_message(parts))
    return out


def _user_message(parts: list[ContentPart]) -> Message:
    if all(type(p) is TextPart and p.cache_control is None for p in parts):
        return Message("user", "".join(p.text for p in parts if isinstance(p, TextPart)))
    return Message("user", tuple(parts))


def _tool_result(block: dict[str, Any], where: str) -> Message:
    tool_use_id = as_str(block.get("tool_use_id"), f"{where}.tool_use_id")
    is_error = block.get("is_error")
    content = block.get("content")
    result: str | tuple[ContentPart, ...]
    if content is None:
        result = ""
    elif type(content) is str:
        result = content
    elif type(content) is list:
        parts: list[ContentPart] = []
        for k, item in enumerate(content):
            inner = as_object(item, f"{where}.content[{k}]")
            if inner.get("type") == "text":
                parts.append(TextPart(as_str(inner.get("text"), f"{where}.content[{k}].text")))
            elif inner.get("type") == "image":
                parts.append(_image(inner, f"{where}.content[{k}]"))
            else:
                raise _unsupported_block(inner.get("type"), f"{where}.content[{k}]", "text, image")
        if all(type(p) is TextPart for p in parts):
            result = "".join(p.text for p in parts if isinstance(p, TextPart))
        else:
            result = tuple(parts)
    else:
        raise invalid(f"{where}.content", f"must be a string or an array (got {kind(content)})")
    return Message(
        "tool",
        result,
        tool_call_id=tool_use_id,
        is_error=False if is_error is None else as_bool(is_error, f"{where}.is_error"),
        cache_control=_mark(block, where),
    )


def _image(block: dict[str, Any], where: str) -> ImagePart:
    source = as_object(block.get("source"), f"{where}.source")
    stype = source.get("type")
    if stype == "base64":
        media = as_str(source.get("media_type"), f"{where}.source.media_type")
        if media not in _IMAGE_TYPES:
            raise invalid(
                f"{where}.source.media_type",
                f"must be one of {', '.join(_IMAGE_TYPES)} (got {show(media)})",
            )
        data = as_str(source.get("data"), f"{where}.source.data")
        if not data:
            raise invalid(f"{where}.source.data", "must not be empty")
        return ImagePart(f"data:{media};base64,{data}", cache_control=_mark(block, where))
    if stype == "url":
        url = as_str(source.get("url"), f"{where}.source.url")
        if not url.startswith(("http://", "https://")):
            raise invalid(f"{where}.source.url", "must be an http(s) URL")
        return ImagePart(url, cache_control=_mark(block, where))
    raise invalid(f"{where}.source.type", f"must be 'base64' or 'url' (got {show(stype)})")


def _assistant_turn(content: object, path: str) -> Message:
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[ReasoningPart] = []
    mark: CacheControl | None = None
    for j, block in enumerate(_blocks(content, path)):
        where = f"{path}.content[{j}]"
        btype = block.get("type")
        mark = _mark(block, where) or mark
        if btype == "text":
            texts.append(as_str(block.get("text"), f"{where}.text"))
        elif btype == "tool_use":
            calls.append(_tool_use(block, where))
        elif btype == "thinking":
            thought = as_str(block.get("thinking"), f"{where}.thinking")
            signature = as_str(block.get("signature"), f"{where}.signature")
            reasoning.append(ReasoningPart(thought, signature or None))
        elif btype == "redacted_thinking":
            data = as_str(block.get("data"), f"{where}.data")
            reasoning.append(ReasoningPart("", encrypted=data))
        else:
            raise _unsupported_block(btype, where, "text, tool_use, thinking, redacted_thinking")
    text = "".join(texts)
    return Message(
        "assistant",
        text if text or not calls else None,
        tool_calls=tuple(calls),
        reasoning=tuple(reasoning),
        cache_control=mark,
    )


def _tool_use(block: dict[str, Any], where: str) -> ToolCall:
    call_id = as_str(block.get("id"), f"{where}.id")
    name = as_str(block.get("name"), f"{where}.name")
    arguments = bounded(as_object(block.get("input"), f"{where}.input"), f"{where}.input")
    return ToolCall(call_id, name, orjson.dumps(arguments).decode())


def _unsupported_block(btype: object, where: str, allowed: str) -> InvalidRequest:
    if btype is None:
        return invalid(f"{where}.type", f"required (one of {allowed})")
    return invalid(f"{where}.type", f"OLP accepts {allowed} blocks here (got {show(btype)})")


# -- tools ---------------------------------------------------------------------------


def _tools(value: object) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise invalid("tools", f"must be an array (got {kind(value)})")
    return tuple(_tool(t, f"tools[{i}]") for i, t in enumerate(value))


def _tool(value: object, path: str) -> Tool:
    tool = as_object(value, path)
    ttype = tool.get("type")
    if ttype is not None and ttype != "custom":
        raise invalid(
            f"{path}.type",
            f"only client tools (with an input_schema) are supported (got {show(ttype)})",
        )
    name = as_str(tool.get("name"), f"{path}.name")
    if not name:
        raise invalid(f"{path}.name", "must not be empty")
    description = tool.get("description")
    where = f"{path}.input_schema"
    schema = bounded(as_object(tool.get("input_schema"), where), where)
    return Tool(
        name,
        None if description is None else as_str(description, f"{path}.description"),
        schema,
        cache_control=_mark(tool, path),
    )


def _tool_choice(value: object, tools: tuple[Tool, ...]) -> tuple[ToolChoice | None, bool | None]:
    if value is None:
        return None, None
    choice = as_object(value, "tool_choice")
    ctype = choice.get("type")
    disable = choice.get("disable_parallel_tool_use")
    parallel = (
        None if disable is None else not as_bool(disable, "tool_choice.disable_parallel_tool_use")
    )
    if ctype == "tool":
        name = as_str(choice.get("name"), "tool_choice.name")
        if all(t.name != name for t in tools):
            raise invalid("tool_choice.name", f"names no tool in tools (got {show(name)})")
        return NamedToolChoice(name), parallel
    if type(ctype) is str and ctype in _CHOICES:
        return _CHOICES[ctype], parallel
    raise invalid(
        "tool_choice.type", f"must be 'auto', 'any', 'tool' or 'none' (got {show(ctype)})"
    )
