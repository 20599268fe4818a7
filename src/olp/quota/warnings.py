"""Soft triggers that can never fire are configuration mistakes: say so at start."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["soft_trigger_warnings"]


def soft_trigger_warnings(
    thresholds: Mapping[str, Mapping[str, float]],
    signals: Mapping[str, tuple[str, ...]],
) -> list[str]:
    """`signals`: for each *enabled* provider, the quota signals it can report."""
    warnings: list[str] = []
    for provider, limits in thresholds.items():
        if provider not in signals:
            warnings.append(
                f"routing.soft_triggers.{provider}: the provider is disabled, so its soft "
                "triggers never run"
            )
            continue
        can = signals[provider]
        if (
            "five_hour_window_percent_threshold" in limits
            and "five_hour" not in can
            and (not limits.get("five_hour_capacity"))
        ):
            warnings.append(
                f"routing.soft_triggers.{provider}.five_hour_window_percent_threshold can never "
                f"fire: {provider} reports no 5-hour utilisation; set five_hour_capacity "
                "(requests per 5 hours) so OLP can count against it"
            )
        if "credit_pool_percent_threshold" in limits and "credit_pool" not in can:
            warnings.append(
                f"routing.soft_triggers.{provider}.credit_pool_percent_threshold can never fire: "
                f"{provider} exposes no credit-pool signal"
            )
        if "five_hour_capacity" in limits and "five_hour_window_percent_threshold" not in limits:
            warnings.append(
                f"routing.soft_triggers.{provider}.five_hour_capacity is unused without "
                "five_hour_window_percent_threshold"
            )
    return warnings
