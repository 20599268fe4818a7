"""`/v1/messages` through CLI hops (the fake CLIs, real subprocesses): the Anthropic wire
reaches every provider type, with the chat route's fallback."""

from __future__ import annotations

from pathlib import Path

import anthropic
import pytest

from fakes.cli_chains import CLIS, chat_config
from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, olp_server

ASK = [{"role": "user", "content": "What is 2+2?"}]


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_a_streamed_message_from_a_cli_hop(tmp_path: Path, beta: FakeUpstream, cli: str) -> None:
    spec = CLIS[cli]
    config = chat_config(tmp_path, beta, cli, spec.success, only_cli=True)
    with (
        olp_server(tmp_path, config) as olp,
        anthropic.Anthropic(base_url=olp.base_url, api_key=OWNER_TOKEN, max_retries=0) as sdk,
        sdk.messages.stream(model="chat", max_tokens=100, messages=ASK) as stream,
    ):
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) == spec.pieces and all(pieces)
    assert final.content[0].text == "".join(pieces)  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert beta.calls == 0


def test_a_failing_cli_hop_falls_back(tmp_path: Path, beta: FakeUpstream) -> None:
    beta.script(Text("from beta"))
    config = chat_config(tmp_path, beta, "gemini", "err_503_default_retries")
    with (
        olp_server(tmp_path, config) as olp,
        anthropic.Anthropic(base_url=olp.base_url, api_key=OWNER_TOKEN, max_retries=0) as sdk,
    ):
        raw = sdk.messages.with_raw_response.create(model="chat", max_tokens=100, messages=ASK)
    assert raw.parse().content[0].text == "from beta"  # type: ignore[union-attr]
    assert raw.headers["x-olp-provider-used"] == "beta"
    assert raw.headers["x-olp-fallback-hops"] == "1"
