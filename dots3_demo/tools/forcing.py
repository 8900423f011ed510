"""Tool choice "required": force one Dots XML tool call with vLLM's structured outputs.

vLLM's ``DotsToolParser`` does not support ``tool_choice="required"`` or a named tool
(``supports_required_and_named = False``: the server falls back to "auto"). The studio forces a call
the other way round: it constrains decoding (``StructuredOutputsParams(regex=…)`` in-process,
``structured_outputs: {"regex": …}`` on the wire) to a regular expression that admits exactly one
well-formed call of one of the given tools, in the format the parser reads::

    <dots_function_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </dots_function_call>

Every required parameter is written, in schema order; optional ones may be. A value's shape follows
its JSON-schema type (a string is printable text without ``<``, so ``</parameter>`` always closes it; numbers,
integers and booleans are literals; an ``enum`` is one of its values; objects and arrays are a
bounded JSON text without ``<``). The tags are written as text, so on a checkpoint whose tokenizer
has ``<dots_function_call>`` as one special token the forced call is spelled with ordinary tokens;
the parser reads text, so it parses the same.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOOL_CHOICES = ("auto", "required")

PRINTABLE = r"[^<\x00-\x1f\x7f]"  # no "<" (so "</parameter>" always closes a value), no control characters
STRING_VALUE = PRINTABLE + "{1,64}"
JSON_VALUE = r"[\[{]" + PRINTABLE + r"{0,62}[\]}]"
_BY_TYPE = {
    "string": STRING_VALUE,
    "integer": r"-?[0-9]{1,9}",
    "number": r"-?[0-9]{1,9}(\.[0-9]{1,6})?",
    "boolean": r"(true|false)",
    "null": r"null",
    "object": JSON_VALUE,
    "array": JSON_VALUE,
}


def _value_pattern(schema: Any) -> str:
    if not isinstance(schema, dict):
        return STRING_VALUE
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        options = [v if isinstance(v, str) else json.dumps(v) for v in schema["enum"]]
        return "(" + "|".join(re.escape(o) for o in options if "<" not in o and "\n" not in o) + ")"
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return _BY_TYPE.get(str(kind), STRING_VALUE)


def _invoke_pattern(tool: dict[str, Any]) -> str:
    function = tool.get("function", tool)
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    parts = [rf'<invoke name="{re.escape(function["name"])}">\n']
    for name, schema in properties.items():
        parameter = rf'<parameter name="{re.escape(name)}">{_value_pattern(schema)}</parameter>\n'
        parts.append(parameter if name in required else f"({parameter})?")
    parts.append(r"</invoke>\n")
    return "".join(parts)


def tool_call_regex(tools: list[dict[str, Any]]) -> str:
    """A regex that admits exactly one Dots XML call of one of ``tools`` (OpenAI function schemas)."""
    if not tools:
        raise ValueError("tool choice 'required' needs at least one tool")
    invokes = "|".join(f"({_invoke_pattern(tool)})" for tool in tools)
    return rf"<dots_function_call>\n({invokes})</dots_function_call>"
