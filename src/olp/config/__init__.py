"""Configuration: `$OLP_HOME/config.json` + environment → frozen, validated `Config`.

The only package that reads the environment.
"""

from __future__ import annotations

from olp.config.load import (
    PROVIDER_NAME_RULE,
    SOFT_TRIGGER_KEYS,
    is_provider_name,
    load_config,
    olp_home,
)
from olp.config.model import (
    AuthConfig,
    CacheConfig,
    Config,
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
from olp.config.validate import ConfigProblems

__all__ = [
    "PROVIDER_NAME_RULE",
    "SOFT_TRIGGER_KEYS",
    "AuthConfig",
    "CacheConfig",
    "Config",
    "ConfigProblems",
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
    "is_provider_name",
    "load_config",
    "olp_home",
]
