"""The session report in real Chromium, opened from disk: it shows the inspector's frames, and a hostile answer
(script, handlers, outside images) runs nothing and loads nothing: a recorder server on loopback counts every
request it gets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dots3_demo.core.records import Answer, ReplyRating
from dots3_demo.core.state import StudioState, new_session
from dots3_demo.engine.protocol import ToolCall
from dots3_demo.inspection import inspect_file
from dots3_demo.inspection.video import VideoSettings
from dots3_demo.workbench import record as rec
from support import media_factory
from tests.browser.conftest import recording

pytestmark = pytest.mark.browser

SHOTS = Path("/tmp/shots-record")


@pytest.fixture
def recorder():
    with recording() as server:
        yield server


def test_report_opens_offline_shows_frames_and_runs_nothing(chromium, profile, recorder, tmp_path):
    url = f"http://127.0.0.1:{recorder.server_address[1]}"
    hostile = (f'<script>fetch("{url}/script")</script><img src="{url}/img" onerror="fetch(\'{url}/onerror\')">'
               f'![x]({url}/markdown) <style>@import "{url}/css";</style>')
    video = media_factory.make_video(tmp_path / "clip.mp4", seconds=3, width=320, height=240, fps=10)
    image = media_factory.make_image(tmp_path / "pic.png", width=256, height=192)
    settings = VideoSettings(seq=8192)
    reports = {p: inspect_file(p, profile, settings) for p in (video, image)}
    studio = StudioState(settings=settings, video_path=str(video), video=reports[video],
                         images=((str(image), reports[image]),))
    call = ToolCall(id="c1", name="get_weather", arguments=f'{{"city": "{hostile}"}}', status="answered",
                    result=hostile)
    session = replace(new_session(), messages=(
        {"role": "user", "content": [{"type": "video_url", "video_url": {"url": str(video)}},
                                     {"type": "text", "text": hostile}]},
        {"role": "assistant", "content": hostile, "tool_calls": [call.as_openai()]},
    ), answers=(Answer(text=hostile, reasoning=hostile, tool_calls=(call,), finish_reason="tool_calls"),),
        ratings=(ReplyRating(0, "down", hostile),))
    record = rec.build_record(session, studio, rec.ChatSetup(system_prompt=hostile), profile=profile)
    path = rec.export_html(record, tmp_path / "out")

    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        page.wait_for_timeout(500)  # what a handler or a late load would need to fire
        images = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt])")
        text = page.inner_text("body")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "session-report.png"), full_page=False)
    finally:
        context.close()
    frames = reports[video].frames
    assert len(images) == len(frames) + 1
    assert all(complete and width > 0 for complete, width, _ in images)  # every thumbnail decoded
    assert [alt for _, _, alt in images[: len(frames)]] == [f.timestamp for f in frames]
    for frame in frames:
        assert frame.timestamp in text
    assert hostile in text  # shown as text
    assert recorder.paths == []
    assert [u for u in requests if not u.startswith("data:")] == [path.as_uri()]
