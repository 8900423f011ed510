"""Tool schemas, the example tool executor, streaming tool-call parsing (vLLM's DotsToolParser) and
the one shape of a tool call (``ToolCall``)."""

from dots3_demo.tools.calls import ToolCall, ToolCallAccumulator, ToolCallStatus
from dots3_demo.tools.examples import EXAMPLE_TOOLS, ToolExecutionError, evaluate_expression, run_example_tool
from dots3_demo.tools.schemas import ToolSchemaError, parse_tools_json, validate_tools
from dots3_demo.tools.streaming import StreamingToolCallParser

__all__ = [
    "EXAMPLE_TOOLS",
    "StreamingToolCallParser",
    "ToolCall",
    "ToolCallAccumulator",
    "ToolCallStatus",
    "ToolExecutionError",
    "ToolSchemaError",
    "evaluate_expression",
    "parse_tools_json",
    "run_example_tool",
    "validate_tools",
]
