"""Closing a tab in Chromium drops its server-side session after ``--closed-session-ttl``; the tab
still open keeps its session and works on."""

from __future__ import annotations

import time

import pytest

from support import media_factory
from tests.browser.conftest import open_studio, serving

pytestmark = pytest.mark.browser
TTL_S = 1.0


def _upload_image(page, path) -> None:
    page.set_input_files("#images-input input[type=file]", str(path))
    page.wait_for_function("() => document.querySelector('#status').innerText.includes('✓ 1 image(s)')")


def _wait_sessions(demo, count: int, timeout_s: float = 30.0) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sessions = set(demo.state_holder.session_data)
        if len(sessions) == count:
            return sessions
        time.sleep(0.1)
    raise AssertionError(f"expected {count} sessions, the app holds {len(demo.state_holder.session_data)}")


def test_a_closed_tab_is_dropped_and_the_open_one_works_on(chromium, profile, media_dir):
    image = media_factory.make_image(media_dir / "session_photo.png", width=320, height=240)
    with serving(profile, closed_session_ttl=TTL_S) as demo:
        url = demo.local_url.rstrip("/")
        ctx_a, a = open_studio(chromium, url)
        _upload_image(a, image)
        first = _wait_sessions(demo, 1)
        ctx_b, b = open_studio(chromium, url)
        try:
            _upload_image(b, image)
            both = _wait_sessions(demo, 2)
            (session_b,) = both - first
            (session_a,) = first
            queue = demo._queue  # the upload went through Gradio's queue, which keeps per-session entries
            assert session_a in queue.pending_messages_per_session and session_a in queue.pending_event_ids_session
            ctx_a.close()  # the tab closes: Gradio runs the unload event, the reaper waits TTL_S
            assert _wait_sessions(demo, 1) == {session_b}
            assert session_a not in queue.pending_messages_per_session
            assert session_a not in queue.pending_event_ids_session
            # B's own state survived and B works on: two more images join the one it already had.
            b.set_input_files("#images-input input[type=file]", [str(image), str(image)])
            b.wait_for_function("() => document.querySelector('#status').innerText.includes('✓ 3 image(s)')")
            assert set(demo.state_holder.session_data) == {session_b}
        finally:
            ctx_b.close()
