"""Tool schemas, the example tool executor and streaming tool-call parsing (vLLM's DotsToolParser)."""

from dots3_demo.tools.examples import EXAMPLE_TOOLS, ToolExecutionError, evaluate_expression, run_example_tool
from dots3_demo.tools.schemas import ToolSchemaError, parse_tools_json, validate_tools
from dots3_demo.tools.streaming import StreamingToolCallParser, ToolCallState

__all__ = [
    "EXAMPLE_TOOLS",
    "StreamingToolCallParser",
    "ToolCallState",
    "ToolExecutionError",
    "ToolSchemaError",
    "evaluate_expression",
    "parse_tools_json",
    "run_example_tool",
    "validate_tools",
]
