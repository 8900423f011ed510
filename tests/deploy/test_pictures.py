"""The galleries' pictures answered on the server's loop (``dots3_demo.serving.pictures``): against a live app, a
video's frames are served while every one of Gradio's worker threads is taken (Gradio's route needs them), with
Gradio's bytes and headers; a range, a revalidation, a HEAD, another file, a blocked folder and a link still get
Gradio's answer; with a login nothing is mounted. Speed is measured by ``benchmarks/inspect_concurrency.py``, never
here."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio.to_thread
import httpx
import pytest
from fastapi import FastAPI
from PIL import Image

from dots3_demo.serving.pictures import picture_path, serve_pictures
from dots3_demo.ui import inspect_page
from support.live import live_app

SEQ = 8192
CONTROLS = (SEQ, True, 0, 0, 1.0, "eval_ek")  # the Budget tab's first values, for seq=SEQ
HEADERS = ("content-type", "content-length", "content-disposition", "accept-ranges", "etag", "last-modified")


def _pictures(count: int = 3) -> list[str]:
    """Gallery pictures written as the frames gallery writes them (their paths)."""
    frames = [(Image.new("RGB", (1092, 616), (40 * i, 90, 160)), f"{i}") for i in range(count)]
    return [path for path, _ in inspect_page.frames_gallery_files(frames)]


@contextmanager
def _worker_threads_taken(demo: Any):
    """Every token of the server's worker-thread limiter held (what Gradio's file route needs: its login check and
    the file's stat, open and reads run on those threads) until the block ends."""
    app, held = demo.server_app, []

    async def hold() -> int:
        limiter = anyio.to_thread.current_default_thread_limiter()
        while limiter.available_tokens:
            borrower = object()
            await limiter.acquire_on_behalf_of(borrower)
            held.append((limiter, borrower))
        return len(held)

    async def release() -> int:
        for limiter, borrower in held:
            limiter.release_on_behalf_of(borrower)
        return len(held)

    app.add_api_route("/test-hold", hold, methods=["POST"])
    app.add_api_route("/test-release", release, methods=["POST"])
    app.router.routes.insert(0, app.router.routes.pop())  # in front of Gradio's catch-all routes
    app.router.routes.insert(0, app.router.routes.pop(-2))
    url = demo.local_url.rstrip("/")
    assert httpx.post(f"{url}/test-hold").json() > 0
    try:
        yield
    finally:
        httpx.post(f"{url}/test-release")


def _file_url(demo: Any, path: str) -> str:
    return f"{demo.local_url.rstrip('/')}/gradio_api/file={path}"


def test_a_videos_pictures_are_served_while_gradios_worker_threads_are_all_taken(profile, clip_silent):
    from gradio_client import Client, handle_file

    with live_app(profile, seq=SEQ, inspect_workers=1) as demo:
        client = Client(demo.local_url, verbose=False, download_files=False)
        _status, _reserve, gallery = client.predict(handle_file(str(clip_silent)), *CONTROLS,
                                                    api_name="/inspect_video")
        paths = [item["image"]["path"] for item in gallery]
        video = next(Path(inspect_page.pictures_folder()).rglob(clip_silent.name))
        assert len(paths) >= 4 and all(picture_path(path, inspect_page.pictures_folder()) for path in paths)
        with _worker_threads_taken(demo):
            answers = [httpx.get(_file_url(demo, path), timeout=10) for path in paths]
            with pytest.raises(httpx.TimeoutException):  # Gradio's route: it waits for a worker thread
                httpx.get(_file_url(demo, str(video)), timeout=1.5)
        assert httpx.get(_file_url(demo, str(video)), timeout=10).status_code == 200  # … and answers once one is free
    for path, answer in zip(paths, answers, strict=True):
        assert answer.status_code == 200 and answer.content == Path(path).read_bytes()
        assert answer.headers["content-type"] == "image/jpeg"


def test_the_answer_is_gradios_and_everything_else_still_goes_to_gradio(profile):
    with live_app(profile, seq=SEQ) as demo:
        path = _pictures(1)[0]
        url = _file_url(demo, path)
        ours = httpx.get(url)
        gradios = httpx.get(url, headers={"if-modified-since": "Thu, 01 Jan 1970 00:00:00 GMT"})  # Gradio's route
        assert ours.status_code == gradios.status_code == 200 and ours.content == gradios.content
        assert {k: ours.headers.get(k) for k in HEADERS} == {k: gradios.headers.get(k) for k in HEADERS}
        ranged = httpx.get(url, headers={"range": "bytes=0-9"})
        assert ranged.status_code == 206 and ranged.content == Path(path).read_bytes()[:10]
        again = httpx.get(url, headers={"if-none-match": ours.headers["etag"]})  # Gradio's: the file again, whole
        assert again.status_code == 200 and again.content == ours.content
        assert httpx.head(url).status_code == 200
        assert httpx.get(_file_url(demo, str(Path(path).with_name("picture_999.jpg")))).status_code == 403  # none


def test_a_blocked_folder_and_a_link_are_refused_as_gradio_refuses_them(profile, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-PICTURE")
    with live_app(profile, seq=SEQ) as demo:
        folder = Path(_pictures(1)[0]).parent.parent
        link = folder / ("ab" * 32) / "picture_000.jpg"  # a hash-named folder, a picture's name, a link out
        link.parent.mkdir(exist_ok=True)
        link.unlink(missing_ok=True)
        os.symlink(secret, link)
        answer = httpx.get(_file_url(demo, str(link)))
        assert answer.status_code in {403, 404} and b"SECRET" not in answer.content
    with live_app(profile, seq=SEQ, blocked_paths=[inspect_page.pictures_folder()]) as demo:
        assert httpx.get(_file_url(demo, _pictures(1)[0])).status_code == 403


def test_which_paths_are_pictures(tmp_path):
    folder = str(tmp_path)
    name = "0123456789abcdef" * 4
    assert picture_path(f"{folder}/{name}/picture_000.jpg", folder) == tmp_path / name / "picture_000.jpg"
    assert picture_path(f"{folder}/x/../{name}/picture_012.jpg", folder) == tmp_path / name / "picture_012.jpg"
    for other in (f"{folder}/{name}/clip.mp4", f"{folder}/{name}/picture_000.png", f"{folder}/picture_000.jpg",
                  f"{folder}/not-a-hash/picture_000.jpg", f"{folder}/{name}/sub/picture_000.jpg",
                  f"{folder}/{name}/../../etc/picture_000.jpg", "https://example.com/picture_000.jpg", ""):
        assert picture_path(other, folder) is None, other


def test_with_a_login_nothing_is_mounted():
    app = FastAPI()

    @app.get("/gradio_api/file={path_or_url:path}")
    async def file(path_or_url: str):
        return path_or_url

    before = list(app.router.routes)
    app.auth, app.auth_dependency = {"user": "secret"}, None  # as Gradio's App holds launch(auth=…)
    assert not serve_pictures(app, "/tmp") and app.router.routes == before
    app.auth = None
    assert serve_pictures(app, "/tmp") and len(app.router.routes) == len(before) + 1
    assert not serve_pictures(SimpleNamespace(auth=None, auth_dependency=None, router=FastAPI().router), "/tmp")

