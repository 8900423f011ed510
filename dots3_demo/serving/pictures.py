"""The galleries' pictures, answered on the server's loop instead of through Gradio's worker threads.

A video's frames reach the page as JPEG files the studio writes into Gradio's upload folder (``picture_NNN.jpg``, each
in a folder named by its bytes' hash: ``inspect_page.frames_gallery_files``), and the browser fetches all of them
(27 for a 30 s clip) from Gradio's ``/gradio_api/file=`` route the moment the gallery is in the page. For each, that
route runs its login check (a plain function: FastAPI runs it on a worker thread) and Starlette's ``FileResponse``
stats, opens, reads and closes the file on worker threads — each a hop back to the event loop, which waits for the
GIL while the app's core finishes the inspection's last steps. Traced in Chromium (the app on one core), the
pictures came back 4–5 ms apart: 27 in 0.16 s, the last part of a visitor's wait for the frames.

:func:`serve_pictures` puts a step in front of that route which answers those pictures itself: a plain ``GET`` (no
``Range``, no revalidation) of a ``picture_NNN.jpg`` in a hash-named folder of the upload folder, which Gradio's own
rule allows (``gradio.utils.is_allowed_file``, so an operator's ``blocked_paths`` still hold), is read on the loop (a
few tens of KB from the page cache) and answered with the headers Gradio's answer has. Anything else — another file, a
range, a picture gone — goes to Gradio's route unchanged. When the app has a login (``auth``) nothing is mounted:
Gradio's check is needed then. Gradio's internals used here (the route and its parameters, ``is_allowed_file``) are
pinned by ``tests/deploy/test_pictures.py``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Request, Response
from starlette.responses import FileResponse

from dots3_demo.serving.routes import in_front

logger = logging.getLogger(__name__)

FILE_ROUTE = "/file={path_or_url:path}"  # Gradio's, under /gradio_api
PICTURE_NAME = re.compile(r"picture_\d{3,}\.jpg")  # inspect_page._jpeg_gallery's names
HASH_FOLDER = re.compile(r"[0-9a-f]{16,}")  # gradio.processing_utils.hash_bytes names the folder
ASKED_AGAIN = ("range", "if-none-match", "if-modified-since", "if-range")  # Gradio's answer handles these


def picture_path(path_or_url: str, upload_folder: str) -> Path | None:
    """The gallery picture that ``path_or_url`` (what follows ``file=``) names, or None when it names anything else."""
    if "://" in path_or_url or not path_or_url:
        return None
    path = Path(os.path.abspath(path_or_url))
    folder = Path(os.path.abspath(upload_folder))
    if (path.parent.parent != folder or not PICTURE_NAME.fullmatch(path.name)
            or not HASH_FOLDER.fullmatch(path.parent.name)):
        return None
    return path


def _allowed(path: Path, blocks: Any, upload_folder: str) -> bool:
    """Whether Gradio's file route would serve ``path`` (its own rule: blocked, allowed and created paths)."""
    from gradio import utils
    from gradio.data_classes import _StaticFiles

    allowed, _ = utils.is_allowed_file(path, blocked_paths=blocks.blocked_paths,
                                       allowed_paths=blocks.allowed_paths + _StaticFiles.all_paths,
                                       created_paths=[upload_folder, str(utils.get_cache_folder())])
    return bool(allowed)


def _answer(path: Path) -> Response | None:
    """The picture as Gradio's route answers it (its headers made by the same ``FileResponse``, given the file's stat:
    type, disposition, length, validators); None when it is gone or a link (the studio writes neither; Gradio's
    route decides about those)."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
            stat = os.fstat(handle.fileno())
            data = handle.read()
    except OSError:
        return None
    gradios = FileResponse(path, headers={"Accept-Ranges": "bytes"}, media_type="image/jpeg", filename=path.name,
                           content_disposition_type="inline", stat_result=stat)  # as gradio.route_utils.file_fetch
    return Response(data, headers=dict(gradios.headers))


def serve_pictures(app: Any, upload_folder: str) -> bool:
    """Answer the galleries' pictures in ``upload_folder`` on the loop, in front of Gradio's file route (``app``: the
    running Gradio app, e.g. in its lifespan); False when the app has a login or no such route (then nothing
    changed)."""
    if getattr(app, "auth", None) is not None or getattr(app, "auth_dependency", None) is not None:
        logger.info("the app has a login: the galleries' pictures go through Gradio's file route and its check")
        return False

    def in_front_of(gradio_file: Callable[..., Any]) -> Callable[..., Any]:
        async def file(path_or_url: str, request: Request) -> Any:
            path = picture_path(path_or_url, upload_folder)
            if path is not None and not any(name in request.headers for name in ASKED_AGAIN) \
                    and _allowed(path, app.get_blocks(), upload_folder):
                answer = _answer(path)
                if answer is not None:
                    return answer
            return await gradio_file(path_or_url, request)

        return file

    return in_front(app, "GET", lambda path: path.endswith(FILE_ROUTE), in_front_of, dependencies=[],
                    missing="Gradio's file route was not found; the galleries' pictures are served by Gradio")
