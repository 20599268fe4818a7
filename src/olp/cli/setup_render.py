"""config.json as `olp setup` writes it: valid JSON laid out for people to read and edit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["render_config"]


def render_config(config: Mapping[str, Any], *, width: int = 96) -> bytes:
    """config.json text for people: 2-space indents, but a hop or a short list on one line
    (`{"provider": "claude", "model": "claude-sonnet-4-5"}`), so a chain reads as a chain."""
    return (_render(config, 0, width) + "\n").encode()


def _render(value: Any, depth: int, width: int) -> str:
    if not isinstance(value, dict | list) or not value:
        return orjson.dumps(value).decode()
    flat = _inline(value)
    if flat is not None and 2 * depth + len(flat) <= width:
        return flat
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, list):
        items = [inner + _render(v, depth + 1, width) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    members = [
        f"{inner}{orjson.dumps(k).decode()}: {_render(v, depth + 1, width).lstrip()}"
        for k, v in value.items()
    ]
    return "{\n" + ",\n".join(members) + "\n" + pad + "}"


def _inline(value: dict[str, Any] | list[Any]) -> str | None:
    """One line for a container of scalars only; None for anything nested deeper."""
    parts = value.values() if isinstance(value, dict) else value
    if any(isinstance(v, dict | list) for v in parts):
        return None
    if isinstance(value, list):
        return "[" + ", ".join(orjson.dumps(v).decode() for v in value) + "]"
    items = (f"{orjson.dumps(k).decode()}: {orjson.dumps(v).decode()}" for k, v in value.items())
    return "{" + ", ".join(items) + "}"
