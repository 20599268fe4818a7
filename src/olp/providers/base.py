"""The provider contract (docs/design.md §2).

A provider turns one `ChatRequest` into a stream of IR events for one model, or raises
`ProviderError` with a taxonomy code. It knows nothing about chains, caches, keys or the
HTTP surface: those belong to the engine and the server.

Built-in and third-party providers register the same way: an entry point in the
`olp.providers` group whose object is a `ProviderPlugin`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event, NamedToolChoice
from olp.registry.known import KnownApi, KnownCli

__all__ = [
    "Capabilities",
    "HopContext",
    "Provider",
    "ProviderFactory",
    "ProviderHealth",
    "ProviderPlugin",
    "QuotaSnapshot",
    "Retirable",
    "WarmStats",
]


@dataclass(frozen=True, slots=True)
class Capabilities:
    # "token": content arrives as the model writes it; "message": in one piece at the end.
    streaming: Literal["token", "message"] = "token"
    # Client-side tools (function calling), and which `tool_choice` values come with them
    # ("named": one function by name).
    tools: bool = True
    tool_choices: frozenset[str] = frozenset({"auto", "none", "required", "named"})
    vision: bool = True
    json_mode: bool = True
    sampling: bool = True
    max_concurrent: int | None = None
    cacheable: bool = True
    # Honours Anthropic `cache_control` prompt-caching markers: OLP's own cache steps aside
    # for requests that carry them (docs/design.md §7).
    prompt_cache_markers: bool = False
    # Request features this provider cannot honour and drops (shown by `olp doctor`).
    drops: tuple[str, ...] = ()
    # Quota figures this provider can report in `quota()`: "five_hour" (utilisation of a
    # rolling 5-hour window), "credit_pool". Soft triggers on anything else warn at start.
    quota_signals: tuple[str, ...] = ()
    # Every answer's usage carries the provider's own cost figure (Claude Code's
    # `total_cost_usd`): its hops are priced without a price table (keys with a USD budget).
    reports_cost: bool = False
    # The OpenAI endpoints it serves: "chat" always; "embeddings" and "completions" (the
    # legacy one) are forwarded as they come to providers that speak them.
    endpoints: frozenset[str] = frozenset({"chat"})

    def refusal(self, request: ChatRequest) -> str | None:
        """The request field this provider cannot honour (so must not answer), or None.

        Tools with `tool_choice: "none"` are honoured by any provider: the model may not
        call them, so leaving them out changes nothing.
        """
        if request.forward is not None:
            endpoint = request.forward.endpoint
            return None if endpoint in self.endpoints else endpoint
        choice = request.tool_choice
        if request.tools and choice != "none":
            if not self.tools:
                return "tools"
            kind = "named" if isinstance(choice, NamedToolChoice) else (choice or "auto")
            if kind not in self.tool_choices:
                return "tool_choice"
        format_ = request.response_format
        if format_ is not None and format_.type != "text" and not self.json_mode:
            return "response_format"
        return None


@dataclass(frozen=True, slots=True)
class HopContext:
    """Per-attempt facts a provider may use (for logs and upstream correlation)."""

    request_id: str
    hop: int = 0


@dataclass(frozen=True, slots=True)
class ProviderHealth:
    ok: bool
    # One line per check, e.g. "credentials: OPENAI_API_KEY is set".
    checks: tuple[str, ...] = ()
    # The exact command or setting that fixes a failed check.
    fix: str | None = None
    latency_ms: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaSnapshot:
    """What a provider knows about its own quota right now (None where unknown)."""

    utilisation: float | None = None  # 0..1 of the current (short) window
    reset_at: float | None = None  # unix seconds
    five_hour_utilisation: float | None = None  # 0..1 of a rolling 5-hour window
    five_hour_reset_at: float | None = None  # when that window's use resets (unix seconds)
    credit_pool_utilisation: float | None = None  # 0..1 of a credit pool
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    source: str = "unknown"
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WarmStats:
    """A CLI provider's processes started ahead of their requests (the warm pool)."""

    size: int  # the `warm` setting: most processes waiting at once
    waiting: int  # started, waiting for a prompt
    starting: int  # being started for the pool
    serving: int  # children serving a request now (warm or not)
    hits: int  # requests served by a waiting process
    misses: int  # requests that could have been but found none, and started one
    # Median ms to the answer's first content: from the start of a child started for its
    # request, and from the prompt of a waiting one.
    cold_start_ms_p50: float | None
    warm_start_ms_p50: float | None


@runtime_checkable
class Provider(Protocol):
    name: str
    capabilities: Capabilities

    def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        """Answer `request` (whose `model` is already this hop's model) as IR events.

        Raises `ProviderError` before or during the stream. Cancelling the iteration
        (or `aclose()` on it) must release the upstream call: close the connection,
        kill the process.
        """
        ...

    async def health(self) -> ProviderHealth:
        """Configured, credentials present, reachable — without calling a model."""
        ...

    def quota(self) -> QuotaSnapshot | None:
        """Latest quota knowledge, or None if this provider exposes none."""
        ...

    async def aclose(self) -> None:
        """Release pooled connections and child processes."""
        ...


@runtime_checkable
class Retirable(Protocol):
    """A provider that keeps something only future requests would use (processes
    started ahead): a config reload that replaces it calls `retire()` at once, and
    `aclose()` only once the requests already on it are done."""

    async def retire(self) -> None:
        """Let go of what only new requests would use; requests in flight go on."""
        ...


ProviderFactory = Callable[[ProviderConfig], Provider]


@dataclass(frozen=True, slots=True)
class ProviderPlugin:
    """What an `olp.providers` entry point names."""

    type: str
    factory: ProviderFactory
    # One line for `olp doctor` and the docs.
    summary: str = ""
    # Environment variable conventionally holding this type's API key, if any.
    default_api_key_env: str | None = None
    # What finds this type without a config file (`olp.registry.known`): the subscription
    # CLI it drives, or the well-known servers of its API. Detection, `olp setup` and
    # `olp doctor` read these facts from here and nowhere else.
    cli: KnownCli | None = None
    apis: tuple[KnownApi, ...] = ()
