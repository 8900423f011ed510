"""Inspections side by side in real Chromium: two tabs at once, a new upload superseding the one in
flight, and the status line while several panels are busy and once they are done."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.ui import handlers
from support import media_factory
from tests.browser.conftest import SEQ, open_studio

pytestmark = pytest.mark.browser

GALLERY_ITEMS = "#frames-gallery .thumbnail-item"


@contextmanager
def held(monkeypatch):
    """Every inspection of the studio (it runs in this process) waits at a gate until ``release``."""
    real, release = handlers.inspect_file, threading.Event()

    def gated(*args, **kwargs):
        assert release.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(handlers, "inspect_file", gated)
    try:
        yield release
    finally:
        release.set()


def _upload(page, elem_id: str, paths) -> None:
    page.set_input_files(f"#{elem_id} input[type=file]", paths)


STATUS = "#status [data-testid=markdown]"  # the line itself, not Gradio's (hidden) progress text beside it


def _wait_status(page, text: str) -> None:
    page.wait_for_function("([sel, t]) => document.querySelector(sel).innerText.includes(t)", arg=[STATUS, text])


def _status_lines(page) -> list[str]:
    return [line.strip() for line in page.locator(STATUS).inner_text().splitlines() if line.strip()]


def _wait_frames(page, report) -> list[str]:
    page.wait_for_function("([sel, n]) => document.querySelectorAll(sel).length === n",
                           arg=[GALLERY_ITEMS, len(report.frames)])
    page.wait_for_function(
        "ts => { const c = [...document.querySelectorAll('#frames-gallery .caption-label')]"
        ".map(e => e.innerText.split(' · ')[0]); return JSON.stringify(c) === JSON.stringify(ts); }",
        arg=[f.timestamp for f in report.frames])
    return [c.inner_text().split(" · ")[0] for c in page.locator("#frames-gallery .caption-label").all()]


def test_two_tabs_inspect_at_once_each_its_own_video(chromium, studio_url, profile, clip_with_audio, clip_silent):
    reports = {p: inspect_file(p, profile, VideoSettings(seq=SEQ), expected="video")
               for p in (clip_with_audio, clip_silent)}
    tabs = [open_studio(chromium, studio_url) for _ in range(2)]
    try:
        for (_, page), clip in zip(tabs, reports, strict=True):
            _upload(page, "video-input", str(clip))  # both before either is done
        for (_, page), (clip, report) in zip(tabs, reports.items(), strict=True):
            assert _wait_frames(page, report) == [f.timestamp for f in report.frames]
            _wait_status(page, f"✓ {clip.name} — {len(report.frames)} frames")
            other = clip_silent if clip == clip_with_audio else clip_with_audio
            assert other.name not in page.locator(STATUS).inner_text()
    finally:
        for context, _ in tabs:
            context.close()


def test_a_new_upload_supersedes_the_one_in_flight(page, profile, clip_with_audio, clip_silent, monkeypatch):
    newer = inspect_file(clip_silent, profile, VideoSettings(seq=SEQ), expected="video")
    with held(monkeypatch) as release:
        _upload(page, "video-input", str(clip_with_audio))
        _wait_status(page, f"inspecting {clip_with_audio.name}")
        page.locator("#video-input button[aria-label='Clear']").first.click()
        _upload(page, "video-input", str(clip_silent))
        _wait_status(page, f"inspecting {clip_silent.name}")
        release.set()
        _wait_frames(page, newer)
    _wait_status(page, f"✓ {clip_silent.name}")
    page.wait_for_function("s => !document.querySelector(s).innerText.includes('⏳')", arg=STATUS)
    assert clip_with_audio.name not in page.locator(STATUS).inner_text()
    assert [c.split(" · ")[0] for c in page.locator("#frames-gallery .caption-label").all_inner_texts()] == \
        [f.timestamp for f in newer.frames]


def test_the_status_line_shows_every_panel_busy_then_done(page, clip_with_audio, media_dir: Path, shots_dir,
                                                         monkeypatch):
    photo = media_factory.make_image(media_dir / "status_photo.png")
    chart = media_factory.make_image(media_dir / "status_chart.png", width=900, height=500)
    tone = media_factory.make_audio(media_dir / "status_tone.wav", seconds=4)
    with held(monkeypatch) as release:
        _upload(page, "video-input", str(clip_with_audio))
        _upload(page, "images-input", [str(photo), str(chart)])
        _upload(page, "audio-input", str(tone))
        page.wait_for_function("s => (document.querySelector(s).innerText.match(/⏳/g) || []).length === 3", arg=STATUS)
        lines = _status_lines(page)
        assert lines[:3] == [f"⏳ Video — inspecting {clip_with_audio.name}…", "⏳ Images — inspecting 2 image(s)…",
                             f"⏳ Audio — inspecting {tone.name}…"]
        page.locator("#status").scroll_into_view_if_needed()
        page.screenshot(path=str(shots_dir / "status_busy.png"), clip=_left_column(page))
        release.set()
    page.wait_for_function("s => (document.querySelector(s).innerText.match(/✓/g) || []).length === 3", arg=STATUS)
    # the summary drawn after the last of the three inspections (one drawn after the audio's alone has one row)
    page.wait_for_function("rows => { const t = document.querySelector('#summary').innerText;"
                           " return rows.every(r => t.includes(r)); }", arg=["video frames", "images", "audio clip"])
    lines = _status_lines(page)
    assert lines[0].startswith(f"✓ {clip_with_audio.name} — ") and lines[1].startswith("✓ 2 image(s)")
    assert lines[2].startswith(f"✓ {tone.name} — ")
    summary = page.locator("#summary").inner_text()
    assert all(row in summary for row in ("video frames", "images", "audio clip")), summary
    page.screenshot(path=str(shots_dir / "status_done.png"), clip=_left_column(page))


def _left_column(page) -> dict[str, float]:
    """The upload panels' column down to the summary: the status line in its place."""
    top = page.locator("#images-input").bounding_box()
    bottom = page.locator("#summary").bounding_box()
    return {"x": top["x"] - 8, "y": top["y"] - 8, "width": top["width"] + 16,
            "height": bottom["y"] + min(bottom["height"], 160) - top["y"] + 16}
