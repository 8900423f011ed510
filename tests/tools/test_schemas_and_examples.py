"""parse_tools_json validation and the example tool executor (safe calculator)."""

from __future__ import annotations

import json

import pytest

from dots3_demo.tools import (
    EXAMPLE_TOOLS,
    ToolExecutionError,
    ToolSchemaError,
    evaluate_expression,
    parse_tools_json,
    run_example_tool,
)


def test_example_tools_validate_roundtrip():
    assert parse_tools_json(json.dumps(EXAMPLE_TOOLS)) == EXAMPLE_TOOLS


def test_empty_means_no_tools():
    assert parse_tools_json("") == []
    assert parse_tools_json("   ") == []
    assert parse_tools_json(None) == []


def test_bare_function_is_wrapped():
    tools = parse_tools_json('[{"name": "f", "parameters": {"type": "object", "properties": {}}}]')
    assert tools == [{"type": "function", "function": {"name": "f", "description": None,
                                                       "parameters": {"type": "object", "properties": {}}}}]


def test_tools_come_back_as_vllms_server_hands_them_to_the_template():
    """The chat template writes the tools with ``tojson``, keys in order: the studio's tools must be the server's
    (vLLM's ``ChatCompletionToolsParam`` dumped again), or a prompt with tools differs from a ``vllm serve`` one."""
    text = '[{"function": {"parameters": {"type": "object", "properties": {}}, "description": "d", "name": "f"}}]'
    (tool,) = parse_tools_json(text)
    assert list(tool) == ["type", "function"] and list(tool["function"]) == ["name", "description", "parameters"]
    assert parse_tools_json(json.dumps([tool])) == [tool]  # as a server reads it again: unchanged


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[{", "not valid JSON (line 1"),
        ('"x"', "must be a JSON array"),
        ("[1]", "tool #1: must be an object"),
        ('[{"type": "retrieval"}]', 'type must be "function"'),
        ('[{"type": "function", "function": {}}]', "function.name is missing"),
        ('[{"type": "function", "function": {"name": "a b"}}]', "letters, digits"),
        ('[{"name": "f"}, {"name": "f"}]', "tool #2 (f): duplicate"),
        ('[{"name": "f", "parameters": {"type": "array"}}]', 'parameters.type must be "object"'),
        ('[{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "str"}}}}]',
         "unknown type 'str'"),
        ('[{"name": "f", "parameters": {"type": "object", "properties": {}, "required": ["x"]}}]',
         "required names no property: x"),
        ('[{"name": "f", "params": {}}]', "unknown function field(s): params"),
    ],
)
def test_parse_errors_are_clear(text, fragment):
    with pytest.raises(ToolSchemaError) as info:
        parse_tools_json(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("expression", "value"),
    [("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("2 ** 10", 1024), ("7 // 2", 3), ("7 % 4", 3),
     ("-3 + +1", -2), ("sqrt(16) + abs(-2)", 6), ("round(2.567, 2)", 2.57), ("10 / 4", 2.5)],
)
def test_calculator_computes(expression, value):
    assert evaluate_expression(expression) == value


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "open('/etc/passwd')", "().__class__", "x + 1",
     "[1, 2]", "lambda: 1", "9 ** 9 ** 9", "1 / 0", "'a' * 3", "sqrt(-1)", ""],
)
def test_calculator_refuses_unsafe_or_invalid(expression):
    with pytest.raises(ToolExecutionError):
        evaluate_expression(expression)


def test_run_example_tool_returns_json_results_and_errors():
    assert json.loads(run_example_tool("calculator", '{"expression": "6*7"}'))["result"] == 42
    weather = json.loads(run_example_tool("get_weather", {"city": "Paris", "unit": "fahrenheit"}))
    assert weather["city"] == "Paris" and weather["unit"] == "fahrenheit" and "example" in weather["note"]
    assert len(json.loads(run_example_tool("search", {"query": "q", "top_k": 2}))["results"]) == 2
    assert "error" in json.loads(run_example_tool("calculator", '{"expression": "os.system(1)"}'))
    assert "no built-in executor" in json.loads(run_example_tool("nope", "{}"))["error"]
    assert "not valid JSON" in json.loads(run_example_tool("search", "{bad"))["error"]
