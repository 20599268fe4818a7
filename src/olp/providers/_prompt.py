"""Chat requests → the one prompt a CLI takes (pure, deterministic; shared by CLI providers).

A CLI runs one turn on one prompt, so an OpenAI-style conversation is flattened here:

- system and developer messages (plus response-format instructions) become the *system*
  text, for a flag such as `--system-prompt`;
- a conversation that is a single user message is sent as that message's text, verbatim;
- anything longer becomes a transcript with one tagged block per message, oldest first,
  assistant tool calls and tool results written out as text, ending with an instruction to
  answer the last message. The same request always gives the same bytes (cache keys,
  reproducible tests);
- images become a visible placeholder unless the caller keeps them (`keep_images`);
- what a CLI cannot honour is reported in `CliPrompt.dropped` (for logs), and listed by
  each provider in `Capabilities.drops` (for `olp doctor` and the docs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from olp.ir import ChatRequest, ImagePart, Message, ResponseFormat, TextPart

__all__ = [
    "COMMON_CLI_DROPS",
    "DEFAULT_SYSTEM_PROMPT",
    "IMAGE_PLACEHOLDER",
    "CliPrompt",
    "bridges_tools",
    "dropped_features",
    "format_instruction",
    "render_message",
    "serialise",
]

# Request features no CLI provider can pass on: the CLIs take neither sampling parameters
# nor client-side tool definitions (their own tools are switched off), nor several
# choices, nor log probabilities.
COMMON_CLI_DROPS = (
    "temperature",
    "top_p",
    "seed",
    "stop",
    "tools (client-side function calling)",
    "tool_choice",
    "logprobs",
    "frequency_penalty / presence_penalty / logit_bias",
)
# Without a system prompt of the client's, a coding CLI would use its own (a coding
# agent's, with tools and a workspace); an API caller expects a plain assistant.
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
IMAGE_PLACEHOLDER = "[image omitted: this provider cannot receive images]"
_TRANSCRIPT_HEAD = (
    "Below is a conversation between a user and an assistant, oldest message first, each "
    "in a tagged block. Continue it: write only the assistant's next reply to the last "
    "message, without tags."
)


@dataclass(frozen=True, slots=True)
class CliPrompt:
    system: str  # system/developer text + format instructions ("" if none)
    prompt: str  # what goes on stdin
    images: tuple[ImagePart, ...] = ()  # kept images, in order (only with keep_images)
    dropped: tuple[str, ...] = ()  # features of *this* request that were not passed on


def serialise(
    request: ChatRequest, *, keep_images: bool = False, honoured: frozenset[str] = frozenset()
) -> CliPrompt:
    """Flatten `request` for a CLI. `honoured`: feature names the caller passes on itself
    (e.g. {"max_tokens"}), so they are not reported as dropped."""
    system_parts = [m.text() for m in request.messages if m.role in ("system", "developer")]
    instruction = format_instruction(request.response_format)
    if instruction:
        system_parts.append(instruction)
    turns = [m for m in request.messages if m.role not in ("system", "developer")]
    images: list[ImagePart] = []
    if len(turns) == 1 and turns[0].role == "user":
        prompt = _content(turns[0], keep_images, images)
    else:
        blocks = [render_message(m, keep_images, images) for m in turns]
        prompt = "\n\n".join([_TRANSCRIPT_HEAD, *blocks])
    dropped = dropped_features(request, honoured)
    if not keep_images and any(_has_image(m) for m in request.messages):
        dropped = (*dropped, "images")
    return CliPrompt(
        system="\n\n".join(p for p in system_parts if p),
        prompt=prompt,
        images=tuple(images),
        dropped=dropped,
    )


def render_message(message: Message, keep_images: bool, images: list[ImagePart]) -> str:
    """One message as a tagged transcript block."""
    body = _content(message, keep_images, images)
    if message.role == "tool":
        attrs = f' id="{message.tool_call_id}"' if message.tool_call_id else ""
        name = f' name="{message.name}"' if message.name else ""
        return f"<tool_result{attrs}{name}>\n{body}\n</tool_result>"
    lines = [body] if body else []
    for call in message.tool_calls:
        lines.append(f"[tool call {call.id}: {call.name}({call.arguments})]")
    name = f' name="{message.name}"' if message.name else ""
    inner = "\n".join(lines)
    return f"<{message.role}{name}>\n{inner}\n</{message.role}>"


def format_instruction(rf: ResponseFormat | None) -> str:
    """`json_object` / `json_schema` as an instruction ("" for plain text)."""
    if rf is None or rf.type == "text":
        return ""
    if rf.type == "json_object" or rf.json_schema is None:
        return "Respond with a single valid JSON object and nothing else: no prose, no code fences."
    spec = rf.json_schema
    schema = orjson.dumps(spec.get("schema", {}), option=orjson.OPT_SORT_KEYS, default=str)
    name = spec.get("name")
    named = f" (named {name!r})" if name else ""
    return (
        f"Respond with a single valid JSON object that conforms to this JSON Schema{named}, "
        f"and nothing else: no prose, no code fences.\n{schema.decode()}"
    )


def dropped_features(
    request: ChatRequest, honoured: frozenset[str] = frozenset()
) -> tuple[str, ...]:
    """Names of the request's options that a CLI does not pass on, in a fixed order."""
    present: dict[str, Any] = {
        "temperature": request.temperature,
        "top_p": request.top_p,
        "seed": request.seed,
        "stop": request.stop or None,
        "max_tokens": request.max_tokens,
        "tools": request.tools or None,
        "tool_choice": request.tool_choice,
        "parallel_tool_calls": request.parallel_tool_calls,
    }
    names = [k for k, v in present.items() if v is not None and k not in honoured]
    names.extend(k for k in sorted(request.extra) if k not in honoured)
    return tuple(names)


def _content(message: Message, keep_images: bool, images: list[ImagePart]) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # Adjacent text parts join as they are (like Message.text()); an image stands on its
    # own line between them.
    out: list[str] = []
    after_text = False
    for part in content:
        if isinstance(part, TextPart):
            if after_text:
                out[-1] += part.text
            else:
                out.append(part.text)
            after_text = True
            continue
        if keep_images:
            images.append(part)
            out.append(f"[image {len(images)}]")
        else:
            out.append(IMAGE_PLACEHOLDER)
        after_text = False
    return "\n".join(out)


def _has_image(message: Message) -> bool:
    content = message.content
    return isinstance(content, tuple) and any(isinstance(p, ImagePart) for p in content)


def bridges_tools(request: ChatRequest) -> bool:
    """The request's client tools are offered to the model (through OLP's MCP bridge):
    it has tools, and `tool_choice` is not `none`."""
    return bool(request.tools) and request.tool_choice != "none"
