"""An estimate of a request's input tokens, for `/v1/messages/count_tokens` (pure).

OLP cannot run every upstream's tokenizer, and a chain's hops may use different ones, so
the count is an estimate on purpose: about one token per 3.5 bytes of UTF-8 text (what
Claude's and GPT's tokenizers give for English prose and code, within ~20 %), over
everything the model reads: system and message text, tool calls and results, the tools'
names, descriptions and schemas, plus a few tokens of framing per message and tool;
each image counts as `IMAGE_TOKENS` (the pixels are not decoded).
"""

from __future__ import annotations

import math

import orjson

from olp.ir import ChatRequest, ImagePart, Message, json_default

__all__ = ["IMAGE_TOKENS", "estimate_input_tokens"]

BYTES_PER_TOKEN = 3.5
# Anthropic's own rule is width x height / 750; a large image is resized to about 1.15
# megapixels, which is ~1,600 tokens: an image of unknown size counts as that.
IMAGE_TOKENS = 1600
_PER_MESSAGE = 4
_PER_TOOL = 8


def estimate_input_tokens(request: ChatRequest) -> int:
    size = 0
    images = 0
    for message in request.messages:
        text_size, message_images = _message_size(message)
        size += text_size
        images += message_images
    for tool in request.tools:
        size += len(tool.name) + len((tool.description or "").encode())
        if tool.parameters is not None:
            size += len(orjson.dumps(tool.parameters, default=json_default))
    framing = _PER_MESSAGE * len(request.messages) + _PER_TOOL * len(request.tools)
    return math.ceil(size / BYTES_PER_TOKEN) + framing + images * IMAGE_TOKENS


def _message_size(message: Message) -> tuple[int, int]:
    size = len(message.text().encode("utf-8", "surrogatepass"))
    for call in message.tool_calls:
        size += len(call.name) + len(call.arguments.encode("utf-8", "surrogatepass"))
    for part in message.reasoning:
        size += len(part.text.encode("utf-8", "surrogatepass"))
    content = message.content
    images = (
        sum(1 for p in content if isinstance(p, ImagePart)) if isinstance(content, tuple) else 0
    )
    return size, images
