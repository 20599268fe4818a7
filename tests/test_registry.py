"""The shipped models registry: it loads, and its data is consistent."""

from __future__ import annotations

from importlib import resources

import orjson
import pytest

from olp.registry import RISK_TIERS, Registry, load_registry, registry_from_json

# Provider types named in docs/design.md §3.
DESIGN_TYPES = (
    "openai-http",
    "anthropic-http",
    "claude-cli",
    "codex-cli",
    "vibe-cli",
    "gemini-cli",
    "qwen-cli",
)
# From the seeds' README "Risk tier guide".
EXPECTED_TIERS = {
    "claude-cli": "D",
    "codex-cli": "D",
    "vibe-cli": "D",
    "gemini-cli": "C",
    "qwen-cli": "B",
    "openai-http": "D",
    "anthropic-http": "D",
}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry()


def _raw() -> dict[str, object]:
    data = resources.files("olp.registry").joinpath("models.json").read_bytes()
    raw = orjson.loads(data)
    assert isinstance(raw, dict)
    return raw


def test_json_loads_with_source_note_and_date(registry: Registry) -> None:
    assert len(registry.models) >= 30
    assert "list price" in registry.source
    assert registry.as_of[:2] == "20"


def test_every_vendor_has_models(registry: Registry) -> None:
    vendors = {m.vendor for m in registry.models.values()}
    assert {"openai", "anthropic", "mistral", "google", "qwen", "deepseek", "groq"} <= vendors


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("opus", "claude-opus-4-1"),
        ("sonnet", "claude-sonnet-4-5"),
        ("haiku", "claude-haiku-4-5"),
        ("devstral", "devstral-medium-latest"),
        ("gemini-pro", "gemini-2.5-pro"),
        ("gemini-flash", "gemini-2.5-flash"),
        ("gpt5", "gpt-5"),
        ("codex", "gpt-5-codex"),
    ],
)
def test_named_aliases(registry: Registry, alias: str, canonical: str) -> None:
    assert registry.canonical(alias) == canonical
    assert registry.aliases[alias] == canonical


def test_every_alias_resolves_to_an_existing_model(registry: Registry) -> None:
    for alias, canonical in registry.aliases.items():
        info = registry.model(canonical)
        assert info is not None, alias
        assert alias in info.aliases


def test_no_alias_collides_with_a_model_id(registry: Registry) -> None:
    assert not set(registry.aliases) & set(registry.models)
    # …and no alias is declared twice (the loader would have kept only the last one).
    declared = [a for entry in _raw()["models"] for a in entry["aliases"]]  # type: ignore[attr-defined]
    assert len(declared) == len(set(declared))


def test_prices_and_windows_are_sane(registry: Registry) -> None:
    for info in registry.models.values():
        assert info.price is not None, info.id
        assert info.price.input >= 0, info.id
        assert info.price.output >= 0, info.id
        assert info.price.cached_input is None or info.price.cached_input >= 0, info.id
        assert info.context_window is not None, info.id
        assert info.context_window >= 8192, info.id
        # After 2023-01-01 and not in the future of the file.
        assert 1_672_531_200 < info.created < 1_900_000_000, info.id


def test_cached_input_is_cheaper_than_input(registry: Registry) -> None:
    for info in registry.models.values():
        assert info.price is not None
        if info.price.cached_input is not None:
            assert info.price.cached_input < info.price.input, info.id


@pytest.mark.parametrize("ptype", DESIGN_TYPES)
def test_every_design_provider_type_has_a_tier(registry: Registry, ptype: str) -> None:
    info = registry.provider_type(ptype)
    assert info is not None
    assert info.risk_tier == EXPECTED_TIERS[ptype]
    assert info.risk_tier in registry.risk_tiers
    assert info.vendor
    assert info.note
    # CLI types know their default executable; HTTP types have none.
    assert (info.command is not None) == ptype.endswith("-cli")


def test_every_tier_is_described(registry: Registry) -> None:
    assert set(registry.risk_tiers) == set(RISK_TIERS)


def test_loader_rejects_an_alias_naming_two_models() -> None:
    raw = {
        "models": [
            {"id": "a", "vendor": "x", "aliases": ["same"]},
            {"id": "b", "vendor": "x", "aliases": ["same"]},
        ]
    }
    with pytest.raises(ValueError, match="'same' names both 'a' and 'b'"):
        registry_from_json(raw)


def test_loader_rejects_an_alias_equal_to_a_model_id() -> None:
    raw = {
        "models": [
            {"id": "a", "vendor": "x", "aliases": ["b"]},
            {"id": "b", "vendor": "x"},
        ]
    }
    with pytest.raises(ValueError, match="aliases equal to model ids: b"):
        registry_from_json(raw)


def test_loader_rejects_an_unknown_tier() -> None:
    raw = {"providers": {"x-cli": {"vendor": "x", "risk_tier": "E"}}}
    with pytest.raises(ValueError, match="unknown risk tier 'E'"):
        registry_from_json(raw)
