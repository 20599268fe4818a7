"""JSON for the wire: orjson, with text a client cannot be sent repaired (pure)."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["dumps"]


def dumps(obj: Any) -> bytes:
    """`obj` as JSON; lone surrogates (possible from providers decoding JSON with the
    standard library) cannot be UTF-8, and become U+FFFD rather than fail the answer."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return orjson.dumps(_repair(obj))


def _repair(obj: Any) -> Any:
    """Replace lone surrogates, the one thing orjson refuses in otherwise valid data."""
    if isinstance(obj, str):
        return obj.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(obj, dict):
        return {_repair(k): _repair(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_repair(v) for v in obj]
    return obj
