"""`$OLP_HOME/config.json` + environment → a frozen, validated `Config`.

This package is the only place OLP reads the environment: secrets are resolved here
from the variables the config names (`api_key_env`) and handed on inside the Config.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast, get_args
from urllib.parse import urlsplit

import orjson

from olp.config.detect import detect_providers
from olp.config.model import (
    CHILD_ENV_ALLOWLIST,
    MIN_LEDGER_RETENTION_DAYS,
    PICK_POLICIES,
    AuthConfig,
    CacheConfig,
    Config,
    DetailPolicy,
    HopConfig,
    LedgerConfig,
    LogLevel,
    PickPolicy,
    PoolConfig,
    PriceOverride,
    ProviderConfig,
    RoutingConfig,
    ServerConfig,
    Timeouts,
)
from olp.config.validate import Reader, collecting
from olp.errors import ConfigError
from olp.observability import redacted_url
from olp.registry.known import Known

__all__ = ["PROVIDER_NAME_RULE", "SOFT_TRIGGER_KEYS", "is_provider_name", "load_config", "olp_home"]

_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PROVIDER_NAME_RULE = "provider names use letters, digits, '_', '.', '-' (no '/')"
_VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Each waiting CLI holds 100-300 MB: more than this is a typo, not a plan.
_MAX_WARM = 32
_REDIS_SCHEMES = ("redis", "rediss", "unix")
SOFT_TRIGGER_KEYS = (
    "daily_request_count_threshold",
    "five_hour_window_percent_threshold",
    "credit_pool_percent_threshold",
    "five_hour_capacity",
)
_SECRET_HINT = {
    "api_key": "secrets never live in config.json: set api_key_env to the name of an "
    "environment variable holding the key",
}


def olp_home(env: Mapping[str, str]) -> Path:
    return Path(env.get("OLP_HOME") or Path.home() / ".olp").expanduser()


def load_config(
    env: Mapping[str, str] | None = None,
    *,
    known: Known | None = None,
    detect_local_servers: bool = True,
) -> Config:
    """Read and validate the configuration; raise ConfigError naming every problem.

    With no config file, the providers are detected on this machine from what the
    installed plugins declare (`known`, collected by `olp.providers.loader`); without
    `known` nothing is detected.
    """
    env = os.environ if env is None else env
    home = olp_home(env)
    path = home / "config.json"
    if path.exists():
        config = _from_file(path, home, env)
    else:
        providers, notes = detect_providers(env, known or Known(), probe_local=detect_local_servers)
        config = Config(home=home, providers=providers, source="detected", notes=tuple(notes))
    return _apply_env(config, env)


def _from_file(path: Path, home: Path, env: Mapping[str, str]) -> Config:
    try:
        # A UTF-8 byte order mark is what Windows Notepad writes first; JSON has no use for it.
        data = orjson.loads(path.read_bytes().removeprefix(codecs.BOM_UTF8))
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise ConfigError(str(path), f"invalid JSON: {exc}") from exc
    with collecting(str(path)) as problems:
        root = Reader(data, "", problems)
        root.raw("$schema")  # editors' schema hint; allowed and ignored
        server = _server(root.child("server"))
        auth = _auth(root.child("auth"))
        providers = _providers(root, env)
        routing = _routing(root.child("routing"), providers)
        cache = _cache(root.child("cache"), env)
        ledger = _ledger(root.child("ledger"))
        pricing = _pricing(root)
        if "*" in server.cors_origins and auth.allow_anonymous:
            root.fail(
                "server.cors_origins",
                "'*' lets every web page call OLP, allowed only when keys are required "
                "(auth.allow_anonymous is true): name the origins instead",
            )
        root.done()
    return Config(
        home=home,
        server=server,
        auth=auth,
        providers=providers,
        routing=routing,
        cache=cache,
        ledger=ledger,
        pricing=pricing,
        source="file",
    )


def _server(r: Reader) -> ServerConfig:
    d = ServerConfig()
    server = ServerConfig(
        host=r.string("host", d.host),
        port=r.integer("port", d.port, lo=1, hi=65535),
        max_body_bytes=r.integer("max_body_bytes", d.max_body_bytes, lo=1024),
        heartbeat_interval_ms=r.integer("heartbeat_interval_ms", d.heartbeat_interval_ms, lo=100),
        body_timeout_s=r.number("body_timeout_s", d.body_timeout_s, lo=0.1),
        shutdown_grace_s=r.number("shutdown_grace_s", d.shutdown_grace_s, lo=0),
        max_header_bytes=r.integer("max_header_bytes", d.max_header_bytes, lo=1024),
        header_timeout_s=r.number("header_timeout_s", d.header_timeout_s, lo=0.1),
        cors_origins=_cors_origins(r),
    )
    r.done()
    return server


def _cors_origins(r: Reader) -> tuple[str, ...]:
    origins = r.str_list("cors_origins")
    for i, origin in enumerate(origins):
        if origin == "*":
            continue
        parts = urlsplit(origin)
        if (
            parts.scheme not in ("http", "https")
            or not parts.netloc
            or origin != (f"{parts.scheme}://{parts.netloc}")
        ):
            r.fail(
                f"{r.sub('cors_origins')}[{i}]",
                f"must be an origin such as 'https://chat.example.com' (scheme, host and "
                f"optional port, no path or trailing slash) or '*' (got {origin!r})",
            )
    return origins


def _auth(r: Reader) -> AuthConfig:
    d = AuthConfig()
    policy: Any = r.string(
        "fallback_detail_header_policy",
        d.fallback_detail_header_policy,
        choices=get_args(DetailPolicy),
    )
    auth = AuthConfig(
        allow_anonymous=r.boolean("allow_anonymous", d.allow_anonymous),
        owner_endpoints_loopback_only=r.boolean(
            "owner_endpoints_loopback_only", d.owner_endpoints_loopback_only
        ),
        fallback_detail_header_policy=policy,
        metrics_loopback_unauthenticated=r.boolean(
            "metrics_loopback_unauthenticated", d.metrics_loopback_unauthenticated
        ),
    )
    r.done()
    return auth


def is_provider_name(name: str) -> bool:
    """Whether `name` may name a provider in config.json (`PROVIDER_NAME_RULE`, at most 64)."""
    return _PROVIDER_NAME.match(name) is not None


def _providers(root: Reader, env: Mapping[str, str]) -> dict[str, ProviderConfig]:
    providers: dict[str, ProviderConfig] = {}
    for name, r in root.items("providers"):
        if not is_provider_name(name):
            r.fail(r.path, PROVIDER_NAME_RULE)
            continue
        providers[name] = _provider(name, r, env)
    return providers


def _provider(name: str, r: Reader, env: Mapping[str, str]) -> ProviderConfig:
    ptype = r.string("type", "")
    if not ptype:
        r.fail(r.sub("type"), 'required (e.g. "openai-http", "anthropic-http", "claude-cli")')
    api_key_env = r.env_name("api_key_env")
    max_concurrent = (
        r.integer("max_concurrent", 0, lo=1, hi=10_000) if r.has("max_concurrent") else 0
    )
    provider = ProviderConfig(
        name=name,
        type=ptype,
        enabled=r.boolean("enabled", True),
        models=r.str_list("models"),
        max_concurrent=max_concurrent or None,
        timeouts=_timeouts(r.child("timeouts")),
        cacheable=r.boolean("cacheable", True),
        base_url=r.url("base_url"),
        api_key_env=api_key_env,
        api_key=env.get(api_key_env) if api_key_env else None,
        headers=r.str_map("headers"),
        command=r.string("command", None),
        system_prompt=r.string("system_prompt", None),
        warm=r.integer("warm", 0, lo=0, hi=_MAX_WARM) if r.has("warm") else None,
        env=_child_env(r, env),
        consent=r.boolean("consent", False),
        billing=cast(Any, r.string("billing", None, choices=("metered", "subscription"))),
        user_home=_credentials_home(r, env),
        inherited_env={k: env[k] for k in CHILD_ENV_ALLOWLIST if k in env},
    )
    r.done(_SECRET_HINT)
    return provider


def _user_home(env: Mapping[str, str]) -> Path | None:
    home = env.get("HOME")
    return Path(home) if home else None


def _credentials_home(r: Reader, env: Mapping[str, str]) -> Path | None:
    """Whose CLI login a CLI provider uses: `credentials_home` (a second account, logged
    in under its own home), else the owner's HOME."""
    home = _user_home(env)
    given = r.string("credentials_home", None)
    if given is None:
        return home
    path = Path(given)
    if given == "~" or given.startswith("~/"):
        if home is None:
            r.fail(r.sub("credentials_home"), "starts with ~ but HOME is not set")
            return None
        path = home / given[2:]
    if not path.is_absolute():
        r.fail(
            r.sub("credentials_home"), f"must be an absolute path or start with ~/; got {given!r}"
        )
        return None
    return path


def _child_env(r: Reader, env: Mapping[str, str]) -> dict[str, str]:
    """Extra variables for a CLI child; `${VAR}` takes a value from OLP's environment."""
    resolved: dict[str, str] = {}
    for key, value in r.str_map("env").items():
        expanded = _expand(r, f"{r.sub('env')}.{key}", value, env)
        if expanded is not None:
            resolved[key] = expanded
    return resolved


def _expand(r: Reader, path: str, value: str, env: Mapping[str, str]) -> str | None:
    """`value` with each `${VAR}` replaced from OLP's environment; None (and a problem)
    if one is unset."""
    missing = [m for m in _VAR_REF.findall(value) if m not in env]
    if missing:
        r.fail(path, f"refers to unset variable(s): {', '.join(missing)}")
        return None
    return _VAR_REF.sub(lambda m: env[m.group(1)], value)


def _timeouts(r: Reader) -> Timeouts:
    d = Timeouts()
    timeouts = Timeouts(
        connect_ms=r.integer("connect_ms", d.connect_ms, lo=1),
        first_byte_ms=r.integer("first_byte_ms", d.first_byte_ms, lo=1),
        idle_ms=r.integer("idle_ms", d.idle_ms, lo=1),
        total_ms=r.integer("total_ms", d.total_ms, lo=1),
    )
    r.done()
    return timeouts


def _routing(r: Reader, providers: Mapping[str, ProviderConfig]) -> RoutingConfig:
    d = RoutingConfig()
    chains: dict[str, tuple[HopConfig, ...]] = {}
    for model, hops in r.child("chains").entries():
        chains[model] = _chain(r, f"{r.sub('chains')}.{model}", hops, providers)
    soft: dict[str, dict[str, float]] = {}
    for name, t in r.items("soft_triggers"):
        if name not in providers:
            t.fail(t.path, f"unknown provider {name!r} ({_known(providers)})")
        soft[name] = {
            key: t.number(key, 0, lo=0, hi=100 if key.endswith("percent_threshold") else None)
            for key in SOFT_TRIGGER_KEYS
            if t.has(key)
        }
        t.done()
    routing = RoutingConfig(
        chains=chains,
        soft_triggers=soft,
        default_retry_after_s=r.integer("default_retry_after_s", d.default_retry_after_s, lo=1),
        max_cooldown_s=r.integer("max_cooldown_s", d.max_cooldown_s, lo=1),
    )
    r.done()
    return routing


def _chain(
    r: Reader, path: str, hops: object, providers: Mapping[str, ProviderConfig]
) -> tuple[HopConfig, ...]:
    if not isinstance(hops, list) or not hops:
        r.fail(path, 'must be a non-empty array of {"provider", "model"} hops')
        return ()
    chain: list[HopConfig] = []
    model = path.rsplit(".", 1)[-1]
    for i, raw in enumerate(hops):
        hop = Reader(raw, f"{path}[{i}]", r.problems)
        if hop.has("pool"):
            chain.extend(_pool_hops(hop, model, i, providers))
            hop.done()
            continue
        provider = hop.string("provider", "")
        if not provider:
            hop.fail(hop.sub("provider"), 'required (or "pool": [provider, …])')
        elif provider not in providers:
            hop.fail(hop.sub("provider"), f"unknown provider {provider!r} ({_known(providers)})")
        chain.append(HopConfig(provider=provider, model=hop.string("model", model)))
        hop.done()
    return tuple(chain)


def _pool_hops(
    hop: Reader, chain: str, position: int, providers: Mapping[str, ProviderConfig]
) -> list[HopConfig]:
    """A pool hop, `{"pool": [provider, …], "model", "pick"}`: one hop per member."""
    members = hop.str_list("pool")
    path = hop.sub("pool")
    if not members:
        hop.fail(path, "must list at least one provider")
    for name in members:
        if name not in providers:
            hop.fail(path, f"unknown provider {name!r} ({_known(providers)})")
    if len(set(members)) != len(members):
        hop.fail(path, "names a provider twice")
    kinds = {providers[name].type for name in members if name in providers}
    if len(kinds) > 1:
        hop.fail(path, f"members must be of one provider type; got {', '.join(sorted(kinds))}")
    if hop.has("provider"):
        hop.fail(hop.sub("provider"), 'a hop has either "provider" or "pool", not both')
        hop.raw("provider")
    pick = hop.string("pick", "reset-soonest", choices=PICK_POLICIES)
    model = hop.string("model", chain)
    pool = PoolConfig(chain, position, members, cast(PickPolicy, pick))
    return [HopConfig(provider=name, model=model, pool=pool) for name in members]


def _cache(r: Reader, env: Mapping[str, str]) -> CacheConfig:
    d = CacheConfig()
    cache = CacheConfig(
        enabled=r.boolean("enabled", d.enabled),
        ttl_s=r.integer("ttl_s", d.ttl_s, lo=0),
        max_entries_per_key=r.integer("max_entries_per_key", d.max_entries_per_key, lo=1),
        max_entry_bytes=r.integer("max_entry_bytes", d.max_entry_bytes, lo=1),
        redis_url=_redis_url(r, env),
        redis_prefix=r.string("redis_prefix", d.redis_prefix),
        serve_nondeterministic=r.boolean("serve_nondeterministic", d.serve_nondeterministic),
    )
    r.done()
    return cache


def _redis_url(r: Reader, env: Mapping[str, str]) -> str | None:
    # A password belongs in the environment, not in config.json: "${REDIS_URL}" or
    # "redis://:${REDIS_PASSWORD}@host:6379/0".
    written = r.string("redis_url", None)
    value = None if written is None else _expand(r, r.sub("redis_url"), written, env)
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in _REDIS_SCHEMES or not (parts.netloc or parts.path):
        r.fail(
            r.sub("redis_url"),
            f"not a Redis URL (expected redis://host:port/db, rediss://… or unix://…), "
            f"got {redacted_url(value)!r}",
        )
        return None
    return value


def _ledger(r: Reader) -> LedgerConfig:
    d = LedgerConfig()
    ledger = LedgerConfig(
        enabled=r.boolean("enabled", d.enabled),
        retention_days=r.integer("retention_days", d.retention_days, lo=0),
    )
    if 0 < ledger.retention_days < MIN_LEDGER_RETENTION_DAYS:
        r.fail(
            r.sub("retention_days"),
            f"must be 0 (keep every row) or at least {MIN_LEDGER_RETENTION_DAYS}, got "
            f"{ledger.retention_days}: the keys' monthly limits are counted from this "
            "month's rows when OLP starts",
        )
    r.done()
    return ledger


def _pricing(root: Reader) -> dict[str, PriceOverride]:
    prices: dict[str, PriceOverride] = {}
    for model, r in root.items("pricing"):
        cached = r.number("cached_input", -1, lo=0) if r.has("cached_input") else None
        prices[model] = PriceOverride(
            input=r.number("input", 0, lo=0),
            output=r.number("output", 0, lo=0),
            cached_input=cached,
        )
        for key in ("input", "output"):
            if not r.has(key):
                r.fail(r.sub(key), "required (USD per million tokens)")
        r.done()
    return prices


def _apply_env(config: Config, env: Mapping[str, str]) -> Config:
    server = config.server
    if env.get("OLP_HOST"):
        server = replace(server, host=env["OLP_HOST"])
    if env.get("OLP_PORT"):
        port = env["OLP_PORT"]
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError("OLP_PORT", f"must be a port number 1-65535, got {port!r}")
        server = replace(server, port=int(port))
    level = env.get("OLP_LOG_LEVEL") or config.log_level
    if level not in get_args(LogLevel):
        raise ConfigError(
            "OLP_LOG_LEVEL", f"must be one of error, warn, info, debug; got {level!r}"
        )
    token = env.get("OLP_OWNER_TOKEN") or None
    return replace(config, server=server, log_level=level, owner_token=token)  # type: ignore[arg-type]


def _known(providers: Mapping[str, ProviderConfig]) -> str:
    return "configured: " + ", ".join(sorted(providers)) if providers else "none configured"
