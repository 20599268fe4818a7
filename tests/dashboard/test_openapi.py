"""docs/openapi.yaml describes what OLP really answers: live responses, after real traffic,
are validated against its schemas (JSON Schema 2020-12, which OpenAPI 3.1 uses)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from jsonschema import Draft202012Validator, FormatChecker
from live_olp import OWNER, bearer, chat, get

from fakes.upstream import FakeUpstream, Status
from olp_server import ThreadServer

SPEC: dict[str, Any] = yaml.safe_load(
    (Path(__file__).parents[2] / "docs" / "openapi.yaml").read_text(encoding="utf-8")
)


def check(name: str, instance: Any) -> None:
    """Validate against components/schemas/<name>, resolving $refs inside the document."""
    schema = {**SPEC, "$ref": f"#/components/schemas/{name}"}
    Draft202012Validator(schema, format_checker=FormatChecker()).validate(instance)


def test_the_schemas_are_valid_json_schema() -> None:
    assert SPEC["openapi"].startswith("3.1")
    for name, schema in SPEC["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
        assert schema, name


def test_the_validator_really_checks() -> None:
    with pytest.raises(Exception, match="'ok' is a required property"):
        check("Health", {"version": "1"})
    with pytest.raises(Exception, match="too short"):
        check("Spend", {"start": 0, "days": ["2026-01-01"], "by_key": [], "by_provider": []})


def test_every_documented_route_answers(olp: ThreadServer) -> None:
    for path, methods in SPEC["paths"].items():
        for method in methods:
            resp = get(olp, path) if method == "get" else chat(olp)
            assert resp.status_code != 404 or resp.json()["error"]["code"] != "not_found", path


def test_live_answers_match_the_schemas(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream, member_key: str
) -> None:
    alpha.script(Status(429, headers={"Retry-After": "600"}))
    answer = chat(olp)
    assert answer.status_code == 200
    check("ChatCompletion", answer.json())
    stream = chat(olp, headers=bearer(member_key), stream=True)
    frames = [line[6:] for line in stream.text.splitlines() if line.startswith("data: {")]
    assert frames
    for frame in frames:
        check("ChatCompletionChunk", orjson.loads(frame))
    missing = chat(olp, model="no-such-model")
    assert missing.status_code == 404
    check("Error", missing.json())
    beta.script(Status(500))
    assert chat(olp).status_code == 503  # an error and a fallback event in the status

    check("Health", get(olp, "/health", headers=None).json())
    owner_health = get(olp, "/health").json()
    assert owner_health["providers"]
    check("Health", owner_health)
    models = get(olp, "/v1/models").json()
    check("ModelList", models)
    check("Model", get(olp, f"/v1/models/{models['data'][0]['id']}").json())
    status = get(olp, "/v0/management/status").json()
    check("Status", status)
    for by in ("key", "provider", "model", "day"):
        check("UsageReport", get(olp, f"/v0/management/usage?by={by}&since=1h").json())
    check("QuotaReport", get(olp, "/v0/management/quota").json())
    check("Dashboard", get(olp, "/v0/management/dashboard").json())
    check("Error", get(olp, "/v0/management/status", headers=bearer(member_key)).json())
    assert status["recent_errors"] and status["recent_fallbacks"]


def test_cache_stats_match_the_schema(olp: ThreadServer) -> None:
    assert chat(olp, model="beta-only", content="same").status_code == 200
    assert chat(olp, model="beta-only", content="same").headers["x-olp-cache"] == "hit"
    resp = get(olp, "/cache/stats", headers=OWNER)
    assert resp.status_code == 200
    stats = resp.json()
    check("CacheStats", stats)
    assert (stats["hits"], stats["entries"]) == (1, 1)
