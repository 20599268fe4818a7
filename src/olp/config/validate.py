"""A small reader for untrusted JSON config that remembers where it is.

Every problem is recorded with its JSON path (`providers.alpha.base_url: not a URL`) and
reading goes on, so one run of `olp config check` lists all of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

from olp.errors import ConfigError

__all__ = ["ConfigProblems", "Reader", "collecting"]

T = TypeVar("T")
_MISSING: Any = object()
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigProblems(ConfigError):
    """Several config problems at once; `problems` lists each with its path."""

    def __init__(self, source: str, problems: list[ConfigError]) -> None:
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__("", f"{source} has {len(problems)} problem(s):\n{lines}")
        self.problems = problems


class Reader:
    """Walks one JSON object; `done()` reports keys nobody asked for."""

    def __init__(self, data: object, path: str, problems: list[ConfigError]) -> None:
        self.path = path
        self.problems = problems
        self.seen: set[str] = set()
        if isinstance(data, dict):
            self.data: dict[str, Any] = data
        else:
            self.data = {}
            if data is not None:
                self.fail(path, f"must be an object, got {_kind(data)}")

    def fail(self, path: str, reason: str) -> None:
        self.problems.append(ConfigError(path, reason))

    def sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str) -> Any:
        self.seen.add(key)
        return self.data.get(key, _MISSING)

    def child(self, key: str) -> Reader:
        value = self.raw(key)
        return Reader(None if value is _MISSING else value, self.sub(key), self.problems)

    def _typed(self, key: str, default: T, check: Callable[[Any], str | None]) -> T:
        value = self.raw(key)
        if value is _MISSING:
            return default
        problem = check(value)
        if problem:
            self.fail(self.sub(key), problem)
            return default
        return value  # type: ignore[no-any-return]

    def boolean(self, key: str, default: bool) -> bool:
        return self._typed(key, default, _want_bool)

    def string(self, key: str, default: T, *, choices: tuple[str, ...] = ()) -> str | T:
        def check(v: Any) -> str | None:
            if not isinstance(v, str) or not v:
                return f"must be a non-empty string, got {_kind(v)}"
            if choices and v not in choices:
                return f"must be one of {', '.join(choices)}; got {v!r}"
            return None

        return self._typed(key, default, check)

    def integer(self, key: str, default: int, *, lo: int, hi: int | None = None) -> int:
        def check(v: Any) -> str | None:
            if isinstance(v, bool) or not isinstance(v, int):
                return f"must be an integer, got {_kind(v)}"
            if v < lo or (hi is not None and v > hi):
                return f"must be between {lo} and {hi}" if hi is not None else f"must be ≥ {lo}"
            return None

        return self._typed(key, default, check)

    def number(self, key: str, default: float, *, lo: float, hi: float | None = None) -> float:
        def check(v: Any) -> str | None:
            if isinstance(v, bool) or not isinstance(v, int | float):
                return f"must be a number, got {_kind(v)}"
            if v < lo or (hi is not None and v > hi):
                return (
                    f"must be between {lo:g} and {hi:g}" if hi is not None else f"must be ≥ {lo:g}"
                )
            return None

        return float(self._typed(key, default, check))

    def url(self, key: str) -> str | None:
        value = self.string(key, None)
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            self.fail(self.sub(key), f"not a URL (expected http:// or https://…), got {value!r}")
            return None
        return value.rstrip("/")

    def env_name(self, key: str) -> str | None:
        value = self.string(key, None)
        if value is not None and not _ENV_NAME.match(value):
            self.fail(self.sub(key), f"not an environment variable name: {value!r}")
            return None
        return value

    def str_list(self, key: str) -> tuple[str, ...]:
        value = self.raw(key)
        if value is _MISSING:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(self.sub(key), "must be an array of non-empty strings")
            return ()
        return tuple(value)

    def str_map(self, key: str) -> dict[str, str]:
        value = self.raw(key)
        if value is _MISSING:
            return {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            self.fail(self.sub(key), "must be an object of string values")
            return {}
        return dict(value)

    def items(self, key: str) -> Iterator[tuple[str, Reader]]:
        """Each entry of an object of objects, as (name, reader)."""
        for name, value in self.child(key).entries():
            yield name, Reader(value, f"{self.sub(key)}.{name}", self.problems)

    def entries(self) -> Iterator[tuple[str, Any]]:
        self.seen.update(self.data)
        yield from self.data.items()

    def done(self, hint: Mapping[str, str] | None = None) -> None:
        for key in self.data:
            if key not in self.seen:
                extra = (hint or {}).get(key, "")
                self.fail(self.sub(key), "unknown key" + (f" ({extra})" if extra else ""))


@contextmanager
def collecting(source: str) -> Iterator[list[ConfigError]]:
    problems: list[ConfigError] = []
    yield problems
    if problems:
        raise ConfigProblems(source, problems)


def _want_bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {_kind(v)}"


def _kind(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return f"the number {v!r}"
    if isinstance(v, str):
        return f"the string {v!r}" if len(v) < 40 else "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"
