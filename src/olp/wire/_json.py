"""JSON for the wire: a request body read as one JSON object, and answers written with
orjson, text a client cannot be sent repaired (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from olp.errors import InvalidRequest
from olp.ir import json_default

__all__ = ["dumps", "load_object"]


def load_object(body: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object; InvalidRequest says what it is not."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"Invalid JSON in request body: {exc}") from None
    if type(doc) is not dict:
        raise InvalidRequest("Request body must be a JSON object")
    return doc


def dumps(obj: Any) -> bytes:
    """`obj` (IR Mappings too) as JSON; lone surrogates (possible from providers decoding
    JSON with the standard library) cannot be UTF-8, and become U+FFFD rather than fail
    the answer."""
    try:
        return orjson.dumps(obj, default=json_default)
    except orjson.JSONEncodeError:
        return orjson.dumps(_repair(obj), default=json_default)


def _repair(obj: Any) -> Any:
    """Replace lone surrogates, the one thing orjson refuses in otherwise valid data."""
    if isinstance(obj, str):
        return obj.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(obj, Mapping):  # (IR data holds Mappings: schemas, extras)
        return {_repair(k): _repair(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_repair(v) for v in obj]
    return obj
