"""Example tools for the tool-call round trip, and their built-in executor.

The weather and search tools return canned, clearly-labelled example data (the demo has no
network services); the calculator really computes, with an ``ast`` walker (no ``eval``).
"""

from __future__ import annotations

import ast
import json
import math
import operator
from collections.abc import Callable
from typing import Any

EXAMPLE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Shanghai"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web and return the top results.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "top_k": {"type": "integer", "description": "number of results (1-5)"},
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression (+ - * / // % **, parentheses, "
            "sqrt, sin, cos, tan, log, exp, abs, round, pi, e).",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
]


class ToolExecutionError(ValueError):
    """The example executor could not run a call; the message is shown as the tool result."""


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "log": math.log,
    "exp": math.exp,
    "abs": abs,
    "round": round,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
_MAX_EXPRESSION = 200
_MAX_POWER = 1000
_MAX_MAGNITUDE = 1e100


def evaluate_expression(expression: object) -> int | float:
    """Evaluate an arithmetic expression safely (numbers, operators, a few math functions); anything
    but a non-empty string (e.g. a model's ``null`` argument) raises ``ToolExecutionError``."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolExecutionError("expression is empty")
    if len(expression) > _MAX_EXPRESSION:
        raise ToolExecutionError(f"expression longer than {_MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolExecutionError(f"not an arithmetic expression: {exc.msg}") from exc
    try:
        value = _eval_node(tree.body)
    except ZeroDivisionError as exc:
        raise ToolExecutionError("division by zero") from exc
    except (OverflowError, ValueError) as exc:
        raise ToolExecutionError(f"math error: {exc}") from exc
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _eval_node(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_POWER:
            raise ToolExecutionError(f"exponent larger than {_MAX_POWER}")
        return _checked(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval_node(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
        and 1 <= len(node.args) <= 2
    ):
        return _checked(_FUNCTIONS[node.func.id](*(_eval_node(a) for a in node.args)))
    raise ToolExecutionError(f"unsupported element: {ast.dump(node)[:60]}")


def _checked(value: Any) -> int | float:
    if isinstance(value, complex) or not isinstance(value, (int, float)):
        raise ToolExecutionError("result is not a real number")
    if abs(value) > _MAX_MAGNITUDE:
        raise ToolExecutionError("result too large")
    return value


def _weather(args: dict[str, Any]) -> dict[str, Any]:
    city = args.get("city")
    if not isinstance(city, str) or not city.strip():
        raise ToolExecutionError("get_weather needs a city")
    unit = args.get("unit", "celsius")
    celsius = 21
    temperature = celsius if unit != "fahrenheit" else round(celsius * 9 / 5 + 32)
    return {
        "city": city,
        "temperature": temperature,
        "unit": "fahrenheit" if unit == "fahrenheit" else "celsius",
        "condition": "partly cloudy",
        "note": "example data from the demo's built-in tool, not a weather service",
    }


def _search(args: dict[str, Any]) -> dict[str, Any]:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolExecutionError("search needs a query")
    top_k = args.get("top_k", 3)
    if not isinstance(top_k, int) or isinstance(top_k, bool):
        raise ToolExecutionError("top_k must be an integer")
    top_k = max(1, min(5, top_k))
    return {
        "query": query,
        "results": [
            {"title": f"Example result {i + 1} for {query!r}", "url": f"https://example.com/{i + 1}"}
            for i in range(top_k)
        ],
        "note": "example data from the demo's built-in tool, not a search engine",
    }


def _calculator(args: dict[str, Any]) -> dict[str, Any]:
    expression = args.get("expression")
    return {"expression": expression, "result": evaluate_expression(expression)}


_EXECUTORS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "get_weather": _weather,
    "search": _search,
    "calculator": _calculator,
}


def run_example_tool(name: str, arguments: str | dict[str, Any]) -> str:
    """Run one of ``EXAMPLE_TOOLS``; return the tool message content (a JSON string).

    Failures come back as ``{"error": "..."}`` so the model sees them, as a real tool would
    report. Unknown tool names and malformed arguments are reported the same way.
    """
    try:
        if isinstance(arguments, str):
            try:
                args = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise ToolExecutionError(f"arguments are not valid JSON: {exc.msg}") from exc
        else:
            args = arguments
        if not isinstance(args, dict):
            raise ToolExecutionError("arguments must be a JSON object")
        executor = _EXECUTORS.get(name)
        if executor is None:
            raise ToolExecutionError(f"no built-in executor for tool {name!r}")
        return json.dumps(executor(args), ensure_ascii=False)
    except ToolExecutionError as exc:
        return json.dumps({"error": str(exc)}, ensure_ascii=False)
