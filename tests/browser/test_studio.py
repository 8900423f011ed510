"""Drive the running studio in real Chromium: uploads, the seq slider, bad input, screenshots."""

from __future__ import annotations

import time

import pytest

from dots3_demo.inspection import VideoSettings, inspect_file
from support import media_factory
from tests.browser.conftest import SEQ

pytestmark = pytest.mark.browser

GALLERY_ITEMS = "#frames-gallery .thumbnail-item"
CAPTIONS = "#frames-gallery .caption-label"


def _upload(page, elem_id: str, paths) -> None:
    page.set_input_files(f"#{elem_id} input[type=file]", paths)


def _wait_frames(page, count: int) -> None:
    page.wait_for_function(
        "([sel, n]) => document.querySelectorAll(sel).length === n", arg=[GALLERY_ITEMS, count]
    )


def _wait_status(page, text: str) -> None:
    page.wait_for_function("t => document.querySelector('#status').innerText.includes(t)", arg=text)


def _captions(page) -> list[str]:
    return [c.inner_text().strip() for c in page.locator(CAPTIONS).all()]


def test_video_upload_shows_sampled_frames(page, profile, clip_with_audio):
    expected = inspect_file(clip_with_audio, profile, VideoSettings(seq=SEQ), expected="video")
    _upload(page, "video-input", str(clip_with_audio))
    _wait_frames(page, len(expected.frames))
    captions = _captions(page)
    assert [c.split(" · ")[0] for c in captions] == [f.timestamp for f in expected.frames]
    assert all(c.endswith(f"{f.tokens} tok") for c, f in zip(captions, expected.frames, strict=True))
    _wait_status(page, f"{len(expected.frames)} frames")
    # the summary is drawn after the frames are on screen (with the figures)
    page.wait_for_function("() => document.querySelector('#summary').innerText.includes('video frames')")
    assert "Sound track kept" in page.locator("#summary").inner_text()


def test_seq_slider_resolves_frame_count(page, profile, clip_with_audio):
    big = inspect_file(clip_with_audio, profile, VideoSettings(seq=SEQ), expected="video")
    small = inspect_file(clip_with_audio, profile, VideoSettings(seq=2048), expected="video")
    assert len(small.frames) < len(big.frames)
    _upload(page, "video-input", str(clip_with_audio))
    _wait_frames(page, len(big.frames))
    page.get_by_role("tab", name="Budget").click()
    box = page.locator("#seq-slider input[type=number]")
    box.fill("2048")
    box.press("Tab")  # the slider's number box fires `release` on blur
    page.get_by_role("tab", name="Frames").click()
    _wait_frames(page, len(small.frames))
    _wait_status(page, "Re-solved for seq 2,048")
    assert [c.split(" · ")[0] for c in _captions(page)] == [f.timestamp for f in small.frames]
    # auto reserve follows seq
    page.get_by_role("tab", name="Budget").click()
    assert page.locator("#reserve-slider input[type=number]").input_value() == "512"


def test_bad_file_shows_message_and_page_keeps_working(page, profile, clip_with_audio, bad_video, media_dir):
    image = media_factory.make_image(media_dir / "browser_photo.png")
    _upload(page, "images-input", str(image))
    _wait_status(page, "✓ 1 image(s)")
    _upload(page, "video-input", str(bad_video))
    # the status line settles on the rejection with the file's name (while the rejected upload is cleared from its
    # panel, the line can show the images alone for a moment: CI read it then)
    _wait_status(page, f"Video rejected {bad_video.name}")
    page.wait_for_timeout(1000)
    assert f"Video rejected {bad_video.name}" in page.locator("#status").inner_text()  # and keeps it
    page.wait_for_selector(f"text={bad_video.name}", state="attached")  # the toast names the file too
    toasts = [t.inner_text() for t in page.locator(".toast-body").all()]
    assert any("Video rejected" in t and bad_video.name in t for t in toasts), toasts
    # other panels keep their results: the image grid is still there
    assert "≈391 image tokens" in page.locator("#summary").inner_text() or "images" in page.locator(
        "#summary").inner_text()
    # a following good upload works
    page.locator("#video-input button[aria-label='Clear']").first.click()
    expected = inspect_file(clip_with_audio, profile, VideoSettings(seq=SEQ), expected="video")
    _upload(page, "video-input", str(clip_with_audio))
    _wait_frames(page, len(expected.frames))
    assert "images" in page.locator("#summary").inner_text()


def test_screenshots_of_every_tab(chromium, studio_url, clip_with_audio, media_dir, shots_dir):
    photo = media_factory.make_image(media_dir / "shot_photo.png")
    wide = media_factory.make_image(media_dir / "shot_wide.png", width=1280, height=400, mode="RGBA")
    tone = media_factory.make_audio(media_dir / "shot_tone.wav", seconds=12)
    for scheme in ("light", "dark"):
        context = chromium.new_context(viewport={"width": 1440, "height": 1000}, color_scheme=scheme)
        page = context.new_page()
        page.set_default_timeout(90_000)
        page.goto(f"{studio_url}/?__theme={scheme}")
        page.wait_for_selector("#video-input input[type=file]", state="attached")
        if scheme == "light":
            page.screenshot(path=str(shots_dir / "00_empty.png"), full_page=True)
        _upload(page, "video-input", str(clip_with_audio))
        _wait_status(page, f"✓ {clip_with_audio.name}")  # not "frames": progress text shows there too
        _upload(page, "images-input", [str(photo), str(wide)])
        _wait_status(page, "✓ 2 image(s)")
        _upload(page, "audio-input", str(tone))
        _wait_status(page, f"✓ {tone.name}")
        tabs = [("Frames", "01_frames"), ("Budget", "02_budget"), ("Interleave", "03_interleave"),
                ("Image grid", "04_image_grid"), ("Audio mel", "05_audio_mel")]
        for tab, name in tabs:
            if scheme == "dark" and tab not in ("Frames", "Budget", "Interleave"):
                continue
            page.get_by_role("tab", name=tab).click()
            time.sleep(0.7)  # let images decode and the layout settle
            suffix = "" if scheme == "light" else "_dark"
            page.screenshot(path=str(shots_dir / f"{name}{suffix}.png"), full_page=True)
        summary = page.locator("#summary").inner_text()
        assert all(row in summary for row in ("video frames", "images", "audio clip")), summary
        context.close()
    assert len(list(shots_dir.glob("*.png"))) >= 8


def test_uploads_while_a_video_decodes_are_not_lost(page, clip_with_audio, media_dir):
    """Drop images while the video is still being processed: both must end up in the summary."""
    image = media_factory.make_image(media_dir / "race_photo.png")
    _upload(page, "video-input", str(clip_with_audio))
    _upload(page, "images-input", str(image))  # no wait: the video event is still running
    _wait_status(page, "✓ 1 image(s)")
    # each panel's result lands whichever finishes first; the summary shows both once both are in
    page.wait_for_function("() => ['video frames', 'images'].every(r => "
                           "document.querySelector('#summary').innerText.includes(r))")
