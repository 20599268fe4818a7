"""Reading JSON from an upstream or a CLI that may not have the shape it should.

An upstream's answer is untrusted input: a field documented as an object may be null, a
list may be a string, a token count may be a string or 1e300. Parsers read such fields
through these helpers and get a value of the promised type, so a surprise becomes a
missing value or a clear `malformed response` error, never a TypeError deep in a parser
(which the engine could only report as a provider bug).
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["count", "items", "json_text", "obj", "text", "usd"]

# Larger token counts are not counts but garbage (and would not fit a ledger column).
_MAX_COUNT = 2**53
# Nor is a larger cost for one request; counted, it would end a key's monthly budget.
_MAX_USD = 1e6


def obj(value: object) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def items(value: object) -> list[Any]:
    """`value` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def text(value: object) -> str | None:
    """`value` if it is a string, else None."""
    return value if isinstance(value, str) else None


def count(value: object) -> int:
    """A token count: a non-negative number below 2**53 (a float is truncated), else 0."""
    # By exact type: JSON gives int or float, and a bool (a subclass of int) is no count.
    # (Asked several times per answer, on the hot path.)
    if type(value) is int:
        return value if 0 <= value < _MAX_COUNT else 0
    if type(value) is float:
        return int(value) if 0 <= value < _MAX_COUNT else 0  # (NaN and infinity fail this)
    return 0


def usd(value: object) -> float | None:
    """A cost an upstream reported: a non-negative number under $1M, else None (unknown)."""
    if type(value) is int or type(value) is float:
        return float(value) if 0 <= value < _MAX_USD else None
    return None


def json_text(value: object) -> str:
    """`value` as JSON text (`{}` for none): tool-call arguments sent as an object."""
    try:
        return orjson.dumps(value or {}).decode()
    except TypeError:  # an integer past 64 bits (which orjson cannot write), or worse
        return str(value)
