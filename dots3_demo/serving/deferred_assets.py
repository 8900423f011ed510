"""Gradio's FFmpeg.wasm waits until the app's inspections are done.

The video panel's player mounts Gradio's trim controls, which fetch FFmpeg.wasm (31.7 MB, ``/static/ffmpeg/
ffmpeg-core.wasm``) for the Trim button the moment a visitor's upload is shown — while the app decodes that video
for the visitor. Served then, it takes the app's core from the inspection, and the browser, compiling it, takes its
own from the pictures; measured in Chromium on this project's 2-core box (the app pinned to one core), the frames
came ~0.1 s later with it than with that file missing. :func:`defer_ffmpeg` answers that one file only once every
inspection worker has been free for ``quiet_s`` (the pictures are then in the page), or after ``most_s`` at most;
the answer is Gradio's own. Trim is ready that much later; nothing else changes. Gradio's internals used here (the
static route) are pinned by ``tests/ui/test_early_videos.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from dots3_demo.serving.routes import in_front

FFMPEG_WASM = "ffmpeg/ffmpeg-core.wasm"  # under Gradio's /static/
STATIC_ROUTE = "/static/{path:path}"
QUIET_S = 1.0  # every worker free this long: the last inspection's pictures are in the page
MOST_S = 10.0  # the longest the file waits
POLL_S = 0.05


def defer_ffmpeg(app: Any, idle_s: Callable[[], float], *, quiet_s: float = QUIET_S, most_s: float = MOST_S) -> bool:
    """Answer Gradio's FFmpeg.wasm only once ``idle_s()`` (seconds every inspection worker has been free:
    ``Workers.idle_s``) reaches ``quiet_s``, or ``most_s`` after it was asked for (``app``: the running Gradio app,
    e.g. in its lifespan); False when Gradio has no static route (then nothing changed)."""
    def deferred(gradio_static: Callable[..., Any]) -> Callable[..., Any]:
        async def ffmpeg_wasm() -> Any:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + most_s
            while idle_s() < quiet_s and loop.time() < deadline:
                await asyncio.sleep(POLL_S)
            return await gradio_static(FFMPEG_WASM)

        return ffmpeg_wasm

    return in_front(app, "GET", lambda path: path == STATIC_ROUTE, deferred,
                    path=STATIC_ROUTE.replace("{path:path}", FFMPEG_WASM),
                    missing="Gradio's static route was not found; FFmpeg.wasm is served as soon as it is asked for")
