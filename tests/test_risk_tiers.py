"""Risk tiers: tier A can never be enabled; tier B needs the owner's recorded consent."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import orjson
import pytest

from olp.config import Config, ProviderConfig
from olp.errors import ConfigError
from olp.providers.loader import build_providers, load_plugins
from olp.registry import load_registry
from olp.registry.models import registry_from_json


def config_with(provider: ProviderConfig, home: Path) -> Config:
    return Config(home=home, providers={provider.name: provider})


def test_tier_b_without_consent_is_refused(tmp_path: Path) -> None:
    qwen = ProviderConfig(name="qwen", type="qwen-cli")
    with pytest.raises(ConfigError) as err:
        build_providers(config_with(qwen, tmp_path), load_plugins(), load_registry())
    assert err.value.path == "providers.qwen.consent"
    assert '"consent": true' in err.value.reason


def test_tier_b_with_consent_is_built(tmp_path: Path) -> None:
    qwen = ProviderConfig(name="qwen", type="qwen-cli", consent=True)
    built = build_providers(config_with(qwen, tmp_path), load_plugins(), load_registry())
    assert set(built) == {"qwen"}


def test_tier_a_cannot_be_enabled_even_with_consent(tmp_path: Path) -> None:
    raw = orjson.loads(resources.files("olp.registry").joinpath("models.json").read_bytes())
    raw["providers"]["qwen-cli"]["risk_tier"] = "A"
    registry = registry_from_json(raw)
    qwen = ProviderConfig(name="qwen", type="qwen-cli", consent=True)
    with pytest.raises(ConfigError) as err:
        build_providers(config_with(qwen, tmp_path), load_plugins(), registry)
    assert "risk tier A" in err.value.reason
    # A disabled tier-A provider is fine: nothing is built.
    off = ProviderConfig(name="qwen", type="qwen-cli", enabled=False)
    assert build_providers(config_with(off, tmp_path), load_plugins(), registry) == {}


def test_olp_start_explains_missing_consent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_bytes(orjson.dumps({"providers": {"q": {"type": "qwen-cli"}}}))
    proc = subprocess.run(
        [sys.executable, "-m", "olp", "start"],
        capture_output=True,
        text=True,
        env={**os.environ, "OLP_HOME": str(home)},
        timeout=30,
    )
    assert proc.returncode == 2
    assert "providers.q.consent" in proc.stderr
    assert "risk tier B" in proc.stderr
    assert "Traceback" not in proc.stderr
