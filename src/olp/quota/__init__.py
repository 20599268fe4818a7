"""Provider quota: counters, signals, cooldowns and soft triggers."""

from __future__ import annotations

from olp.quota.book import Figure, ProviderQuota, QuotaBook, State, Window
from olp.quota.cooldowns import Clock, Cooldown, Cooldowns
from olp.quota.store import QuotaStore
from olp.quota.warnings import soft_trigger_warnings

__all__ = [
    "Clock",
    "Cooldown",
    "Cooldowns",
    "Figure",
    "ProviderQuota",
    "QuotaBook",
    "QuotaStore",
    "State",
    "Window",
    "soft_trigger_warnings",
]
