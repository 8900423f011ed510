"""Tool choice "required": the regex admits exactly one well-formed Dots XML call, which vLLM's own
DotsToolParser parses (the real engine's structured outputs are exercised in tests/real_engine)."""

from __future__ import annotations

import json
import re

import pytest

from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.tools.forcing import tool_call_regex
from dots3_demo.tools.streaming import StreamingToolCallParser

TYPED = [{"type": "function", "function": {"name": "set_alarm", "parameters": {
    "type": "object", "required": ["hour", "loud"],
    "properties": {"hour": {"type": "integer"}, "loud": {"type": "boolean"},
                   "tone": {"type": "string", "enum": ["beep", "chime"]}, "snooze": {"type": "number"}}}}}]


def call(name: str, **arguments) -> str:
    params = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in arguments.items())
    return f'<dots_function_call>\n<invoke name="{name}">\n{params}</invoke>\n</dots_function_call>'


def parsed(text: str, tools) -> list[tuple[str, dict]]:
    parser = StreamingToolCallParser(tools)
    parser.feed(text)
    parser.finish()
    return [(c.name, json.loads(c.arguments)) for c in parser.calls]


@pytest.mark.parametrize("text", [
    call("get_weather", city="Paris"),
    call("get_weather", city="Paris", unit="celsius"),
    call("calculator", expression="2 * (3 + 4)"),
])
def test_a_well_formed_call_is_admitted_and_parsed_by_vllm(text):
    assert re.fullmatch(tool_call_regex(EXAMPLE_TOOLS), text)
    name, arguments = parsed(text, EXAMPLE_TOOLS)[0]
    assert name in text and all(str(v) in text for v in arguments.values())


@pytest.mark.parametrize("text", [
    "Sure! " + call("get_weather", city="Paris"),  # text around the call
    call("get_weather"),  # a required parameter missing
    call("get_time", city="Paris"),  # not one of the tools
    call("get_weather", city="a<b"),  # "<" would end the value early
    call("get_weather", city="line\nbreak"),  # control characters are not printable text
    call("get_weather", city="Paris") * 2,  # exactly one call
])
def test_anything_else_is_not(text):
    assert not re.fullmatch(tool_call_regex(EXAMPLE_TOOLS), text)


def test_values_follow_their_schema_types():
    pattern = tool_call_regex(TYPED)
    good = call("set_alarm", hour=7, loud="true", tone="chime", snooze=2.5)
    assert re.fullmatch(pattern, good)
    assert parsed(good, TYPED) == [("set_alarm", {"hour": 7, "loud": True, "tone": "chime", "snooze": 2.5})]
    assert not re.fullmatch(pattern, call("set_alarm", hour="seven", loud="true"))
    assert not re.fullmatch(pattern, call("set_alarm", hour=7, loud="yes"))
    assert not re.fullmatch(pattern, call("set_alarm", hour=7, loud="true", tone="siren"))


def test_no_tools_no_forced_call():
    with pytest.raises(ValueError):
        tool_call_regex([])
