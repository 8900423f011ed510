"""Parse and validate a user-supplied tools list (OpenAI function-tool schemas).

The accepted shape is what OpenAI's and vLLM's chat APIs take::

    [{"type": "function",
      "function": {"name": "get_weather", "description": "...",
                   "parameters": {"type": "object", "properties": {...}, "required": [...]}}}]

A bare function object (``{"name": ..., "parameters": ...}``) is accepted too and wrapped.
Errors name the offending tool by position and say what is wrong.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dots3_demo import vllm_compat

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_JSON_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}


class ToolSchemaError(ValueError):
    """A tools list that cannot be used; the message says which tool and why."""


def parse_tools_json(text: str | None) -> list[dict[str, Any]]:
    """Parse ``text`` (a JSON array of tools; empty means no tools) into validated tool dicts."""
    if text is None or not text.strip():
        return []
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ToolSchemaError(
            f"tools are not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from exc
    except ToolSchemaError:
        raise
    except RecursionError:
        raise ToolSchemaError("tools JSON is nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's 4,300-digit limit
        raise ToolSchemaError(f"tools JSON holds a value that cannot be read: {exc}") from None
    if isinstance(data, dict):
        data = [data]
    return validate_tools(data)


def _reject_constant(name: str) -> Any:
    """``json.loads`` hook: Python reads ``NaN`` / ``Infinity``, but they are not JSON."""
    raise ToolSchemaError(f"tools JSON holds {name}, which JSON does not allow (use a number or null)")


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (``array``, ``string`` …), for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(type(value), type(value).__name__)


def validate_tools(tools: Any) -> list[dict[str, Any]]:
    """Validate a list of tools and return it in the canonical ``{"type": "function", ...}`` form, as vLLM's OpenAI
    server reads it (``vllm_compat.served_tools``: its field order, ``description`` null where none is given)."""
    if not isinstance(tools, list):
        raise ToolSchemaError(f"tools must be a JSON array, got {json_type(tools)}")
    result: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tool #{index + 1}"
        if not isinstance(tool, dict):
            raise ToolSchemaError(f"{where}: must be an object, got {json_type(tool)}")
        if "function" in tool or "type" in tool:
            if tool.get("type", "function") != "function":
                raise ToolSchemaError(f"{where}: type must be \"function\", got {tool.get('type')!r}")
            function = tool.get("function")
        else:
            function = tool  # a bare function object
        if not isinstance(function, dict):
            raise ToolSchemaError(f"{where}: \"function\" must be an object")
        name = function.get("name")
        if name is None or name == "":
            raise ToolSchemaError(f"{where}: function.name is missing")
        if not isinstance(name, str):
            raise ToolSchemaError(f"{where}: function.name must be a string, got {json_type(name)}")
        where = f"tool #{index + 1} ({name})"
        if not _NAME_RE.match(name):
            raise ToolSchemaError(f"{where}: name may use only letters, digits, _ and - (1-64 chars)")
        if name in seen:
            raise ToolSchemaError(f"{where}: duplicate tool name")
        seen.add(name)
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise ToolSchemaError(f"{where}: description must be a string")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        _validate_parameters(parameters, where)
        unknown = set(function) - {"name", "description", "parameters", "strict"}
        if unknown:
            raise ToolSchemaError(f"{where}: unknown function field(s): {', '.join(sorted(unknown))}")
        canonical: dict[str, Any] = {"name": name, "parameters": parameters}
        if description is not None:
            canonical["description"] = description
        if "strict" in function:
            canonical["strict"] = function["strict"]
        result.append({"type": "function", "function": canonical})
    # as vLLM's server renders them: what the studio's prompt holds is what a `vllm serve` prompt holds
    return vllm_compat.served_tools(result)


def _validate_parameters(parameters: Any, where: str) -> None:
    if not isinstance(parameters, dict):
        raise ToolSchemaError(f"{where}: parameters must be a JSON-schema object")
    if parameters.get("type", "object") != "object":
        raise ToolSchemaError(f"{where}: parameters.type must be \"object\", got {parameters.get('type')!r}")
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolSchemaError(f"{where}: parameters.properties must be an object")
    for prop, schema in properties.items():
        if not isinstance(schema, dict):
            raise ToolSchemaError(f"{where}: property {prop!r} must be a schema object")
        kind = schema.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
        for k in kinds:
            if k not in _JSON_TYPES:
                raise ToolSchemaError(f"{where}: property {prop!r} has unknown type {k!r}")
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ToolSchemaError(f"{where}: parameters.required must be a list of names")
    missing = [r for r in required if r not in properties]
    if missing:
        raise ToolSchemaError(f"{where}: required names no property: {', '.join(missing)}")
