"""Which captured stdout lines each CLI translation counts as its upstream answering
(`answer_lines`, what OLP's first-byte and idle deadlines follow): none of a CLI's own
init/status/handshake lines before a hung upstream, every line of the answer after."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Protocol

import pytest

from olp.errors import ProviderError
from olp.providers.claude_cli.translate import ClaudeTranslator
from olp.providers.codex_cli.events import AppServerTurn
from olp.providers.gemini_cli.events import GeminiStream
from olp.providers.qwen_cli.translate import QwenTranslator

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli"


class Counting(Protocol):
    @property
    def answer_lines(self) -> int: ...

    def feed(self, line: bytes) -> object: ...


class _Codex:
    """`AppServerTurn` fed like the others (its replies are not needed here)."""

    def __init__(self) -> None:
        self.turn = AppServerTurn("codex", "m", "p")

    @property
    def answer_lines(self) -> int:
        return self.turn.answer_lines

    def feed(self, line: bytes) -> object:
        return self.turn.feed(line)


TRANSLATORS: dict[str, Callable[[], Counting]] = {
    "claude": lambda: ClaudeTranslator("claude", time.time),
    "qwen": lambda: QwenTranslator("qwen", time.time, "qwen"),
    "gemini": lambda: GeminiStream("gemini"),
    "codex": _Codex,
}


def count(cli: str, capture: str) -> tuple[int, int]:
    """(answer lines, all lines) of a captured run."""
    translator = TRANSLATORS[cli]()
    lines = (FIXTURES / cli / capture).read_bytes().splitlines()
    for line in lines:
        with suppress(ProviderError):  # a classified error is counted, then raised
            translator.feed(line)
    return translator.answer_lines, len(lines)


@pytest.mark.parametrize(
    ("cli", "capture"),
    [
        ("claude", "err_hang_default_killed_after_60s.jsonl"),
        ("qwen", "err_429_default_retries.jsonl"),
        ("qwen", "err_hang_killed_after_120s.jsonl"),
        ("gemini", "err_hang_killed_after_120s.jsonl"),
        ("codex", "app_server_olp_err_hang.jsonl"),
    ],
)
def test_chatter_before_a_hung_upstream_is_no_answer(cli: str, capture: str) -> None:
    answers, lines = count(cli, capture)
    assert lines >= 1
    assert answers == 0


@pytest.mark.parametrize(
    ("cli", "capture", "chatter"),
    [
        ("claude", "success_stream_json_partial.jsonl", 2),  # init, status
        ("qwen", "success_stream_json_partial_bare_notools.jsonl", 1),  # init
        ("gemini", "success_stream_json_notools.jsonl", 2),  # init, the echoed prompt
    ],
)
def test_every_line_of_an_answer_counts(cli: str, capture: str, chatter: int) -> None:
    answers, lines = count(cli, capture)
    assert answers == lines - chatter


def test_a_codex_turn_counts_its_items_not_its_handshake() -> None:
    answers, lines = count("codex", "app_server_olp_success.jsonl")
    # The answer: the agent message's start, 3 deltas and end, usage, turn/completed.
    # Not: 3 responses, configWarning, remoteControl, thread/started, 2 status changes,
    # turn/started, the echoed prompt's 2 items, the rate-limit snapshot.
    assert (answers, lines) == (7, 19)
