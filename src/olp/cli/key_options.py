"""The options `olp keys create` and `olp keys set` share: allow-lists, limits, expiry.

A limit option takes a positive number, or `none` to remove the limit; `--expires` takes
a time, or `never`. Not given, an option means "none" to `create` and "leave it as it is"
to `set`.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypedDict, TypeVar

import click

from olp.accounts.identity import KeyLimits
from olp.accounts.keystore import KEEP, Keep

__all__ = [
    "ExpiryArg",
    "LimitArg",
    "LimitChanges",
    "ShareArg",
    "changed_expiry",
    "changed_limits",
    "new_expiry",
    "new_limits",
    "setting_options",
]


class _Remove(enum.Enum):
    """`--rpm none`: remove the limit."""

    REMOVE = "none"


REMOVE = _Remove.REMOVE
LimitArg = int | float | _Remove | None  # None: option not given
ExpiryArg = float | _Remove | None  # a unix time; None: option not given
_T = TypeVar("_T")


class LimitChanges(TypedDict):
    """`KeyStore.update`'s limit arguments: KEEP leaves a limit, None removes it."""

    rpm: int | Keep | None
    rpd: int | Keep | None
    rp7d: int | Keep | None
    rp30d: int | Keep | None
    tpd: int | Keep | None
    usd_month: float | Keep | None
    concurrent: int | Keep | None


class _LimitType(click.ParamType[int | float | _Remove]):
    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = "N|none" if kind is int else "USD|none"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | float | _Remove:
        if isinstance(value, int | float | _Remove):
            return value
        text = str(value).strip().lower()
        if text in ("none", "off", "unlimited"):
            return REMOVE
        try:
            number = self.kind(text.removeprefix("$").replace("_", ""))
        except ValueError:
            what = "a whole number" if self.kind is int else "an amount in USD"
            self.fail(f"{value!r} is not {what} (or 'none' to remove the limit)", param, ctx)
        if not number > 0 or number != number or number == float("inf"):
            self.fail(f"{value!r}: a limit must be positive (or 'none' to remove it)", param, ctx)
        return number


_INT = _LimitType(int)
_USD = _LimitType(float)

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(m|min|h|d|w)$")
_UNIT_S = {"m": 60, "min": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


class _ExpiryType(click.ParamType[float | _Remove]):
    """`30d`, `12h`, `2w` from now; a UTC date (the key works through that day); an ISO
    time (UTC unless it says otherwise); or `never`."""

    name = "WHEN|never"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float | _Remove:
        if isinstance(value, float | _Remove):
            return value
        text = str(value).strip().lower()
        if text in ("never", "none", "off"):
            return REMOVE
        if match := _DURATION.match(text):
            return time.time() + float(match[1]) * _UNIT_S[match[2]]
        try:
            return _unix_time(text)
        except ValueError:
            self.fail(
                f"{value!r} is not a time: give a duration (30d, 12h, 2w), a date "
                "(2026-12-31), a UTC time (2026-12-31T18:00) or 'never'",
                param,
                ctx,
            )


def _unix_time(text: str) -> float:
    """A date (the key works through that UTC day) or an ISO time (UTC unless it says)."""
    try:
        day = date.fromisoformat(text)
    except ValueError:
        when = datetime.fromisoformat(text.upper())
        return when.replace(tzinfo=when.tzinfo or UTC).timestamp()
    # The next midnight, by arithmetic: 9999-12-31 has no next date to build.
    start = datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
    return start + timedelta(days=1).total_seconds()


_EXPIRY = _ExpiryType()

ShareArg = tuple[str, float | None]  # (provider, share); None: remove that share


class _ShareType(click.ParamType[ShareArg]):
    """`claude-me=0.25` or `claude-me=25%`: the part of that provider's usage window the
    key may use; `claude-me=none` removes it."""

    name = "PROVIDER=SHARE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> ShareArg:
        if isinstance(value, tuple):
            return value
        provider, sep, amount = str(value).partition("=")
        provider, amount = provider.strip(), amount.strip().lower()
        if not sep or not provider:
            self.fail(f"{value!r}: give PROVIDER=SHARE, e.g. claude-me=0.25 or claude-me=25%")
        if amount in ("none", "off"):
            return provider, None
        try:
            share = float(amount[:-1]) / 100 if amount.endswith("%") else float(amount)
        except ValueError:
            self.fail(f"{value!r}: the share is a fraction (0.25), a percentage (25%) or none")
        if not 0 < share <= 1:
            self.fail(f"{value!r}: a share is above 0 and at most 1 (100%)")
        return provider, share


_SHARE = _ShareType()

_PATTERN_HELP = "comma-separated or repeated; globs allowed (gpt-*); '*' = all"


def setting_options(f: Any) -> Any:
    """--models, --providers, one option per limit (see `KeyLimits`), --share and
    --expires."""
    f = click.option(
        "--share",
        "shares",
        type=_SHARE,
        multiple=True,
        help="Part of a provider's usage window the key may use: claude-me=0.25 (or 25%); "
        "past it the key's requests step over that provider until the window resets; "
        "claude-me=none removes it. Repeat for several providers.",
    )(f)
    f = click.option(
        "--expires",
        type=_EXPIRY,
        help="When the key stops working: 30d, 12h, 2w from now, a date (works through "
        "that day, UTC), 2026-12-31T18:00 (UTC), or never.",
    )(f)
    f = click.option(
        "--concurrent",
        type=_INT,
        help="Requests in progress at once; one more gets 429 until one of them ends.",
    )(f)
    f = click.option(
        "--usd-month",
        type=_USD,
        help="API-equivalent USD per calendar month; the key then only uses models OLP can price.",
    )(f)
    f = click.option("--tpd", type=_INT, help="Tokens per UTC day (prompt + completion).")(f)
    f = click.option(
        "--rp30d", type=_INT, help="Requests in the last 30 UTC days, today included (rolling)."
    )(f)
    f = click.option(
        "--rp7d", type=_INT, help="Requests in the last 7 UTC days, today included (rolling)."
    )(f)
    f = click.option("--rpd", type=_INT, help="Requests per UTC day.")(f)
    f = click.option("--rpm", type=_INT, help="Requests per minute (sliding window).")(f)
    f = click.option("--providers", multiple=True, help=f"Allowed providers: {_PATTERN_HELP}.")(f)
    return click.option("--models", multiple=True, help=f"Allowed models: {_PATTERN_HELP}.")(f)


def new_limits(args: Mapping[str, LimitArg]) -> KeyLimits:
    """The limits a new key gets from its options."""
    return KeyLimits(
        rpm=_int(args["rpm"]),
        rpd=_int(args["rpd"]),
        rp7d=_int(args["rp7d"]),
        rp30d=_int(args["rp30d"]),
        tpd=_int(args["tpd"]),
        usd_month=_float(args["usd_month"]),
        concurrent=_int(args["concurrent"]),
    )


def changed_limits(args: Mapping[str, LimitArg]) -> LimitChanges:
    """What `olp keys set` changes: an option not given keeps its limit."""
    return LimitChanges(
        rpm=_keep(args["rpm"], _int),
        rpd=_keep(args["rpd"], _int),
        rp7d=_keep(args["rp7d"], _int),
        rp30d=_keep(args["rp30d"], _int),
        tpd=_keep(args["tpd"], _int),
        usd_month=_keep(args["usd_month"], _float),
        concurrent=_keep(args["concurrent"], _int),
    )


def new_expiry(arg: ExpiryArg) -> float | None:
    return arg if isinstance(arg, float) else None


def changed_expiry(arg: ExpiryArg) -> float | Keep | None:
    return KEEP if arg is None else new_expiry(arg)


def _int(value: LimitArg) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _float(value: LimitArg) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _keep(value: LimitArg, convert: Callable[[LimitArg], _T]) -> _T | Keep:
    return KEEP if value is None else convert(value)
