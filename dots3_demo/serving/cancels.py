"""Stop cancels the reply it was pressed for, never the next one.

Gradio's ``POST /gradio_api/cancel`` cancels every running task of the session's event function (a task
is named ``{session}_{fn}<gradio-sep>{event id}``), whatever event id the page sends. The page sends the
cancel of a Stop when it handles the click; a busy browser handles it late, after the reply it was
pressed for has ended. If the visitor has sent the next message meanwhile, that reply is the one
cancelled: it died at "⏳ sending…" (seen in Chromium against vLLM's CPU engine, whose decoding left the
page a core's leftovers).

:func:`guard_cancels` puts a check in front of Gradio's own handler: a cancel for an event that is
neither running nor waiting in the queue is answered as done and cancels nothing. Every other cancel
goes to Gradio's handler unchanged. Gradio's internals used here (the route, its body, the task names,
the queue's event lists) are pinned by ``tests/ui/test_late_cancel.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gradio.data_classes import CancelBody

from dots3_demo.serving.routes import in_front

TASK_SEPARATOR = "<gradio-sep>"  # gradio.utils.set_task_name: f"{session}_{fn}<gradio-sep>{event id}"


def event_pending(queue: Any, event_id: str) -> bool:
    """Whether Gradio still runs ``event_id`` or holds it in its queue (``queue``: ``Blocks._queue``)."""
    if any(task.get_name().endswith(TASK_SEPARATOR + event_id) for task in asyncio.all_tasks()):
        return True
    return any(event._id == event_id for waiting in queue.event_queue_per_concurrency_id.values()
               for event in waiting.queue)


def guard_cancels(app: Any) -> bool:
    """Route the app's ``/cancel`` through :func:`event_pending` first (``app``: the running Gradio app,
    e.g. in its lifespan); False when Gradio has no such route (then nothing changed)."""
    def guarded(gradio_cancel: Callable[..., Any]) -> Callable[..., Any]:
        async def cancel(body: CancelBody) -> Any:
            if not event_pending(app.get_blocks()._queue, body.event_id):
                return {"success": True}  # that event is over: cancelling by session and function would hit the next
            return await gradio_cancel(body)

        return cancel

    return in_front(app, "POST", lambda path: path.endswith("/cancel"), guarded,
                    missing="Gradio's /cancel route was not found; a late Stop may cancel the next reply")
