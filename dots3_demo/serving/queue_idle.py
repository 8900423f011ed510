"""Gradio's queue waits for its next event rather than looking for one every millisecond.

Gradio's ``Queue.start_processing`` (6.31) takes queued events in a loop, and when none is queued it sleeps
``sleep_when_free`` — 1 ms — and looks again. So an idle studio's event loop wakes about a thousand times a
second (``strace``: ~1,700 ``epoll_wait`` a second, ~4.5 % of a core with no visitor at all), and each wake-up
takes the GIL from the thread that runs vLLM's video preprocessing for an upload, on the same core.

:func:`wait_for_events` runs Gradio's own ``start_processing`` — its code object, not a copy of its source — with a
name space of its own in which ``asyncio.sleep``, while no event is queued, waits until ``Queue.push`` has queued
one (``push`` is wrapped on the instance to say so), or ``IDLE_WAIT_S`` at most; while events are queued (waiting
for a free slot or their concurrency limit) it sleeps as Gradio's does, so they start as soon as before. An event
queued to an idle queue starts at once instead of at the next millisecond's look. Gradio's module is not changed.
Where a Gradio's ``start_processing`` no longer sleeps through ``asyncio.sleep``, the queue is left as it is.

``IDLE_WAIT_S`` is 5 ms, not longer: vLLM's preprocessing in the app's process (one core, an idle server) took
6.5 % less time than under Gradio's 1 ms looks with it, 8.5 % with a 1 s wait, but with the 1 s wait one session's
first token came 1.5–2 ms later on this 2-core box (``benchmarks.stream_bench``, two alternating runs; with 5 ms,
no later) — the loop's frequent wakes seem to keep the idle core ready for the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import types
from typing import Any

from dots3_demo.rebinding import same_function

IDLE_WAIT_S = 0.005  # the longest an idle queue waits for a push before it looks again (Gradio's: 0.001)


class QueueWaiter:
    """What an idle queue waits on: ``pushed``, set when ``Queue.push`` returns. ``idle_waits`` counts the waits
    for a push, ``polls`` the sleeps made as Gradio's (events queued but none could start)."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self.pushed = asyncio.Event()  # bound to the server's loop when first awaited; set and cleared only there
        self.idle_waits = 0
        self.polls = 0

    async def sleep(self, delay: float, result: Any = None) -> Any:
        """``asyncio.sleep`` for ``start_processing``: with no event queued, until one is pushed."""
        if len(self._queue) == 0:
            self.pushed.clear()  # nothing awaits between the look and the wait: a push after it sets it again
            self.idle_waits += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.pushed.wait(), IDLE_WAIT_S)
            return result
        self.polls += 1
        return await asyncio.sleep(delay, result)

    def wrap_push(self) -> None:
        push = self._queue.push

        async def push_and_wake(*args: Any, **kwargs: Any) -> Any:
            try:
                return await push(*args, **kwargs)
            finally:
                self.pushed.set()

        self._queue.push = push_and_wake


def wait_for_events(queue: Any) -> QueueWaiter | None:
    """Make ``queue`` (a Blocks' ``_queue``, before the app starts it) wait for its next event when idle; returns
    what it waits on, or None when Gradio's ``start_processing`` does not sleep through ``asyncio.sleep``."""
    function = type(queue).start_processing
    if not {"asyncio", "sleep"} <= set(function.__code__.co_names) or function.__closure__:
        return None
    waiter = QueueWaiter(queue)
    names = {**function.__globals__, "asyncio": types.SimpleNamespace(**{**vars(asyncio), "sleep": waiter.sleep})}
    queue.start_processing = types.MethodType(same_function(function, names), queue)
    waiter.wrap_push()
    return waiter
