"""Engines the UI talks to (see ``protocol.ChatEngine``): in-process vLLM or a remote endpoint.

Import the adapters from their modules (``engine.inprocess``, ``engine.remote``; the engine
arguments' defaults from ``engine.args``; the flags that choose an engine are in ``dots3_demo.cli.engine``);
this package imports no vLLM code itself.
"""

from dots3_demo.engine.protocol import (
    ChatEngine,
    EngineStatus,
    EngineUnavailable,
    PromptTokens,
    RequestRefused,
    SamplingSettings,
    ToolCall,
    ToolCallStatus,
    TurnDelta,
    TurnRejected,
    TurnRequest,
    TurnStats,
    new_request_id,
)

__all__ = [
    "ChatEngine",
    "EngineStatus",
    "EngineUnavailable",
    "PromptTokens",
    "RequestRefused",
    "SamplingSettings",
    "ToolCall",
    "ToolCallStatus",
    "TurnDelta",
    "TurnRejected",
    "TurnRequest",
    "TurnStats",
    "new_request_id",
]
