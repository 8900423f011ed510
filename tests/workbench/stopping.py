"""Stop, as Gradio does it, in a test's event loop: cancel the event's task, then wait for the engine double's
aborts."""

from __future__ import annotations

import asyncio

import pytest

from support.doubles import ScriptedAsyncLLM


async def stop_and_wait_for_aborts(task: asyncio.Task, double: ScriptedAsyncLLM, count: int = 2) -> list[str]:
    """Cancel ``task`` (Gradio's Stop, ``cancels=[...]``, cancels the event's task), check that it ends cancelled,
    then wait up to 2 s for ``count`` requests aborted on ``double``; returns the aborted request ids (taken before
    ``asyncio.run`` cancels what is left)."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if len(double.aborted) == count:
            break
        await asyncio.sleep(0.02)
    return list(double.aborted)
