"""A key's share of a provider's usage window, as a gate on each of its requests' hops.

`olp keys set kid --share claude-me=0.25`: once kid has used a quarter of claude-me's
current window (attributed by `olp.accounts.shares.WindowUse`), kid's requests step over
claude-me like a soft trigger (`SHARE_SPENT`) until that window resets; the owner and the
other keys still reach it. A provider whose window OLP does not know yet is not gated.
"""

from __future__ import annotations

import time
from typing import Any

from olp.accounts import Identity
from olp.accounts.shares import ShareUse, WindowUse
from olp.engine import Hop, HopGate
from olp.errors import Failure, ProviderError
from olp.quota import QuotaBook

__all__ = ["share_gate", "share_uses", "shares_json"]


def share_uses(identity: Identity, quota: QuotaBook, use: WindowUse, now: float) -> list[ShareUse]:
    """Each of the key's shares whose provider's window (and its utilisation) is known."""
    uses = []
    for provider, share in identity.shares:
        window = quota.window(provider)
        if window is None or window.utilisation is None:
            continue
        uses.append(
            use.use(provider, identity.key_id, share, window.utilisation, window.reset_at, now)
        )
    return uses


def share_gate(identity: Identity, quota: QuotaBook, use: WindowUse) -> HopGate | None:
    """The gate for this key's requests; None when it has no shares (most keys)."""
    if not identity.shares:
        return None
    shares = dict(identity.shares)

    def gate(hop: Hop) -> ProviderError | None:
        share = shares.get(hop.name)
        if share is None:
            return None
        window = quota.window(hop.name)
        if window is None or window.utilisation is None:
            return None
        spent = use.use(
            hop.name, identity.key_id, share, window.utilisation, window.reset_at, time.time()
        )
        if not spent.spent:
            return None
        return ProviderError(
            Failure.SHARE_SPENT,
            f"share spent: {spent.text(identity.name)}",
            provider=hop.name,
            reset_at=window.reset_at,
        )

    return gate


def shares_json(
    identity: Identity, quota: QuotaBook, window_use: WindowUse, now: float
) -> list[dict[str, Any]]:
    """The key's shares of providers' windows: each share, how much of the window the key
    used (None while the provider's window is not known) and when it resets."""
    known = {u.provider: u for u in share_uses(identity, quota, window_use, now)}
    rows = []
    for provider, share in identity.shares:
        used = known.get(provider)
        rows.append(
            {
                "provider": provider,
                "share": share,
                "used": None if used is None else round(used.used, 4),
                "reset_at": None if used is None else used.reset_at,
                "spent": used is not None and used.spent,
                "text": used.text(identity.name)
                if used is not None
                else f"{identity.name}: {share:.0%} of {provider}'s window (its use not known yet)",
            }
        )
    return rows
