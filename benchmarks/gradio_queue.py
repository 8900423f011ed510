"""Gradio's queue protocol as the page speaks it, for the benchmarks' browser-like sessions.

A session POSTs ``queue/join`` with a session hash of its own and reads the ``queue/data`` event
stream (server-sent events). ``gradio_client`` is not used: it polls its message queue every 50 ms
and busy-waits per job, which measures the client, not the app.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

END = ("process_completed", "close_stream")  # the messages after which the event sends nothing more


def new_session() -> str:
    """A session hash of its own, as a new tab has."""
    return uuid.uuid4().hex[:11]


async def join(http: Any, base: str, fn_index: int, data: list[Any], session_hash: str) -> None:
    """Put one event in the queue (``http``: an ``httpx.AsyncClient``; ``base``: the app's URL)."""
    answer = await http.post(f"{base}/gradio_api/queue/join", json={
        "data": data, "event_data": None, "fn_index": fn_index, "trigger_id": None, "session_hash": session_hash})
    answer.raise_for_status()


async def messages(http: Any, base: str, session_hash: str,
                   clock: Callable[[], float] = time.monotonic) -> AsyncIterator[tuple[float, dict[str, Any]]]:
    """The session's event-stream messages, each with ``clock()`` read when its chunk arrived, up to and
    including the first of ``END``."""
    async with http.stream("GET", f"{base}/gradio_api/queue/data", params={"session_hash": session_hash}) as stream:
        buffer = ""
        async for chunk in stream.aiter_text():
            now = clock()
            buffer += chunk
            while "\n\n" in buffer:
                line, buffer = buffer.split("\n\n", 1)
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                yield now, message
                if message.get("msg") in END:
                    return


# ---------------------------------------------------------------- Gradio's own profiling
# An app started with GRADIO_PROFILING=1 keeps a trace of each event: the wait in its queue, preprocessing the
# inputs, the event function (for a generator, every step's wait for its next output, added up), postprocessing
# (every step's) and the number of steps; routes under /gradio_api/profiling.
PROFILING_ENV = {"GRADIO_PROFILING": "1"}
PHASES = ("queue_wait", "preprocess", "fn_call", "postprocess")


def clear_profiling(base: str) -> None:
    """Forget the traces kept so far (no-op when the app keeps none)."""
    request = urllib.request.Request(f"{base}/gradio_api/profiling/clear", method="POST")
    with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=10):
        pass


def profiling_traces(base: str, api_name: str) -> list[dict[str, float]]:
    """The kept traces of the ``api_name`` events, oldest first: each phase in ms and ``steps``; [] when the
    app keeps none."""
    try:
        with urllib.request.urlopen(f"{base}/gradio_api/profiling/traces", timeout=10) as response:
            traces = json.load(response)
    except (OSError, ValueError):
        return []
    mine = sorted((t for t in traces if t.get("fn_name") == api_name), key=lambda t: t["timestamp"])
    return [{**{key: float(t[f"{key}_ms"]) for key in PHASES}, "steps": float(t["n_iterations"])} for t in mine]
