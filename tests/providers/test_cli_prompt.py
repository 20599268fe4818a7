"""The shared prompt serialisation and reset-time parsing of CLI providers (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from olp.ir import ChatRequest, ImagePart, Message, ResponseFormat, TextPart, Tool, ToolCall
from olp.providers._prompt import IMAGE_PLACEHOLDER, serialise
from olp.providers._reset_time import parse_reset


def req(*messages: Message, **kw: object) -> ChatRequest:
    return ChatRequest(model="m", messages=messages, **kw)  # type: ignore[arg-type]


def test_single_user_message_is_sent_verbatim() -> None:
    out = serialise(req(Message("system", "S1"), Message("developer", "S2"), Message("user", "Q")))
    assert out.system == "S1\n\nS2"
    assert out.prompt == "Q"
    assert out.dropped == ()


def test_conversation_becomes_a_deterministic_transcript() -> None:
    messages = (
        Message("system", "sys"),
        Message("user", "What's the weather in Paris?"),
        Message(
            "assistant",
            None,
            tool_calls=(ToolCall("call_1", "get_weather", '{"city":"Paris"}'),),
        ),
        Message("tool", "18C, sunny", tool_call_id="call_1", name="get_weather"),
        Message("assistant", "It is 18C and sunny."),
        Message("user", "And tomorrow?", name="ann"),
    )
    out = serialise(req(*messages))
    assert out.system == "sys"
    assert out.prompt.split("\n\n", 1)[1] == (
        "<user>\nWhat's the weather in Paris?\n</user>\n\n"
        '<assistant>\n[tool call call_1: get_weather({"city":"Paris"})]\n</assistant>\n\n'
        '<tool_result id="call_1" name="get_weather">\n18C, sunny\n</tool_result>\n\n'
        "<assistant>\nIt is 18C and sunny.\n</assistant>\n\n"
        '<user name="ann">\nAnd tomorrow?\n</user>'
    )
    assert out.prompt.startswith("Below is a conversation")
    assert serialise(req(*messages)) == out


def test_images_are_dropped_visibly_unless_kept() -> None:
    content = (TextPart("look "), TextPart("at this:"), ImagePart("data:image/png;base64,AAA"))
    out = serialise(req(Message("user", content)))
    assert out.prompt == f"look at this:\n{IMAGE_PLACEHOLDER}"
    assert out.dropped == ("images",)
    kept = serialise(req(Message("user", content)), keep_images=True)
    assert kept.prompt == "look at this:\n[image 1]"
    assert kept.images == (ImagePart("data:image/png;base64,AAA"),)


def test_response_formats_become_instructions() -> None:
    obj = serialise(req(Message("user", "x"), response_format=ResponseFormat("json_object")))
    assert "single valid JSON object" in obj.system
    text = serialise(req(Message("user", "x"), response_format=ResponseFormat("text")))
    assert text.system == ""


def test_dropped_features_are_named() -> None:
    out = serialise(
        req(
            Message("user", "x"),
            temperature=0.1,
            seed=3,
            max_tokens=10,
            tools=(Tool("t"),),
            extra={"logprobs": True},
        ),
        honoured=frozenset({"max_tokens"}),
    )
    assert out.dropped == ("temperature", "seed", "tools", "logprobs")


NOW = datetime(2026, 11, 29, 16, 0, tzinfo=UTC).timestamp()


def at(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("You've hit your session limit · resets 6:33pm (UTC)", at(2026, 11, 29, 18, 33)),
        ("You've hit your limit · resets 3pm (UTC)", at(2026, 11, 30, 15, 0)),
        ("You've hit your weekly limit · resets Dec 3, 6:33pm (UTC)", at(2026, 12, 3, 18, 33)),
        ("resets Jan 2, 1am", at(2027, 1, 2, 1, 0)),
        ("5-hour limit reached ∙ resets 9pm", at(2026, 11, 29, 21, 0)),
        ("Your limit will reset at 3pm (America/Bogota).", at(2026, 11, 29, 20, 0)),
        ("You've hit your limit · resets 4:50am (Europe/Rome)", at(2026, 11, 30, 3, 50)),
        ("Claude AI usage limit reached|1750708800", 1750708800.0),
        ("Rate limited, try again in 2h 5m", NOW + 2 * 3600 + 5 * 60),
        ("try again at 17:30", at(2026, 11, 29, 17, 30)),
        ("no time here", None),
        ("resets 3", None),
    ],
)
def test_parse_reset(text: str, expected: float | None) -> None:
    assert parse_reset(text, NOW) == expected
