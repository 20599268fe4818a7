"""The validated, frozen configuration every other part is built from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "CHILD_ENV_ALLOWLIST",
    "PICK_POLICIES",
    "AuthConfig",
    "CacheConfig",
    "Config",
    "HopConfig",
    "LedgerConfig",
    "LogLevel",
    "PickPolicy",
    "PoolConfig",
    "PriceOverride",
    "ProviderConfig",
    "RoutingConfig",
    "ServerConfig",
    "Timeouts",
]

LogLevel = Literal["error", "warn", "info", "debug"]
DetailPolicy = Literal["owner_only", "all", "none"]
PickPolicy = Literal["reset-soonest", "round-robin", "fill-first", "least-used"]
PICK_POLICIES: tuple[PickPolicy, ...] = ("reset-soonest", "round-robin", "fill-first", "least-used")

# What a CLI child may inherit from OLP's environment; everything else is scrubbed.
CHILD_ENV_ALLOWLIST = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-hop deadlines, in milliseconds.

    connect: TCP/TLS set-up; first_byte: request sent → first body byte (for a CLI: the
    first line of its answer, not its own status lines); idle: longest wait for the next
    piece once the answer flows; total: the hop.
    """

    connect_ms: int = 10_000
    first_byte_ms: int = 60_000
    idle_ms: int = 60_000
    total_ms: int = 600_000


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    type: str
    enabled: bool = True
    models: tuple[str, ...] = ()
    max_concurrent: int | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    cacheable: bool = True
    # HTTP providers.
    base_url: str | None = None
    api_key_env: str | None = None
    # Resolved from `api_key_env` by the loader; never written back, never logged.
    api_key: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict)
    # CLI providers.
    command: str | None = None
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    # The owner's own instructions, added after the client's system prompt on every request
    # this CLI provider answers (what OCP's CLAUDE_SYSTEM_PROMPT did).
    system_prompt: str | None = None
    # Processes started ahead, waiting for their prompt; None: the CLI's own default.
    warm: int | None = None
    # Filled by the loader, not from the file: the owner's home (where CLI credentials
    # live) and the few variables of OLP's own environment a child may inherit
    # (PATH, locale, TLS trust) — nothing else of OLP's environment reaches a child.
    user_home: Path | None = None
    inherited_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Tier-B providers need the owner's recorded consent (see docs/providers.md).
    consent: bool = False
    # "metered": each token costs money (API keys); "subscription": a flat plan (CLIs),
    # whose ledger rows carry the API-equivalent cost. None: decided by the type.
    billing: Literal["metered", "subscription"] | None = None


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """Several providers of one kind (accounts) that take one hop's place; which member
    a request tries first is `pick`'s choice, the others follow within the same hop.

    `chain` and `position` say where it was configured (`routing.chains.<chain>[<position>]`).
    """

    chain: str
    position: int
    members: tuple[str, ...]
    pick: PickPolicy = "reset-soonest"

    @property
    def label(self) -> str:
        return f"{self.chain}[{self.position}]"


@dataclass(frozen=True, slots=True)
class HopConfig:
    provider: str
    model: str
    # Set on each member hop of a pool (a configured pool hop becomes one hop per member).
    pool: PoolConfig | None = None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 3456
    max_body_bytes: int = 5 * 1024 * 1024
    heartbeat_interval_ms: int = 15_000
    # A client must finish sending its request body within this time.
    body_timeout_s: float = 30.0
    # How long in-flight streams may run on after SIGTERM/SIGINT.
    shutdown_grace_s: float = 30.0
    # A request's headers larger than this are refused (431) before they are read whole.
    max_header_bytes: int = 64 * 1024
    # A connection must complete its request headers within this time (from when it
    # opens, so an idle connection that never sends a request is closed after it).
    header_timeout_s: float = 30.0
    # Web pages from these origins ("https://chat.example.com", or "*") may call OLP from a
    # browser (CORS); none by default.
    cors_origins: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AuthConfig:
    allow_anonymous: bool = False
    owner_endpoints_loopback_only: bool = True
    fallback_detail_header_policy: DetailPolicy = "owner_only"
    # GET /metrics from this machine without a key (a local Prometheus needs no secret).
    metrics_loopback_unauthenticated: bool = False


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    chains: Mapping[str, tuple[HopConfig, ...]] = field(default_factory=dict)
    soft_triggers: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # Retry-After on exhaustion when no hop said when it would be back.
    default_retry_after_s: int = 30
    # Upper bound on any cooldown taken from an upstream hint (a bogus 18-day
    # Retry-After must not strand a healthy provider).
    max_cooldown_s: int = 6 * 3600


@dataclass(frozen=True, slots=True)
class CacheConfig:
    enabled: bool = True
    ttl_s: int = 86_400
    max_entries_per_key: int = 1000
    max_entry_bytes: int = 10 * 1024 * 1024
    # Set: the answers live in this Redis, shared by every OLP replica pointing at it
    # (instead of $OLP_HOME/cache.db); each replica keeps its memory front.
    redis_url: str | None = None
    # Prefix of every Redis key OLP writes: two deployments sharing one Redis each get one.
    redis_prefix: str = "olp:"
    # False: only deterministic requests (temperature 0, or a seed) are answered from the
    # cache, so "regenerate" regenerates; True: every request may be (olp.cache.reuse).
    serve_nondeterministic: bool = False


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    """The usage ledger (`$OLP_HOME/ledger.db`): one row per request and per hop attempt.

    enabled=False writes no usage rows at all (for an owner who wants no record); per-key
    limits still count in memory, but their daily and monthly totals then restart at zero
    with the server, since they are seeded from the ledger.
    """

    enabled: bool = True
    # Rows older than this many days are deleted (0: kept for ever). At least
    # MIN_LEDGER_RETENTION_DAYS: the keys' monthly limits are counted from this month's rows.
    retention_days: int = 0


# A month so far is at most 31 days; the keys' limits are seeded from it at start.
MIN_LEDGER_RETENTION_DAYS = 32


@dataclass(frozen=True, slots=True)
class PriceOverride:
    """USD per million tokens, overriding the registry for one model."""

    input: float
    output: float
    cached_input: float | None = None


@dataclass(frozen=True, slots=True)
class Config:
    home: Path
    server: ServerConfig = field(default_factory=ServerConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    providers: Mapping[str, ProviderConfig] = field(default_factory=dict)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    ledger: LedgerConfig = field(default_factory=LedgerConfig)
    # Keyed by model id, or "provider/model" for one provider only.
    pricing: Mapping[str, PriceOverride] = field(default_factory=dict)
    log_level: LogLevel = "info"
    owner_token: str | None = field(default=None, repr=False)
    # Where the providers came from: the config file, or detection on this machine.
    source: Literal["file", "detected"] = "file"
    # Human-readable notes from loading (what was detected, what to do next).
    notes: tuple[str, ...] = ()

    @property
    def config_path(self) -> Path:
        return self.home / "config.json"

    def enabled_providers(self) -> dict[str, ProviderConfig]:
        return {name: p for name, p in self.providers.items() if p.enabled}
