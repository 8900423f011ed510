"""Work that begins as an upload's bytes are in, before the page has sent the event that uses them.

Gradio's ``POST /gradio_api/upload`` saves the files and answers with their paths; the page then shows the
file in its component and sends the component's ``change`` event. On a busy page that comes 0.1–0.3 s later
(measured in Chromium: the browser's main thread builds the new video's player first). :func:`watch_uploads` puts
a step in front of Gradio's handler that hands the saved paths to a callback (the studio's ``EarlyVideos``)
before the answer leaves, so whatever the callback begins is there when the event comes. The answer and
everything else about the route are Gradio's own; a callback that raises is logged and changes nothing. Gradio's
internals used here (the route, its parameters) are pinned by ``tests/ui/test_early_videos.py``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from fastapi import BackgroundTasks, Request

from dots3_demo.serving.routes import in_front

logger = logging.getLogger(__name__)

Uploaded = Callable[[list[str]], None]


def watch_uploads(app: Any, uploaded: Uploaded) -> bool:
    """Hand the paths of every upload the app's ``/upload`` route saved to ``uploaded`` as it answers (``app``: the
    running Gradio app, e.g. in its lifespan); False when Gradio has no such route (then nothing changed). Only files
    already in place are handed (Gradio copies one across file systems after answering)."""
    def watched(gradio_upload: Callable[..., Any]) -> Callable[..., Any]:
        async def upload(request: Request, bg_tasks: BackgroundTasks, upload_id: str | None = None) -> Any:
            saved = await gradio_upload(request, bg_tasks, upload_id)
            if isinstance(saved, list):
                try:
                    uploaded([path for path in saved if isinstance(path, str) and os.path.isfile(path)])
                except Exception:  # the upload itself succeeded: it is answered as Gradio answers it
                    logger.exception("handing an upload to the work it begins failed")
            return saved

        return upload

    return in_front(app, "POST", lambda path: path.endswith("/upload"), watched,
                    missing="Gradio's /upload route was not found; uploads are inspected when their events come")
