"""Streaming tool-call parsing with vLLM's ``DotsToolParser`` (called, not re-implemented).

Feed the model's text deltas in order; each :meth:`StreamingToolCallParser.feed` returns the
normal text that is safe to show now, and :attr:`~StreamingToolCallParser.calls` holds every
tool call parsed so far (:class:`~dots3_demo.tools.calls.ToolCall`, "writing" while its block is
still open, then "called"). Call :meth:`~StreamingToolCallParser.finish` once generation ends: it
returns text the parser was still holding back (a trailing partial ``<dots_`` tag, via vLLM's
``flush_pending_normal_text()``, which vLLM's own server never calls), and the raw text of a
``<dots_function_call>`` block that never closed (e.g. the model hit ``max_tokens``), so
nothing the model wrote is silently lost.

The Dots format (see vLLM's ``tool_parsers/dots_tool_parser.py``)::

    <dots_function_call>
    <invoke name="search">
    <parameter name="query">weather in Shanghai</parameter>
    </invoke>
    </dots_function_call>

or a JSON object ``{"name": ..., "arguments": {...}}`` inside the same wrapper. Calls to tool
names that are not in ``tools`` are dropped by vLLM and their block comes back as text.
"""

from __future__ import annotations

from typing import Any

from dots3_demo import vllm_compat
from dots3_demo.tools.calls import ToolCall, ToolCallAccumulator, ToolCallDelta

TOOL_CALL_START = "<dots_function_call>"
TOOL_CALL_END = "</dots_function_call>"


class StreamingToolCallParser:
    """Incremental tool-call extraction over a stream of text deltas, for one generation."""

    def __init__(self, tools: list[dict[str, Any]] | None) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        self.tools = list(tools or [])
        # The request is only a carrier for ``tools``: DotsToolParser reads ``request.tools``.
        self._request = ChatCompletionRequest.model_validate(
            {"messages": [{"role": "user", "content": ""}], "tools": self.tools or None}
        )
        parser_class = vllm_compat.dots_tool_parser_class()
        # DotsToolParser never reads its tokenizer; it only needs the request's tools.
        self._parser = parser_class(None, self._request.tools)
        self._raw = ""
        self._calls = ToolCallAccumulator()
        self._emitted_at: dict[int, int] = {}  # call index -> raw length when it appeared
        self._finished = False

    @property
    def enabled(self) -> bool:
        """False when no tools were given: then tool tags are never parsed (plain text)."""
        return bool(self.tools)

    @property
    def raw_text(self) -> str:
        return self._raw

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return self._calls.calls

    @property
    def in_tool_block(self) -> bool:
        """True while a ``<dots_function_call>`` block is open (the model is writing a call)."""
        start = self._raw.rfind(TOOL_CALL_START)
        return start != -1 and self._raw.find(TOOL_CALL_END, start) == -1

    def calls_in_open_block(self) -> bool:
        """True when a call was already parsed from the block that is still open (JSON form)."""
        start = self._raw.rfind(TOOL_CALL_START)
        if start == -1 or self._raw.find(TOOL_CALL_END, start) != -1:
            return False
        return any(at > start for at in self._emitted_at.values())

    def feed(self, delta: str) -> str:
        """Consume one text delta; return the normal (non-tool) text to show now."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        if not delta:
            return ""
        if not self.enabled:
            self._raw += delta
            return delta
        previous = self._raw
        self._raw += delta
        message = self._parser.extract_tool_calls_streaming(
            previous_text=previous,
            current_text=self._raw,
            delta_text=delta,
            previous_token_ids=[],
            current_token_ids=[],
            delta_token_ids=[],
            request=self._request,
        )
        if message is None:
            return ""
        for tool_delta in message.tool_calls or []:
            self._apply(tool_delta)
        return message.content or ""

    def _apply(self, tool_delta: ToolCallDelta) -> None:
        # A call stays "writing" while its block is still open (JSON form may keep growing).
        if self._calls.add(tool_delta, writing=self.in_tool_block):
            self._emitted_at[tool_delta.index] = len(self._raw)

    def finish(self) -> str:
        """End of generation: return held-back text (partial tag, unclosed block)."""
        if self._finished:
            return ""
        self._finished = True
        if not self.enabled:
            return ""
        tail: str = self._parser.flush_pending_normal_text()
        start = self._raw.rfind(TOOL_CALL_START)
        if start != -1 and self._raw.find(TOOL_CALL_END, start) == -1:
            if not self.calls_in_open_block():
                # Never closed and nothing parsed from it: give the model's text back as text.
                tail += self._raw[start:]
        self._calls.settle()
        return tail
