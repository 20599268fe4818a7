"""Chat Completions request bodies -> ChatRequest, and every rejection naming its field."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest

from olp.errors import InvalidRequest
from olp.ir import ImagePart, Message, NamedToolChoice, ResponseFormat, TextPart, Tool, ToolCall
from olp.wire.openai_chat import parse_chat_request

USER = {"role": "user", "content": "hi"}


def parse(**fields: Any) -> Any:
    body = {"model": "m", "messages": [USER], **fields}
    return parse_chat_request(orjson.dumps(body))


def parse_messages(*messages: Any) -> tuple[Message, ...]:
    return parse(messages=list(messages)).messages  # type: ignore[no-any-return]


def rejected(body: Any) -> InvalidRequest:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    with pytest.raises(InvalidRequest) as info:
        parse_chat_request(raw)
    err = info.value
    assert err.http_status == 400
    assert err.code == "invalid_request_error"
    assert err.type == "invalid_request_error"
    return err


def sha_id(seed: str) -> str:
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]


# --- the happy paths -----------------------------------------------------------------


def test_minimal_request_gets_defaults() -> None:
    req = parse_chat_request(b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}')
    assert req.model == "gpt-4o"
    assert req.messages == (Message("user", "hi"),)
    assert req.stream is False
    assert req.include_usage is False
    assert req.tools == ()
    assert req.tool_choice is None
    assert req.temperature is None
    assert req.max_tokens is None
    assert req.max_tokens_field == "max_tokens"
    assert req.stop == ()
    assert dict(req.extra) == {}


def test_full_surface_request() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "developer", "content": "be terse"},
            {"role": "system", "content": [{"type": "text", "text": "sys"}], "name": "s"},
            {
                "role": "user",
                "name": "ann",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
                    {"type": "image_url", "image_url": "data:image/png;base64,AAAA"},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "look", "arguments": '{"q":1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
            {"role": "assistant", "content": "A cat."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "look",
                    "description": "Look closer",
                    "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}},
                    "strict": True,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "look"}},
        "parallel_tool_calls": False,
        "response_format": {"type": "json_object"},
        "temperature": 1,
        "top_p": 0.5,
        "max_tokens": 10,
        "max_completion_tokens": 20,
        "stop": ["\n\n", "END"],
        "seed": -3,
        "stream": True,
        "stream_options": {"include_usage": True},
        "n": 1,
        "user": "u-1",
        "frequency_penalty": -2,
        "presence_penalty": 1.5,
        "logit_bias": {"50256": -100},
        "logprobs": True,
        "top_logprobs": 20,
        "reasoning_effort": "low",
        "metadata": {"k": "v"},
        "store": False,
        "service_tier": "auto",
        "prediction": {"type": "content", "content": "x"},
        "modalities": ["text"],
        "verbosity": "low",
        "web_search_options": {},
        "some_future_field": {"kept": True},
    }
    req = parse_chat_request(orjson.dumps(body))
    assert req.messages == (
        Message("developer", "be terse"),
        Message("system", (TextPart("sys"),), name="s"),
        Message(
            "user",
            (
                TextPart("what is this?"),
                ImagePart("https://x/a.png", "low"),
                ImagePart("data:image/png;base64,AAAA"),
            ),
            name="ann",
        ),
        Message("assistant", None, tool_calls=(ToolCall("call_1", "look", '{"q":1}'),)),
        Message("tool", "a cat", tool_call_id="call_1"),
        Message("assistant", "A cat."),
    )
    assert req.tools == (
        Tool(
            "look",
            "Look closer",
            {"type": "object", "properties": {"q": {"type": "integer"}}},
            True,
        ),
    )
    assert req.tool_choice == NamedToolChoice("look")
    assert req.parallel_tool_calls is False
    assert req.response_format == ResponseFormat("json_object")
    assert req.temperature == 1.0
    assert isinstance(req.temperature, float)
    assert req.top_p == 0.5
    assert (req.max_tokens, req.max_tokens_field) == (20, "max_completion_tokens")
    assert req.stop == ("\n\n", "END")
    assert req.seed == -3
    assert req.stream is True
    assert req.include_usage is True
    assert req.user == "u-1"
    assert dict(req.extra) == {
        "frequency_penalty": -2.0,
        "presence_penalty": 1.5,
        "logit_bias": {"50256": -100},
        "logprobs": True,
        "top_logprobs": 20,
        "reasoning_effort": "low",
        "metadata": {"k": "v"},
        "store": False,
        "service_tier": "auto",
        "prediction": {"type": "content", "content": "x"},
        "modalities": ["text"],
        "verbosity": "low",
        "web_search_options": {},
    }
    assert req.passthrough is not None
    assert dict(req.passthrough.fields) == {"some_future_field": {"kept": True}}


def test_explicit_nulls_mean_not_given() -> None:
    nullable = [
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "stream",
        "stream_options", "n", "user", "tools", "functions", "tool_choice", "function_call",
        "parallel_tool_calls", "response_format", "frequency_penalty", "logit_bias",
        "top_logprobs", "metadata",
    ]  # fmt: skip
    req = parse(**dict.fromkeys(nullable))
    assert req == parse()


def test_unknown_top_level_keys_pass_through_as_sent() -> None:
    req = parse(foo=1, bar={"x": [1]}, stream_mode="weird")
    assert req.passthrough is not None and req.passthrough.wire == "openai_chat"
    assert dict(req.passthrough.fields) == {"foo": 1, "bar": {"x": [1]}, "stream_mode": "weird"}
    assert req.extra == {}


def test_max_tokens_alone_keeps_its_field_name() -> None:
    req = parse(max_tokens=5)
    assert (req.max_tokens, req.max_tokens_field) == (5, "max_tokens")
    req = parse(max_completion_tokens=7)
    assert (req.max_tokens, req.max_tokens_field) == (7, "max_completion_tokens")


@pytest.mark.parametrize(
    ("stop", "expected"),
    [("END", ("END",)), ("", ()), ([], ()), (["a"], ("a",)), (["a", "b", "c", "d"], tuple("abcd"))],
)
def test_stop_forms(stop: Any, expected: tuple[str, ...]) -> None:
    assert parse(stop=stop).stop == expected


def test_include_usage_only_counts_for_streams() -> None:
    assert parse(stream=False, stream_options={"include_usage": True}).include_usage is False
    assert parse(stream=True, stream_options={"include_usage": False}).include_usage is False
    assert parse(stream=True, stream_options={}).include_usage is False
    assert parse(stream=True, stream_options={"include_usage": True}).include_usage is True


@pytest.mark.parametrize("value", [0, 0.0, 2, 2.0, 1.3])
def test_temperature_bounds_accepted(value: float) -> None:
    assert parse(temperature=value).temperature == float(value)


def test_response_format_json_schema_kept_as_sent() -> None:
    spec = {"name": "out", "schema": {"type": "object"}, "strict": True, "description": "d"}
    req = parse(response_format={"type": "json_schema", "json_schema": spec})
    assert req.response_format == ResponseFormat("json_schema", spec)
    assert parse(response_format={"type": "text"}).response_format == ResponseFormat("text")


def test_tool_choice_modes() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    for mode in ("auto", "none", "required"):
        assert parse(tools=tools, tool_choice=mode).tool_choice == mode
    assert parse(tool_choice="auto").tool_choice == "auto"
    assert parse(tool_choice="none").tool_choice == "none"


def test_legacy_functions_and_function_call() -> None:
    req = parse(
        functions=[{"name": "f", "description": "d", "parameters": {"type": "object"}}],
        function_call={"name": "f"},
    )
    assert req.tools == (Tool("f", "d", {"type": "object"}),)
    assert req.tool_choice == NamedToolChoice("f")
    assert parse(functions=[{"name": "f"}], function_call="none").tool_choice == "none"


def test_tool_choice_wins_over_legacy_function_call() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert (
        parse(tools=tools, tool_choice="required", function_call="none").tool_choice == "required"
    )


# --- messages --------------------------------------------------------------------------


def test_assistant_content_forms() -> None:
    msgs = parse_messages(
        {"role": "assistant", "content": None},
        {"role": "assistant"},
        {"role": "assistant", "content": []},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {"role": "assistant", "content": None, "refusal": "I can't"},
        USER,
    )
    assert [m.content for m in msgs[:-1]] == [
        None,
        None,
        None,
        (TextPart("a"),),
        (TextPart("no"),),
        "I can't",
    ]


def test_tool_message_with_text_parts() -> None:
    (msg,) = parse_messages(
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]}
    )
    assert msg == Message("tool", (TextPart("42"),), tool_call_id="c1")
    assert msg.text() == "42"


def test_legacy_function_call_id_is_deterministic() -> None:
    msgs = parse_messages(
        USER,
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": "result"},
    )
    call_id = sha_id("f\0{}")
    assert msgs[1].tool_calls == (ToolCall(call_id, "f", "{}"),)
    # The result answers the call: same id, so upstreams can pair them.
    assert msgs[2] == Message("tool", "result", tool_call_id=call_id)
    again = parse_messages(
        USER, {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}
    )
    assert again[1].tool_calls[0].id == call_id


def test_function_message_pairs_with_the_latest_unanswered_call() -> None:
    msgs = parse_messages(
        {"role": "assistant", "function_call": {"name": "f", "arguments": "1"}},
        {"role": "function", "name": "f", "content": "r1"},
        {"role": "assistant", "function_call": {"name": "f", "arguments": "2"}},
        {"role": "function", "name": "f", "content": None},
        {"role": "function", "name": "g", "content": "orphan"},
    )
    assert msgs[1].tool_call_id == msgs[0].tool_calls[0].id == sha_id("f\x001")
    assert msgs[3].tool_call_id == msgs[2].tool_calls[0].id == sha_id("f\x002")
    assert msgs[3].content == ""
    # No call to answer: the id comes from the name alone.
    assert msgs[4].tool_call_id == sha_id("g")


def test_tool_call_arguments_given_as_object_are_serialised() -> None:
    (msg,) = parse_messages(
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}],
        }
    )
    assert msg.tool_calls == (ToolCall("c", "f", '{"a":1}'),)


# --- rejections: each names its field ----------------------------------------------------

BASE: dict[str, Any] = {"model": "m", "messages": [USER]}
TOOLS = [{"type": "function", "function": {"name": "f"}}]


def with_(**fields: Any) -> dict[str, Any]:
    return {**BASE, **fields}


def with_message(message: Any) -> dict[str, Any]:
    return {**BASE, "messages": [USER, USER, message]}


REJECTIONS: list[tuple[str, Any, str | None, str]] = [
    # (test id, body, param, message fragment)
    ("model missing", {"messages": [USER]}, "model", "model: required (a non-empty string)"),
    ("model empty", with_(model=""), "model", "model: required"),
    ("model number", with_(model=4), "model", "model: required"),
    ("messages missing", {"model": "m"}, "messages", "messages: must be a non-empty array"),
    ("messages empty", with_(messages=[]), "messages", "must be a non-empty array"),
    ("messages object", with_(messages={}), "messages", "must be a non-empty array"),
    ("message not object", with_message("hi"), "messages[2]", "must be an object (got string)"),
    ("role missing", with_message({"content": "x"}), "messages[2].role", "required (one of"),
    ("role unknown", with_message({"role": "bot", "content": "x"}), "messages[2].role",
     "must be one of system, developer, user, assistant, tool, function (got 'bot')"),
    ("role array", with_message({"role": ["user"], "content": "x"}), "messages[2].role",
     "(got array)"),
    ("role object", with_message({"role": {}, "content": [{"type": "text", "text": "x"}]}),
     "messages[2].role", "(got object)"),
    ("content number", with_message({"role": "user", "content": 5}), "messages[2].content",
     "messages[2].content: expected a string or an array of content parts (got integer)"),
    ("user content null", with_message({"role": "user", "content": None}),
     "messages[2].content", "expected a string or an array of content parts (got null)"),
    ("system content missing", with_message({"role": "system"}), "messages[2].content",
     "expected a string or an array"),
    ("user content empty array", with_message({"role": "user", "content": []}),
     "messages[2].content", "must not be an empty array"),
    ("name not string", with_message({"role": "user", "content": "x", "name": 3}),
     "messages[2].name", "must be a string"),
    ("part not object", with_message({"role": "user", "content": ["x"]}),
     "messages[2].content[0]", "must be an object"),
    ("part type missing", with_message({"role": "user", "content": [{"text": "x"}]}),
     "messages[2].content[0].type", "required"),
    ("part type array", with_message({"role": "user", "content": [{"type": ["text"]}]}),
     "messages[2].content[0].type", "unknown content part type array"),
    ("part type unknown", with_message({"role": "user", "content": [{"type": "video"}]}),
     "messages[2].content[0].type", "unknown content part type 'video'"),
    ("text part text missing", with_message({"role": "user", "content": [{"type": "text"}]}),
     "messages[2].content[0].text", "must be a string (got null)"),
    ("input_audio part",
     with_message({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}),
     "messages[2].content[0].type", "content part type 'input_audio' is not supported"),
    ("file part", with_message({"role": "user", "content": [{"type": "file", "file": {}}]}),
     "messages[2].content[0].type", "content part type 'file' is not supported"),
    ("refusal part from user",
     with_message({"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}),
     "messages[2].content[0].type", "content part type 'refusal' is not supported"),
    ("image in system",
     with_message({"role": "system", "content": [{"type": "image_url", "image_url": "u"}]}),
     "messages[2].content[0].type", "image_url parts are only allowed in user messages"),
    ("image url missing",
     with_message({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}),
     "messages[2].content[0].image_url.url", "required (a non-empty URL string)"),
    ("image_url wrong type",
     with_message({"role": "user", "content": [{"type": "image_url", "image_url": 3}]}),
     "messages[2].content[0].image_url", "must be an object with a url, or a URL string"),
    ("image detail bad",
     with_message({"role": "user", "content": [
         {"type": "image_url", "image_url": {"url": "u", "detail": "ultra"}}]}),
     "messages[2].content[0].image_url.detail", "must be 'auto', 'low' or 'high'"),
    ("tool without id", with_message({"role": "tool", "content": "x"}),
     "messages[2].tool_call_id", "required for tool messages"),
    ("tool content null", with_message({"role": "tool", "tool_call_id": "c", "content": None}),
     "messages[2].content", "expected a string or an array"),
    ("tool image part", with_message({"role": "tool", "tool_call_id": "c",
                                      "content": [{"type": "image_url", "image_url": "u"}]}),
     "messages[2].content[0].type", "only allowed in user messages"),
    ("function without name", with_message({"role": "function", "content": "x"}),
     "messages[2].name", "required for function messages"),
    ("function content object", with_message({"role": "function", "name": "f", "content": {}}),
     "messages[2].content", "must be a string or null"),
    ("tool_calls not array", with_message({"role": "assistant", "tool_calls": {}}),
     "messages[2].tool_calls", "must be an array"),
    ("tool call not object", with_message({"role": "assistant", "tool_calls": [1]}),
     "messages[2].tool_calls[0]", "must be an object"),
    ("tool call id missing",
     with_message({"role": "assistant",
                   "tool_calls": [{"function": {"name": "f", "arguments": ""}}]}),
     "messages[2].tool_calls[0].id", "required"),
    ("tool call type bad", with_message({"role": "assistant", "tool_calls": [
        {"id": "c", "type": "custom", "function": {"name": "f", "arguments": ""}}]}),
     "messages[2].tool_calls[0].type", "only 'function' tool calls are supported"),
    ("tool call function missing",
     with_message({"role": "assistant", "tool_calls": [{"id": "c"}]}),
     "messages[2].tool_calls[0].function", "required"),
    ("tool call name missing", with_message({"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"arguments": "{}"}}]}),
     "messages[2].tool_calls[0].function.name", "required"),
    ("tool call arguments number", with_message({"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": 1}}]}),
     "messages[2].tool_calls[0].function.arguments", "a string of JSON"),
    ("function_call not object", with_message({"role": "assistant", "function_call": "f"}),
     "messages[2].function_call", "must be an object"),
    ("function_call and tool_calls", with_message({
        "role": "assistant",
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": ""}}],
        "function_call": {"name": "f", "arguments": ""}}),
     "messages[2].function_call", "cannot be combined with tool_calls"),
    # tools
    ("tools not array", with_(tools={}), "tools", "must be an array"),
    ("tool not object", with_(tools=["f"]), "tools[0]", "must be an object"),
    ("tool type missing", with_(tools=[{"function": {"name": "f"}}]), "tools[0].type", "required"),
    ("tool type custom", with_(tools=[{"type": "custom", "custom": {}}]), "tools[0].type",
     "only 'function' tools are supported (got 'custom')"),
    ("tool function missing", with_(tools=[{"type": "function"}]), "tools[0].function",
     "required"),
    ("tool name missing", with_(tools=[{"type": "function", "function": {}}]),
     "tools[0].function.name", "1 to 64 characters"),
    ("tool name space", with_(tools=[*TOOLS, {"type": "function", "function": {"name": "a b"}}]),
     "tools[1].function.name", "(got 'a b')"),
    ("tool name too long", with_(tools=[{"type": "function", "function": {"name": "x" * 65}}]),
     "tools[0].function.name", "1 to 64 characters"),
    ("tool name trailing newline",
     with_(tools=[{"type": "function", "function": {"name": "f\n"}}]),
     "tools[0].function.name", "1 to 64 characters"),
    ("tool description number",
     with_(tools=[{"type": "function", "function": {"name": "f", "description": 1}}]),
     "tools[0].function.description", "must be a string"),
    ("tool parameters array",
     with_(tools=[{"type": "function", "function": {"name": "f", "parameters": []}}]),
     "tools[0].function.parameters", "must be an object (got array)"),
    ("tool strict string",
     with_(tools=[{"type": "function", "function": {"name": "f", "strict": "yes"}}]),
     "tools[0].function.strict", "must be a boolean"),
    ("functions not array", with_(functions="f"), "functions", "must be an array"),
    ("functions bad name", with_(functions=[{"name": "a.b"}]), "functions[0].name",
     "1 to 64 characters"),
    ("tools and functions", with_(tools=TOOLS, functions=[{"name": "g"}]), "functions",
     "cannot be combined with tools"),
    # tool_choice
    ("tool_choice unknown", with_(tool_choice="any"), "tool_choice", "must be 'auto', 'none'"),
    ("tool_choice number", with_(tool_choice=1), "tool_choice", "(got integer)"),
    ("tool_choice array", with_(tools=TOOLS, tool_choice=["auto"]), "tool_choice", "(got array)"),
    ("function_call array", with_(function_call=["auto"]), "function_call", "(got array)"),
    ("tool_choice required no tools", with_(tool_choice="required"), "tool_choice",
     "'required' needs a non-empty tools array"),
    ("tool_choice type", with_(tools=TOOLS, tool_choice={"type": "allowed_tools"}),
     "tool_choice.type", "only 'function' is supported"),
    ("tool_choice function missing", with_(tools=TOOLS, tool_choice={"type": "function"}),
     "tool_choice.function", "required"),
    ("tool_choice name missing",
     with_(tools=TOOLS, tool_choice={"type": "function", "function": {}}),
     "tool_choice.function.name", "required"),
    ("tool_choice unknown tool",
     with_(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "g"}}),
     "tool_choice.function.name", "no tool named 'g' in tools"),
    ("tool_choice named no tools",
     with_(tool_choice={"type": "function", "function": {"name": "g"}}),
     "tool_choice.function.name", "no tool named 'g'"),
    ("function_call unknown", with_(function_call="required"), "function_call",
     "must be 'auto', 'none'"),
    ("function_call name missing", with_(functions=[{"name": "f"}], function_call={}),
     "function_call.name", "required"),
    ("function_call unknown function",
     with_(functions=[{"name": "f"}], function_call={"name": "g"}),
     "function_call.name", "no tool named 'g'"),
    ("parallel_tool_calls string", with_(parallel_tool_calls="true"), "parallel_tool_calls",
     "must be a boolean"),
    # response_format
    ("response_format string", with_(response_format="json"), "response_format",
     "must be an object"),
    ("response_format type", with_(response_format={"type": "xml"}), "response_format.type",
     "must be 'text', 'json_object' or 'json_schema' (got 'xml')"),
    ("json_schema missing", with_(response_format={"type": "json_schema"}),
     "response_format.json_schema", "required"),
    ("json_schema name missing",
     with_(response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
     "response_format.json_schema.name", "required"),
    ("json_schema schema array", with_(response_format={
        "type": "json_schema", "json_schema": {"name": "n", "schema": []}}),
     "response_format.json_schema.schema", "must be an object"),
    ("json_schema strict string", with_(response_format={
        "type": "json_schema", "json_schema": {"name": "n", "strict": "yes"}}),
     "response_format.json_schema.strict", "must be a boolean"),
    ("json_schema description number", with_(response_format={
        "type": "json_schema", "json_schema": {"name": "n", "description": 1}}),
     "response_format.json_schema.description", "must be a string"),
    # sampling and limits
    ("temperature high", with_(temperature=2.5), "temperature",
     "temperature: must be a number between 0 and 2 (got 2.5)"),
    ("temperature negative", with_(temperature=-0.1), "temperature", "between 0 and 2"),
    ("temperature bool", with_(temperature=True), "temperature", "(got boolean)"),
    ("temperature string", with_(temperature="1"), "temperature", "(got string)"),
    ("top_p high", with_(top_p=1.5), "top_p", "top_p: must be a number between 0 and 1"),
    ("top_p bool", with_(top_p=False), "top_p", "between 0 and 1"),
    ("max_tokens zero", with_(max_tokens=0), "max_tokens",
     "max_tokens: must be a positive integer (got 0)"),
    ("max_tokens negative", with_(max_tokens=-5), "max_tokens", "a positive integer"),
    ("max_tokens float", with_(max_tokens=1.5), "max_tokens", "a positive integer"),
    ("max_tokens integral float", with_(max_tokens=10.0), "max_tokens", "a positive integer"),
    ("max_tokens bool", with_(max_tokens=True), "max_tokens", "(got boolean)"),
    ("max_tokens invalid beside valid", with_(max_tokens="x", max_completion_tokens=5),
     "max_tokens", "a positive integer"),
    ("max_completion_tokens zero", with_(max_completion_tokens=0), "max_completion_tokens",
     "a positive integer"),
    ("stop number", with_(stop=1), "stop", "must be a string or an array of strings"),
    ("stop too many", with_(stop=list("abcde")), "stop", "at most 4 stop sequences"),
    ("stop item number", with_(stop=["a", 1]), "stop[1]", "must be a string"),
    ("seed float", with_(seed=1.5), "seed", "must be an integer"),
    ("seed bool", with_(seed=True), "seed", "and 9223372036854775807 (got boolean)"),
    ("seed huge", b'{"model":"m","messages":[{"role":"user","content":"x"}],"seed":1' + b"0" * 30
     + b"}", "seed", "must be an integer"),
    ("stream string", with_(stream="true"), "stream", "stream: must be a boolean (got string)"),
    ("stream int", with_(stream=1), "stream", "must be a boolean (got integer)"),
    ("stream_options array", with_(stream=True, stream_options=[]), "stream_options",
     "must be an object"),
    ("stream_options alone", with_(stream_options="yes"), "stream_options", "must be an object"),
    ("include_usage string", with_(stream=True, stream_options={"include_usage": "yes"}),
     "stream_options.include_usage", "must be a boolean"),
    ("n two", with_(n=2), "n", "n: only n=1 is supported (got 2)"),
    ("n bool", with_(n=True), "n", "must be an integer"),
    ("n string", with_(n="1"), "n", "must be an integer"),
    ("user number", with_(user=5), "user", "must be a string"),
    # pass-through extras
    ("frequency_penalty high", with_(frequency_penalty=3), "frequency_penalty",
     "between -2 and 2"),
    ("presence_penalty bool", with_(presence_penalty=True), "presence_penalty", "between -2 and 2"),
    ("logit_bias array", with_(logit_bias=[]), "logit_bias", "must be an object"),
    ("logprobs int", with_(logprobs=1), "logprobs", "must be a boolean"),
    ("top_logprobs high", with_(top_logprobs=21), "top_logprobs",
     "must be an integer between 0 and 20 (got 21)"),
    ("top_logprobs bool", with_(top_logprobs=False), "top_logprobs", "between 0 and 20"),
    ("reasoning_effort number", with_(reasoning_effort=1), "reasoning_effort", "must be a string"),
    ("metadata string", with_(metadata="x"), "metadata", "must be an object"),
    ("store string", with_(store="no"), "store", "must be a boolean"),
    ("service_tier number", with_(service_tier=1), "service_tier", "must be a string"),
    ("prediction string", with_(prediction="x"), "prediction", "must be an object"),
    ("modalities string", with_(modalities="text"), "modalities", "must be an array"),
    ("verbosity bool", with_(verbosity=True), "verbosity", "must be a string"),
    ("web_search_options array", with_(web_search_options=[]), "web_search_options",
     "must be an object"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [pytest.param(body, param, fragment, id=name) for name, body, param, fragment in REJECTIONS],
)
def test_rejection_names_the_field(body: Any, param: str, fragment: str) -> None:
    err = rejected(body)
    assert err.param == param
    assert err.message.startswith(f"{param}: "), err.message
    assert fragment in err.message
    assert str(err) == err.message


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"", "Invalid JSON in request body: "),
        (b"{", "Invalid JSON in request body: "),
        (b'{"model": NaN}', "Invalid JSON in request body: "),
        (b'{"temperature": Infinity}', "Invalid JSON in request body: "),
        (b'{"model": "\xff"}', "Invalid JSON in request body: "),
        (b"[]", "Request body must be a JSON object"),
        (b'"text"', "Request body must be a JSON object"),
        (b"null", "Request body must be a JSON object"),
        (b"3", "Request body must be a JSON object"),
    ],
)
def test_body_level_rejections(raw: bytes, fragment: str) -> None:
    err = rejected(raw)
    assert err.message.startswith(fragment)
    assert err.param is None


def test_invalid_json_message_carries_the_detail() -> None:
    err = rejected(b'{"model": "m",}')
    assert len(err.message) > len("Invalid JSON in request body: ")


def test_error_message_truncates_long_values() -> None:
    err = rejected(with_message({"role": "x" * 500, "content": "c"}))
    assert len(err.message) < 200


def test_first_error_wins_in_message_order() -> None:
    body = with_(messages=[USER, {"role": "user", "content": 1}, {"role": "nobody"}])
    assert rejected(body).param == "messages[1].content"


# --- robustness: hostile shapes never escape as anything but InvalidRequest -------------

ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    1e300,
    "",
    "x",
    "user",
    [],
    [1],
    {},
    {"a": 1},
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replaced(copy[head], rest, new)
    return copy


def test_every_field_replaced_by_every_odd_value() -> None:
    # A rich, valid request; each of its values in turn becomes each odd value.
    valid: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "s"}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            {"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "r"},
            {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
            {"role": "function", "name": "f", "content": "r"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}},
        "stream": True,
        "stream_options": {"include_usage": True},
        "stop": ["a"],
        "temperature": 1,
        "max_tokens": 3,
        "logit_bias": {"1": 1},
    }  # fmt: skip
    parse_chat_request(orjson.dumps(valid))
    accepted, errors = 0, []
    for path in _paths(valid)[1:]:
        for odd in ODD_VALUES:
            try:
                parse_chat_request(orjson.dumps(_replaced(valid, path, odd)))
            except InvalidRequest as err:
                errors.append((_render(path), err))
            else:
                accepted += 1
    assert accepted > 0
    assert len(errors) > 100
    for where, err in errors:
        assert err.param is not None
        assert err.message.startswith(f"{err.param}: ")
        # The error names the replaced field, one inside it, one containing it or a sibling
        # (a changed role changes what content may be), except where a rule spans the
        # request (a named tool_choice must name a tool that exists).
        parent = where.rsplit(".", 1)[0]
        related = where.startswith(err.param) or err.param.startswith(parent)
        assert related or err.param == "tool_choice.function.name", (
            where,
            err.message,
        )


def _render(path: tuple[Any, ...]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f".{step}" if out else step
    return out
