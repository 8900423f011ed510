"""The one reply accumulator (no Gradio): the engine's deltas → a reply as it stands (text, reasoning, tool calls,
figures, finish, the engine's notices on how it was served). The chat, compare, ``app.py eval`` and ``app.py smoke``
all accumulate their streams with :meth:`Reply.add`, so what a reply is, and when it changed enough to be shown at
once, is written once.

A :class:`Reply` is frozen: each delta gives a new one, so a snapshot that a page shows or a session keeps never
changes under it. Its :attr:`~Reply.answer` is the reply as the session records it (``core.records.Answer``, with
the setting it ran with).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from dots3_demo.core.records import Answer
from dots3_demo.engine.protocol import ToolCall, TurnDelta, TurnStats

# planned: not sent (compare's preview); waiting: for the engine to load; refused: never sent (why in the answer's
# error); streaming → done (the engine finished it) | stopped (Stop, a closed tab) | failed (the engine failed)
ReplyState = Literal["planned", "refused", "waiting", "streaming", "done", "stopped", "failed"]
ENDED: tuple[ReplyState, ...] = ("done", "refused", "failed", "stopped")


@dataclass(frozen=True)
class Reply:
    """One reply as it stands: its :class:`Answer` so far, where it is, whether a tool call is being written (a
    call begun, nothing parsed from it yet) and the engine's notices."""

    answer: Answer = field(default_factory=Answer)
    state: ReplyState = "planned"
    writing_tool_call: bool = False
    notices: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return self.answer.text

    @property
    def reasoning(self) -> str:
        return self.answer.reasoning

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.answer.tool_calls

    @property
    def stats(self) -> TurnStats:
        return self.answer.stats or TurnStats()

    @property
    def finished(self) -> bool:
        """It will change no more: the engine finished it, or it was refused, failed or stopped."""
        return self.state in ENDED

    @property
    def finish_reason(self) -> str | None:
        return self.answer.finish_reason

    def add(self, delta: TurnDelta) -> Reply:
        """This reply with ``delta`` applied (text and reasoning are increments, tool calls are all so far, stats
        are the figures so far); ``done`` once the engine says it finished."""
        a = self.answer
        calls = delta.tool_calls if delta.tool_calls or delta.finished else a.tool_calls
        answer = replace(a, text=a.text + delta.text, reasoning=a.reasoning + delta.reasoning, tool_calls=calls,
                         finish_reason=delta.finish_reason if delta.finished else None, stats=delta.stats)
        return Reply(answer, "done" if delta.finished else "streaming",
                     writing_tool_call=delta.writing_tool_call and not delta.finished,
                     notices=self.notices + delta.notices)

    def failed(self, message: str, state: ReplyState = "failed") -> Reply:
        """The reply ended by ``message`` (one line): what arrived is kept."""
        return replace(self, answer=replace(self.answer, error=message), state=state, writing_tool_call=False)

    def structural(self, before: Reply) -> bool:
        """Show it at once, not paced: the first words, the thinking done (text after reasoning), a tool call begun
        or parsed, the end, a notice."""
        a, b = self.answer, before.answer
        return (self.state != before.state or (bool(a.text or a.reasoning) and not (b.text or b.reasoning))
                or (bool(a.text) and not b.text and bool(b.reasoning))
                or len(a.tool_calls) != len(b.tool_calls) or self.writing_tool_call != before.writing_tool_call
                or self.notices != before.notices)

    def size(self) -> int:
        """Characters a page re-renders on each update of this reply."""
        a = self.answer
        return len(a.text) + len(a.reasoning) + sum(len(c.arguments) for c in a.tool_calls)

    def engine_message(self) -> dict[str, Any] | None:
        """The assistant message the conversation keeps for the engine (None: nothing generated yet)."""
        if not (self.text or self.tool_calls):
            return None
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [c.as_openai() for c in self.tool_calls]
        return message

    def tool_records(self) -> tuple[ToolCall, ...]:
        """The reply's calls for a tool panel (a "…" row while a call is begun but not yet parsed)."""
        return self.tool_calls + ((ToolCall(id="", name="…", status="writing"),) if self.writing_tool_call else ())
