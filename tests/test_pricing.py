"""Costs against hand-computed values: list prices, aliases, cache reads and writes,
config overrides, provider-reported costs, subscriptions and unknown models.

Prices come from the shipped registry (USD per million tokens) and from a real
config.json read by the real loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from olp.accounts.pricing import NO_COST, Cost, Pricing
from olp.config import Config, ProviderConfig, load_config
from olp.ir import Usage
from olp.registry import load_registry

MILLION = 1_000_000


def pricing(tmp_path: Path, config: dict[str, Any] | None = None) -> Pricing:
    """Pricing over the shipped registry and a config.json loaded like `olp start` does."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base: dict[str, Any] = {
        "providers": {
            "alpha": {"type": "openai-http", "base_url": "http://127.0.0.1:9/v1"},
            "haiku": {"type": "anthropic-http", "base_url": "http://127.0.0.1:9"},
            "claude": {"type": "claude-cli"},
            "codex": {"type": "codex-cli"},
        }
    }
    for key, value in (config or {}).items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    (home / "config.json").write_bytes(orjson.dumps(base))
    loaded = load_config({"OLP_HOME": str(home)}, detect_local_servers=False)
    return Pricing(load_registry(), loaded)


def test_metered_with_cached_prompt_tokens(tmp_path: Path) -> None:
    # gpt-4o-mini: input 0.15, output 0.60, cached input 0.075 per million.
    usage = Usage(prompt_tokens=1000, completion_tokens=500, cached_prompt_tokens=200)
    cost = pricing(tmp_path).price_request("alpha", "openai-http", "gpt-4o-mini", usage)
    expected = (800 * 0.15 + 200 * 0.075 + 500 * 0.60) / MILLION  # 0.000435
    assert cost.source == "registry"
    assert cost.cost_usd == pytest.approx(expected, rel=1e-12)
    assert cost.api_cost_usd == pytest.approx(0.000435, rel=1e-12)


def test_subscription_alias_with_anthropic_cache_writes(tmp_path: Path) -> None:
    # "sonnet" is an alias of claude-sonnet-4-5: input 3, output 15, cached input 0.30.
    # Anthropic bills cache writes at 1.25x input. The CLI is a subscription: cost 0.
    usage = Usage(
        prompt_tokens=10_000,
        completion_tokens=1000,
        cached_prompt_tokens=6000,
        cache_write_tokens=2000,
    )
    cost = pricing(tmp_path).price_request("claude", "claude-cli", "sonnet", usage)
    expected = (2000 * 3 + 6000 * 0.30 + 2000 * 3 * 1.25 + 1000 * 15) / MILLION  # 0.0303
    assert cost == Cost(0.0, pytest.approx(0.0303), "registry")
    assert cost.api_cost_usd == pytest.approx(expected, rel=1e-12)


def test_cache_writes_at_input_price_for_other_vendors(tmp_path: Path) -> None:
    # gpt-5 (input 1.25, output 10, cached 0.125): writes cost the plain input price.
    usage = Usage(prompt_tokens=3000, completion_tokens=100, cache_write_tokens=1000)
    cost = pricing(tmp_path).price_request("alpha", "openai-http", "gpt-5", usage)
    assert cost.cost_usd == pytest.approx((3000 * 1.25 + 100 * 10) / MILLION, rel=1e-12)


def test_cached_tokens_at_input_price_when_vendor_lists_no_cache_price(tmp_path: Path) -> None:
    # mistral-small-latest: input 0.10, output 0.30, no cached-input price.
    usage = Usage(prompt_tokens=1000, completion_tokens=100, cached_prompt_tokens=400)
    cost = pricing(tmp_path).price_request("alpha", "openai-http", "mistral-small", usage)
    assert cost.cost_usd == pytest.approx((1000 * 0.10 + 100 * 0.30) / MILLION, rel=1e-12)


def test_reasoning_tokens_are_not_counted_twice(tmp_path: Path) -> None:
    # o4-mini: input 1.10, output 4.40; 800 of the 1000 completion tokens are reasoning.
    usage = Usage(prompt_tokens=100, completion_tokens=1000, reasoning_tokens=800)
    cost = pricing(tmp_path).price_request("alpha", "openai-http", "o4-mini", usage)
    assert cost.cost_usd == pytest.approx((100 * 1.10 + 1000 * 4.40) / MILLION, rel=1e-12)


def test_cli_reported_cost_wins_and_subscription_costs_nothing(tmp_path: Path) -> None:
    usage = Usage(prompt_tokens=5000, completion_tokens=200, cost_usd=0.0421)
    cost = pricing(tmp_path).price_request("claude", "claude-cli", "claude-sonnet-4-5", usage)
    assert cost == Cost(0.0, 0.0421, "provider")


def test_metered_provider_reported_cost_is_real_money(tmp_path: Path) -> None:
    # OpenRouter puts its own figure in usage.cost: that is what was charged.
    usage = Usage(prompt_tokens=5000, completion_tokens=200, cost_usd=0.0123)
    cost = pricing(tmp_path).price_request("alpha", "openai-http", "some/router-model", usage)
    assert cost == Cost(0.0123, 0.0123, "provider")


def test_config_override_by_model_then_by_provider_and_model(tmp_path: Path) -> None:
    p = pricing(
        tmp_path,
        {
            "pricing": {
                "gpt-4o-mini": {"input": 1.0, "output": 2.0},
                "codex/gpt-4o-mini": {"input": 4.0, "output": 8.0, "cached_input": 0.5},
            }
        },
    )
    usage = Usage(
        prompt_tokens=MILLION, completion_tokens=MILLION, cached_prompt_tokens=MILLION // 2
    )
    # alpha: the model-wide override; no cached price there, so cached reads cost input.
    three = pytest.approx(3.0)
    assert p.price_request("alpha", "openai-http", "gpt-4o-mini", usage) == Cost(
        three, three, "config"
    )
    # codex: its own override wins; a subscription still records the API-equivalent.
    assert p.price_request("codex", "codex-cli", "gpt-4o-mini", usage) == Cost(
        0.0, pytest.approx(0.5 * 4.0 + 0.5 * 0.5 + 8.0), "config"
    )


def test_override_prices_a_model_the_registry_does_not_know(tmp_path: Path) -> None:
    p = pricing(tmp_path, {"pricing": {"alpha/local-llama": {"input": 0.2, "output": 0.4}}})
    usage = Usage(prompt_tokens=2000, completion_tokens=1000)
    cost = p.price_request("alpha", "openai-http", "local-llama", usage)
    assert cost == Cost(pytest.approx(0.0008), pytest.approx(0.0008), "config")


def test_unknown_model_is_none_not_zero(tmp_path: Path) -> None:
    usage = Usage(prompt_tokens=2000, completion_tokens=1000)
    p = pricing(tmp_path)
    assert p.price_request("alpha", "openai-http", "local-llama", usage) == Cost(
        None, None, "unknown"
    )
    # A subscription still spent no money; what it would have cost is unknown.
    assert p.price_request("claude", "claude-cli", "claude-next", usage) == Cost(
        0.0, None, "unknown"
    )


def test_no_usage_report_means_unknown_cost(tmp_path: Path) -> None:
    cost = pricing(tmp_path).price_request("alpha", "openai-http", "gpt-4o", None)
    assert cost == Cost(None, None, "unknown")
    assert Cost(0.0, 0.0, "none") == NO_COST


def test_billing_setting_overrides_the_type_default(tmp_path: Path) -> None:
    p = pricing(
        tmp_path,
        {
            "providers": {
                "claude": {"type": "claude-cli", "billing": "metered"},
                "alpha": {
                    "type": "openai-http",
                    "base_url": "http://127.0.0.1:9/v1",
                    "billing": "subscription",
                },
            }
        },
    )
    usage = Usage(prompt_tokens=MILLION, completion_tokens=0)
    # claude-haiku-4-5: input 1.0; the owner pays per token for this claude CLI login.
    one = pytest.approx(1.0)
    assert p.price_request("claude", "claude-cli", "haiku", usage) == Cost(one, one, "registry")
    # gpt-4o: input 2.5; a flat-rate OpenAI-compatible plan.
    assert p.price_request("alpha", "openai-http", "gpt-4o", usage) == Cost(
        0.0, pytest.approx(2.5), "registry"
    )
    assert p.billing("haiku", "anthropic-http") == "metered"
    assert p.billing("codex", "codex-cli") == "subscription"
    assert p.billing("gone", "some-future-cli") == "subscription"


def test_inconsistent_usage_never_goes_negative(tmp_path: Path) -> None:
    # A provider claiming more cached tokens than prompt tokens: no negative plain part.
    usage = Usage(prompt_tokens=100, completion_tokens=0, cached_prompt_tokens=300)
    cost = pricing(tmp_path).price_request("alpha", "openai-http", "gpt-4o", usage)
    assert cost.cost_usd == pytest.approx(300 * 1.25 / MILLION)


def test_pricing_built_from_a_bare_config(tmp_path: Path) -> None:
    config = Config(
        home=tmp_path,
        providers={"x": ProviderConfig(name="x", type="anthropic-http")},
    )
    p = Pricing(load_registry(), config)
    # claude-haiku-4-5: input 1.0, output 5.0, cached 0.10; writes 1.25x.
    usage = Usage(prompt_tokens=1000, completion_tokens=10, cache_write_tokens=1000)
    assert p.price_request("x", "anthropic-http", "claude-haiku-4-5", usage).cost_usd == (
        pytest.approx((1000 * 1.0 * 1.25 + 10 * 5.0) / MILLION)
    )
