"""Split ``<think>...</think>`` reasoning from the answer, incrementally, and assemble a turn.

:class:`ReasoningSplitter` holds back a partial tag at the end of a delta (``"<thi"``) until the
next delta decides it, so a tag split across deltas never leaks into the answer.
:class:`TurnAssembler` chains it with the tool-call parser: reasoning first, then the answer
text goes through vLLM's DotsToolParser (tool calls are never looked for inside reasoning).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dots3_demo.tools.calls import ToolCall
from dots3_demo.tools.streaming import StreamingToolCallParser

THINK_START = "<think>"
THINK_END = "</think>"


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class ReasoningSplitter:
    """Route text between ``<think>`` and ``</think>`` to reasoning, the rest to the answer.

    ``starts_in_reasoning=True`` is for chat templates that open ``<think>`` in the generation
    prompt (the model then only writes ``</think>``).
    """

    def __init__(self, starts_in_reasoning: bool = False) -> None:
        self._in_reasoning = starts_in_reasoning
        self._pending = ""

    @property
    def in_reasoning(self) -> bool:
        return self._in_reasoning

    def feed(self, delta: str) -> tuple[str, str]:
        """Return ``(reasoning, answer)`` text that is safe to show now."""
        buffer = self._pending + delta
        self._pending = ""
        reasoning: list[str] = []
        answer: list[str] = []
        while buffer:
            tag = THINK_END if self._in_reasoning else THINK_START
            sink = reasoning if self._in_reasoning else answer
            at = buffer.find(tag)
            if at != -1:
                sink.append(buffer[:at])
                buffer = buffer[at + len(tag):]
                self._in_reasoning = not self._in_reasoning
                continue
            keep = _partial_suffix(buffer, tag)
            sink.append(buffer[: len(buffer) - keep])
            self._pending = buffer[len(buffer) - keep:]
            break
        return "".join(reasoning), "".join(answer)

    def finish(self) -> tuple[str, str]:
        """Flush a held-back partial tag as plain text."""
        pending, self._pending = self._pending, ""
        return (pending, "") if self._in_reasoning else ("", pending)


@dataclass
class AssembledStep:
    reasoning: str
    text: str
    tool_calls: tuple[ToolCall, ...]
    writing_tool_call: bool


class TurnAssembler:
    """Raw model text deltas -> (reasoning, answer text, tool calls so far)."""

    def __init__(self, tools: list[dict[str, Any]] | None, starts_in_reasoning: bool = False) -> None:
        self._splitter = ReasoningSplitter(starts_in_reasoning)
        self._tools = StreamingToolCallParser(tools)

    def feed(self, delta: str) -> AssembledStep:
        reasoning, answer = self._splitter.feed(delta)
        text = self._tools.feed(answer) if answer else ""
        return self._step(reasoning, text)

    def finish(self) -> AssembledStep:
        reasoning, answer = self._splitter.finish()
        text = self._tools.feed(answer) if answer else ""
        text += self._tools.finish()
        return self._step(reasoning, text)

    def _step(self, reasoning: str, text: str) -> AssembledStep:
        return AssembledStep(
            reasoning=reasoning,
            text=text,
            tool_calls=self._tools.calls,
            writing_tool_call=self._tools.in_tool_block and not self._tools.calls_in_open_block(),
        )
