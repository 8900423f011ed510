"""A live studio server and real Chromium (Debian's /usr/bin/chromium through playwright)."""

from __future__ import annotations

import contextlib
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
]
SHOTS = Path("/tmp/shots")
SEQ = 32768


@contextlib.contextmanager
def serving(profile, engine=None, **launch_kwargs):
    """The studio on a free loopback port (``engine=None``: preview mode); yields the ``gr.Blocks``."""
    from dots3_demo.ui import launch_app

    demo = launch_app(profile, engine, host="127.0.0.1", port=None, seq=SEQ, prevent_thread_lock=True, quiet=True,
                      **launch_kwargs)
    try:
        yield demo
    finally:
        demo.close()


@contextlib.contextmanager
def serve(profile, engine=None, **launch_kwargs) -> Iterator[str]:
    """Like :func:`serving`; yields the studio's URL."""
    with serving(profile, engine, **launch_kwargs) as demo:
        yield demo.local_url.rstrip("/")


class Recorder(http.server.ThreadingHTTPServer):
    """An HTTP server on a free loopback port that records the path of every GET and POST it gets (``paths``)
    and answers each with a 1×1 GIF."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                recorder.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/gif")
                self.end_headers()
                self.wfile.write(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")

            do_GET = do_POST = _record

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """A :class:`Recorder` serving on a thread until the block ends."""
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def studio_url(profile):
    with serve(profile) as url:
        yield url


# Module scope: playwright's sync API keeps an event loop running on the main thread while it is
# open, so a session-scoped browser makes asyncio.run() fail in every test collected after it
# (e.g. `pytest tests/ui tests/browser tests/engine`).
@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.fail("Debian chromium is not installed (apt-get install chromium; scripts/test.sh does it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_studio(chromium, url: str):
    """A new browser context (its own cookies: its own Gradio session) with the studio loaded."""
    context = chromium.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(url)
    page.wait_for_selector("#video-input input[type=file]", state="attached")
    return context, page


@pytest.fixture
def page(chromium, studio_url):
    context, page = open_studio(chromium, studio_url)
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(scope="session")
def shots_dir() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


@pytest.fixture(scope="session")
def bad_video(media_dir: Path) -> Path:
    path = media_dir / "not_a_video.mp4"
    path.write_text("definitely not a video\n" * 50)
    return path
