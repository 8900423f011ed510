"""One tool call, in one shape, from where it is born to the tool panel.

A :class:`ToolCall` is born from OpenAI-style streamed tool-call deltas — vLLM's ``DeltaToolCall``
(from ``DotsToolParser``, in-process) or the OpenAI client's ``ChoiceDeltaToolCall`` (from a
server's ``tool_calls`` deltas), which have the same fields — by one :class:`ToolCallAccumulator`.
It then travels unchanged through ``TurnDelta.tool_calls`` (the engine protocol re-exports it), the
chat's reply and session, to the tool panel.

Its ``status`` has one vocabulary all the way:

- ``"writing"``: the model is still writing it (its ``<dots_function_call>`` block, or the server's
  stream, is still open: the arguments may grow);
- ``"called"``: complete, waiting for a result;
- ``"answered"``: its ``result`` was sent back to the model.

The OpenAI chat format the engine reads back (an assistant message's ``tool_calls`` entry, the
``tool`` message with the result) comes from :meth:`ToolCall.as_openai` and
:meth:`ToolCall.result_message`, nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

ToolCallStatus = Literal["writing", "called", "answered"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model made. ``arguments`` is JSON text (OpenAI convention), as parsed."""

    id: str
    name: str
    arguments: str = ""
    status: ToolCallStatus = "called"
    result: str = ""  # what was sent back to the model ("" until answered)

    @property
    def complete(self) -> bool:
        """False while the model is still writing the call."""
        return self.status != "writing"

    def answered(self, result: str) -> ToolCall:
        """This call with ``result`` sent back to the model."""
        return replace(self, status="answered", result=result)

    def as_openai(self) -> dict[str, Any]:
        """The call as an entry of an assistant message's ``tool_calls`` (OpenAI chat format), as the
        chat template (in-process) and the server (remote) read it."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def result_message(self) -> dict[str, Any]:
        """The ``tool`` message that gives the model this call's ``result``."""
        return {"role": "tool", "tool_call_id": self.id, "content": self.result}


class FunctionDelta(Protocol):
    """``function`` of a streamed tool-call delta (vLLM's ``DeltaFunctionCall``, OpenAI's
    ``ChoiceDeltaToolCallFunction``)."""

    @property
    def name(self) -> str | None: ...

    @property
    def arguments(self) -> str | None: ...


class ToolCallDelta(Protocol):
    """A streamed tool-call delta: vLLM's ``DeltaToolCall`` and OpenAI's ``ChoiceDeltaToolCall`` both are."""

    @property
    def index(self) -> int: ...

    @property
    def id(self) -> str | None: ...

    @property
    def function(self) -> FunctionDelta | None: ...


class ToolCallAccumulator:
    """The tool calls of one generation, assembled from streamed deltas by their ``index``.

    A delta's ``id`` and ``name`` (sent with a call's first delta) set the call's; its
    ``arguments`` text is appended. A call without an id gets ``call_<index>``.
    """

    def __init__(self) -> None:
        self._calls: dict[int, ToolCall] = {}

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """Every call so far, in index order."""
        return tuple(self._calls[i] for i in sorted(self._calls))

    def add(self, delta: ToolCallDelta, *, writing: bool = True) -> bool:
        """Apply one delta; True when it began a new call.

        ``writing``: whether the call may still grow (its block or stream is still open). When it
        may not, every call so far is complete (``"called"``).
        """
        index = delta.index
        known = self._calls.get(index)
        call = known if known is not None else ToolCall(id=f"call_{index}", name="")
        function = delta.function
        name = function.name if function is not None else None
        arguments = function.arguments if function is not None else None
        self._calls[index] = replace(call, id=delta.id or call.id, name=name or call.name,
                                     arguments=call.arguments + (arguments or ""),
                                     status="writing" if writing else "called")
        if not writing:
            self.settle()
        return known is None

    def settle(self) -> None:
        """The generation ended (or the block closed): no call is being written any more."""
        self._calls = {i: replace(c, status="called") if c.status == "writing" else c for i, c in self._calls.items()}
