"""vLLM's DotsToolParser driven through StreamingToolCallParser on chunked deltas."""

from __future__ import annotations

import json

import pytest

from dots3_demo.tools import EXAMPLE_TOOLS, StreamingToolCallParser

CHUNK_SIZES = [1, 3, 7, None]  # None = the whole text in one delta


def _chunks(text: str, size: int | None) -> list[str]:
    if size is None:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def _run(text: str, size: int | None, tools=EXAMPLE_TOOLS) -> tuple[str, StreamingToolCallParser]:
    parser = StreamingToolCallParser(tools)
    shown = "".join(parser.feed(chunk) for chunk in _chunks(text, size))
    shown += parser.finish()
    return shown, parser


def _invoke(name: str, **params: str) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f'<invoke name="{name}">\n{body}</invoke>\n'


@pytest.mark.parametrize("size", CHUNK_SIZES)
def test_several_invokes_with_text_around(size):
    text = (
        "Let me check. "
        "<dots_function_call>\n"
        + _invoke("get_weather", city="Shanghai", unit="celsius")
        + _invoke("search", query="Shanghai events", top_k="3")
        + "</dots_function_call>"
        " Done."
    )
    shown, parser = _run(text, size)
    assert shown == "Let me check.  Done."
    calls = parser.calls
    assert [c.name for c in calls] == ["get_weather", "search"]
    assert json.loads(calls[0].arguments) == {"city": "Shanghai", "unit": "celsius"}
    # schema type coercion: top_k is an integer in the schema
    assert json.loads(calls[1].arguments) == {"query": "Shanghai events", "top_k": 3}
    assert all(c.status == "called" for c in calls)
    assert len({c.id for c in calls}) == 2 and all(c.id for c in calls)


@pytest.mark.parametrize("size", CHUNK_SIZES)
def test_two_blocks(size):
    text = (
        "<dots_function_call>" + _invoke("calculator", expression="1+1") + "</dots_function_call>"
        "and<dots_function_call>" + _invoke("calculator", expression="2*3") + "</dots_function_call>"
    )
    shown, parser = _run(text, size)
    assert shown == "and"
    assert [json.loads(c.arguments)["expression"] for c in parser.calls] == ["1+1", "2*3"]


def test_type_coercion_object_number_boolean():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "configure",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "ratio": {"type": "number"},
                        "enabled": {"type": "boolean"},
                        "options": {"type": "object"},
                        "label": {"type": "string"},
                    },
                },
            },
        }
    ]
    text = "<dots_function_call>" + _invoke(
        "configure", ratio="0.5", enabled="true", options='{"a": [1, 2]}', label="42"
    ) + "</dots_function_call>"
    _, parser = _run(text, 5, tools)
    assert json.loads(parser.calls[0].arguments) == {
        "ratio": 0.5,
        "enabled": True,
        "options": {"a": [1, 2]},
        "label": "42",
    }


@pytest.mark.parametrize("size", CHUNK_SIZES)
def test_json_fallback(size):
    text = 'Sure <dots_function_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</dots_function_call>'
    shown, parser = _run(text, size)
    assert shown == "Sure "
    assert len(parser.calls) == 1
    assert parser.calls[0].name == "calculator"
    assert json.loads(parser.calls[0].arguments) == {"expression": "6*7"}


@pytest.mark.parametrize("size", CHUNK_SIZES)
def test_unknown_tool_comes_back_as_text(size):
    text = "A<dots_function_call>" + _invoke("launch_rocket", target="moon") + "</dots_function_call>B"
    shown, parser = _run(text, size)
    assert parser.calls == ()
    assert shown.startswith("A") and shown.endswith("B")
    assert "launch_rocket" in shown and "moon" in shown


@pytest.mark.parametrize("size", CHUNK_SIZES)
def test_trailing_partial_tag_is_not_lost(size):
    text = "The tag starts with <dots_"
    parser = StreamingToolCallParser(EXAMPLE_TOOLS)
    streamed = "".join(parser.feed(c) for c in _chunks(text, size))
    assert streamed == "The tag starts with "  # held back while it could still be a tag
    assert parser.finish() == "<dots_"


def test_unclosed_block_is_returned_as_text():
    text = "x<dots_function_call>\n<invoke name=\"search\">\n<parameter name=\"query\">cut off"
    shown, parser = _run(text, 4)
    assert parser.calls == ()
    assert shown == text


def test_open_block_is_reported_while_streaming():
    parser = StreamingToolCallParser(EXAMPLE_TOOLS)
    parser.feed("hi <dots_function_call>\n<invoke name=\"search\">")
    assert parser.in_tool_block
    parser.feed('<parameter name="query">q</parameter></invoke></dots_function_call>')
    assert not parser.in_tool_block
    assert parser.calls[0].name == "search"


def test_no_tools_means_plain_text():
    text = "<dots_function_call>" + _invoke("search", query="q") + "</dots_function_call>"
    shown, parser = _run(text, 3, tools=[])
    assert shown == text
    assert parser.calls == ()


def test_feed_after_finish_raises():
    parser = StreamingToolCallParser(EXAMPLE_TOOLS)
    parser.finish()
    with pytest.raises(RuntimeError):
        parser.feed("x")
