"""schemathesis against docs/openapi.yaml on a live OLP: generated requests to every
documented route (a fixed, small number each) get no server error and no answer that the
document does not describe (status, content type, headers, body schema)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from live_olp import OWNER, two_hop_config
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from olp.config import load_config

from fakes.upstream import FakeUpstream
from olp_server import ThreadServer, server_env, write_config

SPEC = Path(__file__).parents[2] / "docs" / "openapi.yaml"
schema = schemathesis.openapi.from_path(SPEC)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    with FakeUpstream() as alpha, FakeUpstream() as beta:
        home = tmp_path_factory.mktemp("fuzz") / "olp-home"
        write_config(home, two_hop_config(alpha, beta))
        config = load_config(server_env(home), detect_local_servers=False)
        with ThreadServer(config) as server:
            yield server


@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure is reproducible
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_answer_is_one_the_document_describes(
    case: schemathesis.Case, live: ThreadServer
) -> None:
    case.call_and_validate(base_url=live.base_url, headers=dict(OWNER), checks=CHECKS)
