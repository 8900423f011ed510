"""The chat's replies at once follow the engine's capacity once the engine knows it.

The page is built before the engine starts (it loads in the background), so the chat's Gradio concurrency limit
(``concurrency_id="chat"``: one reply per engine sequence slot) is set from what is known then: the operator's
``--max-num-seqs``, else 1. vLLM resolves its own default only when it builds its config (``max_num_seqs`` 128
for an in-process ``AsyncLLM``, more for ``vllm serve`` on a large GPU), so without the flag the studio served one
reply at a time, app-wide, while vLLM had 128 slots. :func:`follow_engine_capacity` waits until the engine is
ready and then sets the limit to ``engine.capacity`` (vLLM's resolved ``max_num_seqs``), and gives Gradio's queue
enough job slots for that many replies beside the other events (Gradio runs at most ``max_threads``, 40, events
at once). Gradio's internals used here (``Blocks.fns``' limits; ``Blocks._queue``: its per-concurrency-id event
queues and job slots) are pinned by ``tests/deploy/test_capacity.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dots3_demo.engine.protocol import ChatEngine

CHAT_CONCURRENCY_ID = "chat"  # the chat's streaming events and the comparison's rounds (ui.chat_page, ui.compare)
OTHER_EVENTS = 40  # job slots kept for every other event (uploads, figures, settles): Gradio's own default in all
POLL_S = 0.25


def fit_queue(blocks: Any, capacity: int, *, others: int = OTHER_EVENTS) -> None:
    """Let ``blocks``' queue (``Blocks._queue``, started) run ``capacity`` chat replies at once, and ``others`` jobs
    besides; never lowers the number of jobs Gradio already allows. Gradio makes a concurrency id's event queue at
    its first event, from that event's function (and lowers it to any lower limit a later function has), so the
    chat's functions get the new limit too."""
    capacity = max(1, int(capacity))
    for fn in blocks.fns.values():
        if fn.concurrency_id == CHAT_CONCURRENCY_ID:
            fn.concurrency_limit = capacity
    queue = blocks._queue
    chat = queue.event_queue_per_concurrency_id.get(CHAT_CONCURRENCY_ID)
    if chat is not None:
        chat.concurrency_limit = capacity
    wanted = capacity + others
    if queue.max_thread_count < wanted:  # the processing loop takes a free slot of active_jobs per job
        queue.active_jobs.extend([None] * (wanted - queue.max_thread_count))
        queue.max_thread_count = wanted


async def follow_engine_capacity(blocks: Any, engine: ChatEngine, *, poll_s: float = POLL_S) -> int | None:
    """Once ``engine`` is ready, fit ``blocks``' queue to its capacity (:func:`fit_queue`); returns the capacity,
    or None when the engine failed or stopped first. Runs on the server's loop (``serving.health``'s lifespan)."""
    while True:
        state = engine.status.state
        if state == "ready":
            break
        if state in ("failed", "stopped"):
            return None
        await asyncio.sleep(poll_s)
    while getattr(blocks, "_queue", None) is None or not blocks._queue.active_jobs:  # started with the server
        await asyncio.sleep(poll_s)
    capacity = int(engine.capacity)
    fit_queue(blocks, capacity)
    return capacity
