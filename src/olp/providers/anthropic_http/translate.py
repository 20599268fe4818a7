"""IR → Anthropic Messages API request. Pure: no I/O.

Where the Messages API differs from the IR, the choices (each a documented behaviour):
- system and developer messages become the top-level `system`, joined by blank lines;
- consecutive turns of one role are merged (Anthropic requires alternation), and tool
  results become `tool_result` blocks of a user turn;
- `max_tokens` is required by Anthropic: DEFAULT_MAX_TOKENS when the client gave none;
- temperature above 1 is clamped to 1 (Anthropic's range is 0..1, OpenAI's 0..2);
- `response_format` has no Anthropic field: it becomes a forced tool call whose input is
  the answer (`structured.py`), or, where that cannot be used, an instruction in the
  system prompt;
- `seed` and most of `request.extra` have no Anthropic equivalent and are dropped
  (`top_k` passes through);
- a request that came in on the Messages wire itself keeps what the IR does not model
  (its `Passthrough`: `thinking`, `context_management`, `output_config`, … and the
  `anthropic-beta` header): those fields are added to the body as the client sent them,
  so an Anthropic-to-Anthropic hop loses nothing;
- an assistant's sealed thinking (`Message.reasoning`) goes back as `thinking` /
  `redacted_thinking` blocks before its content; thinking without a seal is left out
  (Anthropic refuses it);
- a tool result that reports a failure carries `is_error`.
Responses are parsed in `events.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from olp.errors import Failure, ProviderError
from olp.ir import (
    ChatRequest,
    ContentPart,
    ImagePart,
    Message,
    NamedToolChoice,
    Passthrough,
    ResponseFormat,
    TextPart,
    Tool,
    ToolChoice,
    json_default,
)
from olp.providers.anthropic_http.structured import JsonAnswer, json_answer
from olp.wire.anthropic_messages import WIRE

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DROPS",
    "build_payload",
    "encode_payload",
    "json_answer_for",
    "request_headers",
]

DEFAULT_MAX_TOKENS = 4096
# Request features this provider cannot honour (Capabilities.drops, shown by `olp doctor`).
DROPS = ("seed", "extra options other than top_k")
_PASSED_EXTRA = ("top_k",)


def build_payload(
    provider: str, request: ChatRequest, answer: JsonAnswer | None = None
) -> dict[str, Any]:
    """The Messages API body. Raises ProviderError(INVALID_REQUEST) for input it cannot map.

    A malformed request is the client's fault and no other provider would accept it
    either, so INVALID_REQUEST (no fallback) — but as a ProviderError, so the engine
    attributes it to this hop like an upstream 400 rather than to OLP's own validation.
    """
    instruction = None if answer is not None else _format_instruction(request.response_format)
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": _turns(provider, request.messages),
    }
    system = _system(request.messages, instruction)
    if system:
        body["system"] = system
    if request.stream:
        body["stream"] = True
    if answer is not None:
        body["tools"] = [answer.tool_spec()]
        body["tool_choice"] = answer.tool_choice()
    elif request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
        choice = _tool_choice(request.tool_choice, request.parallel_tool_calls)
        if choice is not None:
            body["tool_choice"] = choice
    if request.temperature is not None:
        body["temperature"] = min(request.temperature, 1.0)
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.user:
        body["metadata"] = {"user_id": request.user}
    for key in _PASSED_EXTRA:
        if key in request.extra:
            body[key] = request.extra[key]
    native = _native(request)
    if native is not None:
        for key, value in native.fields.items():
            body.setdefault(key, value)  # (the fields the IR models were set above)
    return body


def json_answer_for(provider: str, request: ChatRequest) -> JsonAnswer | None:
    """How a structured answer is asked for (see `structured`), or None."""
    native = _native(request)
    return json_answer(provider, request, native.fields.get("thinking") if native else None)


def request_headers(request: ChatRequest) -> dict[str, str]:
    """Headers of this request's own: the client's, when it spoke the Messages wire."""
    native = _native(request)
    return dict(native.headers) if native is not None else {}


def _native(request: ChatRequest) -> Passthrough | None:
    passthrough = request.passthrough
    return passthrough if passthrough is not None and passthrough.wire == WIRE else None


def _system(messages: tuple[Message, ...], instruction: str | None) -> str | list[Any]:
    """The system and developer messages: one string, or text blocks when one of them
    carries a prompt-caching breakpoint (a string cannot)."""
    parts = [m for m in messages if m.role in ("system", "developer") and m.text()]
    if not any(m.cache_control for m in parts):
        texts = [m.text() for m in parts]
        return "\n\n".join([*texts, instruction] if instruction else texts)
    blocks = [_marked({"type": "text", "text": m.text()}, m.cache_control) for m in parts]
    if instruction:
        blocks.append({"type": "text", "text": instruction})
    return blocks


def _marked(block: dict[str, Any], mark: Mapping[str, Any] | None) -> dict[str, Any]:
    if mark is not None:
        block["cache_control"] = mark
    return block


def encode_payload(body: Mapping[str, Any]) -> bytes:
    return orjson.dumps(body, default=json_default)


def _turns(provider: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Alternating user/assistant turns; same-role neighbours merged into one."""
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message.role in ("system", "developer"):
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(provider, index, message)
        if turns and turns[-1]["role"] == role:
            previous = turns[-1]
            merged = _as_blocks(previous["content"]) + _as_blocks(blocks)
            if role == "user":
                # Anthropic wants a turn's tool results before any other content.
                merged.sort(key=lambda block: block["type"] != "tool_result")
            previous["content"] = merged
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content


def _blocks(provider: str, index: int, message: Message) -> str | list[dict[str, Any]]:
    """One message's content; a plain string stays a string (smaller, and faithful)."""
    if message.role == "tool":
        return [_tool_result(provider, index, message)]
    content = message.content
    if message.role == "assistant":
        blocks = _thinking(message)
        blocks.extend(_as_blocks(message.text()))
        blocks.extend(_tool_use(provider, index, message))
        if message.cache_control is not None and blocks:
            _marked(blocks[-1], message.cache_control)
        return blocks
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return _parts(provider, index, content)


def _parts(provider: str, index: int, parts: tuple[ContentPart, ...]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        if isinstance(part, TextPart):
            # Anthropic rejects empty text blocks.
            if part.text:
                blocks.append(_marked({"type": "text", "text": part.text}, part.cache_control))
        else:
            image = _image(provider, f"messages[{index}].content[{j}]", part)
            blocks.append(_marked(image, part.cache_control))
    return blocks


def _image(provider: str, where: str, part: ImagePart) -> dict[str, Any]:
    url = part.url
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, *params = header.split(";")
        if not comma or "base64" not in params or not media_type or not data:
            raise _invalid(
                provider,
                f"{where}: an image data URL must look like data:<media type>;base64,<data>",
                f"{where}.image_url",
            )
        # The data itself is not decoded here (megabytes, on the hot path): Anthropic
        # checks it and answers 400, which maps to the same INVALID_REQUEST.
        source = {"type": "base64", "media_type": media_type, "data": data}
    elif url.startswith(("http://", "https://")):
        source = {"type": "url", "url": url}
    else:
        raise _invalid(provider, f"{where}: unsupported image URL scheme", f"{where}.image_url")
    return {"type": "image", "source": source}


def _thinking(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.reasoning:
        if part.encrypted is not None:
            blocks.append({"type": "redacted_thinking", "data": part.encrypted})
        elif part.signature:
            blocks.append({"type": "thinking", "thinking": part.text, "signature": part.signature})
    return blocks


def _tool_use(provider: str, index: int, message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for j, call in enumerate(message.tool_calls):
        where = f"messages[{index}].tool_calls[{j}].function.arguments"
        try:
            arguments = orjson.loads(call.arguments) if call.arguments.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise _invalid(provider, f"{where}: not valid JSON ({exc})", where) from exc
        if not isinstance(arguments, dict):
            raise _invalid(provider, f"{where}: must be a JSON object", where)
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def _tool_result(provider: str, index: int, message: Message) -> dict[str, Any]:
    content = message.content
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
    if isinstance(content, tuple):
        result["content"] = _parts(provider, index, content)
    else:
        result["content"] = content or ""
    if message.is_error:
        result["is_error"] = True
    return _marked(result, message.cache_control)


def _tool(tool: Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    # input_schema is required; a tool without parameters takes an empty object.
    out["input_schema"] = (
        tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}}
    )
    return _marked(out, tool.cache_control)


def _tool_choice(choice: ToolChoice | None, parallel: bool | None) -> dict[str, Any] | None:
    if isinstance(choice, NamedToolChoice):
        out: dict[str, Any] = {"type": "tool", "name": choice.name}
    elif choice == "none":
        # Anthropic accepts no parallelism flag with "none": nothing will be called anyway.
        return {"type": "none"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "auto" or parallel is False:
        out = {"type": "auto"}
    else:
        return None
    if parallel is False:
        out["disable_parallel_tool_use"] = True
    return out


def _format_instruction(rf: ResponseFormat | None) -> str | None:
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_object" or rf.json_schema is None:
        return "Respond with a single valid JSON object and nothing else: no prose, no code fences."
    spec = rf.json_schema
    schema = orjson.dumps(spec.get("schema", {}), default=json_default).decode()
    name = spec.get("name")
    named = f" (named {name!r})" if name else ""
    return (
        f"Respond with a single valid JSON object that conforms to this JSON Schema{named}, "
        f"and nothing else: no prose, no code fences.\n{schema}"
    )


def _invalid(provider: str, message: str, param: str) -> ProviderError:
    return ProviderError(Failure.INVALID_REQUEST, message, provider=provider, param=param)
