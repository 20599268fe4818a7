"""Small validators for decoded JSON values.

Each takes a value that is known not to be None, and the JSON path to name in the error.
Checks use `type(v) is X`: orjson yields exact built-in types, and this keeps `True` out
of integers and numbers (bool is a subclass of int) at the cost of one comparison.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypeVar

from olp.errors import InvalidRequest

__all__ = [
    "MAX_NESTING",
    "as_bool",
    "as_int",
    "as_number",
    "as_object",
    "as_str",
    "bounded",
    "invalid",
    "kind",
    "model_name",
    "show",
]

_T = TypeVar("_T")
# Unicode's control characters (category Cc): C0, DEL and C1.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

_KINDS: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


# Free-form JSON a client passes through (tool schemas, response formats, pass-through
# options) is re-serialised later, for the upstream request and the cache key, by orjson,
# which refuses more than 254 levels. The client's part gets half of that, so the envelope
# around it always fits; deeper input is refused here, naming the field.
MAX_NESTING = 128


def invalid(path: str, problem: str) -> InvalidRequest:
    """The error rejecting a request; its message starts with the path to the field.

    Callers `raise` it themselves, so every rejection is visible as control flow.
    """
    return InvalidRequest(f"{path}: {problem}", param=path)


def kind(value: object) -> str:
    """The JSON name of a value's type, for "got ..." hints."""
    return _KINDS.get(type(value), type(value).__name__)


def show(value: object) -> str:
    """A short, safe rendering of a client value for an error message."""
    if type(value) is str:
        return repr(value[:40] + "..." if len(value) > 40 else value)
    return kind(value)


def as_bool(value: object, path: str) -> bool:
    if type(value) is not bool:
        raise invalid(path, f"must be a boolean (got {kind(value)})")
    return value


def as_str(value: object, path: str) -> str:
    if type(value) is not str:
        raise invalid(path, f"must be a string (got {kind(value)})")
    return value


def as_object(value: object, path: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise invalid(path, f"must be an object (got {kind(value)})")
    return value


def as_int(value: object, path: str, lo: int | None = None, hi: int | None = None) -> int:
    if type(value) is not int or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise invalid(path, f"must be {_int_range(lo, hi)}{_got(value)}")
    return value


def as_number(value: object, path: str, lo: float, hi: float) -> float:
    # The chained comparison is False for NaN, so NaN and the infinities fail here too.
    if (type(value) is float or type(value) is int) and lo <= value <= hi:
        return float(value)
    raise invalid(path, f"must be a number between {_fmt(lo)} and {_fmt(hi)}{_got(value)}")


def _int_range(lo: int | None, hi: int | None) -> str:
    if lo == 1 and hi is None:
        return "a positive integer"
    if lo is not None and hi is not None:
        return f"an integer between {lo} and {hi}"
    return "an integer"


def _got(value: object) -> str:
    t = type(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 2**63:
        # JSON integers beyond 64 bits arrive as floats: show the integer that was sent.
        return f" (got {int(value)})"
    if t is int or t is float:
        return f" (got {value!r})"
    return f" (got {kind(value)})"


def _fmt(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else str(bound)


def bounded(value: _T, path: str) -> _T:
    """`value`, if its objects and arrays nest at most `MAX_NESTING` levels deep."""
    # Iterative: the parser accepts 1,024 levels, deeper than Python's recursion limit.
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict:
            children: Iterable[object] = node.values()
        elif type(node) is list:
            children = node
        else:
            continue
        if depth > MAX_NESTING:
            raise invalid(
                path, f"nested too deeply (more than {MAX_NESTING} levels of objects and arrays)"
            )
        stack.extend((child, depth + 1) for child in children)
    return value


def model_name(value: object) -> str:
    """A request's `model`: a non-empty string without control characters."""
    if type(value) is not str or not value:
        raise invalid("model", "required (a non-empty string)")
    # A model name ends up in response headers, logs and upstream requests: control
    # characters there would break the response or forge a header, so they are refused.
    if _CONTROL.search(value):
        raise invalid("model", f"must not contain control characters (got {show(value)})")
    return value
