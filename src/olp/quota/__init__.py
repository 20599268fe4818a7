"""Provider quota: cooldowns now; counters, signals and soft triggers hang here too."""

from __future__ import annotations

from olp.quota.cooldowns import Clock, Cooldown, Cooldowns

__all__ = ["Clock", "Cooldown", "Cooldowns"]
