"""Pool hops: several accounts of one kind take one hop's place, and each request tries them
in the order its pool's `pick` gives.

A configured pool hop becomes one hop per member, next to each other in the chain (see
`PoolConfig`); `PoolScheduler.arrange` puts them in this request's order before the engine
walks the chain. A member that fails with a fallback trigger is then stepped over like any
hop — so within the pool first, and only after the last member does the chain move on —
and a member cooling down or held back by a soft trigger is skipped by the engine's gates.

The orders:

- `reset-soonest` (the default): a member OLP has not heard from yet (no quota signal, no
  request in the last five hours) first, once, so that OLP learns its window; then the
  members whose window is known, the one that resets soonest first — its unused capacity
  is about to be lost; then those whose window is still unknown; members cooling down or
  over a soft trigger last.
- `round-robin`: each request starts one member further along.
- `fill-first`: the configured order.
- `least-used`: the lowest window utilisation first (unknown counts as unused, so OLP
  learns it); members cooling down or over a soft trigger last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from olp.config import PoolConfig
from olp.engine.routing import Chain, Hop
from olp.quota import QuotaBook, Window

__all__ = ["MemberState", "PoolScheduler"]


@dataclass(frozen=True, slots=True)
class MemberState:
    """One pool member as the scheduler sees it (status pages show this)."""

    provider: str
    blocked: bool  # cooling down or over a soft trigger
    heard_from: bool
    window: Window | None


class PoolScheduler:
    """Orders each pool's members per request, from the quota book's view of them."""

    def __init__(self, quota: QuotaBook) -> None:
        self._quota = quota
        self._turns: dict[PoolConfig, int] = {}  # round-robin: requests the pool has taken

    def arrange(self, chain: Chain) -> Chain:
        """The chain with each pool's members in the order this request tries them."""
        if all(hop.pool is None for hop in chain.hops):
            return chain
        hops: list[Hop] = []
        for pool, group in _groups(chain.hops):
            if pool is None:
                hops.extend(group)
                continue
            by_name = {hop.name: hop for hop in group}
            hops.extend(by_name[name] for name in self._order(pool, list(by_name), advance=True))
        return Chain(chain.name, tuple(replace(hop, index=i) for i, hop in enumerate(hops)))

    def next_member(self, pool: PoolConfig, members: Sequence[str]) -> str | None:
        """The member the pool's next request would try first (nothing is counted)."""
        order = self._order(pool, list(members), advance=False)
        return order[0] if order else None

    def member(self, provider: str) -> MemberState:
        quota = self._quota
        return MemberState(
            provider,
            blocked=quota.blocked(provider),
            heard_from=quota.heard_from(provider),
            window=quota.window(provider),
        )

    def _order(self, pool: PoolConfig, names: list[str], *, advance: bool) -> list[str]:
        if pool.pick == "fill-first" or len(names) < 2:
            return names
        if pool.pick == "round-robin":
            turn = self._turns.get(pool, 0)
            if advance:
                self._turns[pool] = turn + 1
            start = turn % len(names)
            return names[start:] + names[:start]
        states = [self.member(name) for name in names]
        rank = _least_used if pool.pick == "least-used" else _reset_soonest
        ranked = sorted(enumerate(states), key=lambda item: (*rank(item[1]), item[0]))
        return [state.provider for _, state in ranked]


def _reset_soonest(member: MemberState) -> tuple[int, float]:
    if member.blocked:
        return 3, 0.0
    if not member.heard_from:
        return 0, 0.0
    if member.window is not None:
        return 1, member.window.reset_at
    return 2, 0.0


def _least_used(member: MemberState) -> tuple[int, float]:
    if member.blocked:
        return 1, 0.0
    used = member.window.utilisation if member.window is not None else None
    return 0, used or 0.0


def _groups(hops: Sequence[Hop]) -> list[tuple[PoolConfig | None, list[Hop]]]:
    """The hops in runs: each pool's members together, every other hop alone."""
    groups: list[tuple[PoolConfig | None, list[Hop]]] = []
    for hop in hops:
        if hop.pool is not None and groups and groups[-1][0] is hop.pool:
            groups[-1][1].append(hop)
        else:
            groups.append((hop.pool, [hop]))
    return groups
