"""Every example goes through the inspector and the upload events like an upload, and is a request vLLM takes."""

from __future__ import annotations

import pytest

from dots3_demo.core.state import StudioState, initial_state
from dots3_demo.core.turns import panel_media
from dots3_demo.engine.media import check_media_limits
from dots3_demo.inspection import AudioReport, ImageReport, VideoReport, VideoSettings, inspect_file
from dots3_demo.profiles import DEFAULT_MM_LIMITS
from dots3_demo.tools import parse_tools_json
from dots3_demo.ui import chat, chat_views
from dots3_demo.ui.examples import EXAMPLES_DIR, StudioExample, example_row, studio_examples
from support.uploads import Page

SEQ = 32768
VIEW_TABS = {"frames", "budget", "interleave", "images", "mel"}


def _load(profile, example: StudioExample, page: Page | None = None) -> StudioState:
    """What the panels' ``.change`` events do after a click: set or clear each panel, in turn (on ``page``:
    the page the earlier clicks were on)."""
    video, images, audio, _prompt, _tools = example_row(example)
    page = page or Page(profile, initial_state(SEQ))
    for upload in (lambda: page.video(video), lambda: page.images(images), lambda: page.audio(audio, "file")):
        result = upload()
        assert result.error is None, f"{example.label}: {result.error}"
    return page.state


def test_examples_are_well_formed():
    examples = studio_examples()
    assert len({e.label for e in examples}) == len(examples)
    for e in examples:
        assert e.prompt.strip() and e.expected.strip()
        assert e.tab is None or e.tab in VIEW_TABS
        assert not (e.video and (e.images or e.audio)), f"{e.label}: vLLM refuses a video mixed with images/audio"
    kinds = {("video" if e.video else "") + ("images" if e.images else "") + ("audio" if e.audio else "")
             + ("tools" if e.tools else "") for e in examples}
    assert {"video", "images", "audio", "tools"} <= kinds  # every panel has an example


def test_example_rows_use_absolute_paths():
    for e in studio_examples():
        video, images, audio, prompt, tools = example_row(e)
        for path in [video, *(images or []), audio]:
            if path is not None:
                assert path.startswith("/") and path.startswith(str(EXAMPLES_DIR.resolve()))
        assert prompt == e.prompt
        assert (tools != "") == bool(e.tools)


def test_video_example_keeps_its_sound_track(profile):
    report = inspect_file(EXAMPLES_DIR / "room_clip.mp4", profile, VideoSettings(seq=SEQ), expected="video")
    assert isinstance(report, VideoReport)
    assert report.complete and report.audio.in_file and report.audio.decoded and report.audio.kept
    assert report.audio_pad_tokens > 0 and report.audio_segments
    assert len(report.frames) >= 4 and report.image_pad_tokens > 0
    assert report.probe.duration == pytest.approx(8.0, abs=0.05)


@pytest.mark.parametrize("name", ["rain_chart.png", "shapes.png"])
def test_image_examples_need_no_conversion(profile, name):
    report = inspect_file(EXAMPLES_DIR / name, profile, expected="image")
    assert isinstance(report, ImageReport)
    assert report.original_mode == "RGB" and report.notes == [] and report.tokens > 0


@pytest.mark.parametrize("name", ["spoken_question.wav", "shapes_question.wav"])
def test_audio_examples_are_what_the_model_hears(profile, name):
    report = inspect_file(EXAMPLES_DIR / name, profile, expected="audio")
    assert isinstance(report, AudioReport)
    assert (report.original_sample_rate, report.original_channels, report.sample_rate) == (16000, 1, 16000)
    assert 2.0 < report.duration < 6.0 and report.tokens > 0


@pytest.mark.parametrize("example", studio_examples(), ids=lambda e: e.label)
def test_each_example_loads_through_the_handlers_and_is_a_valid_request(profile, example):
    state = _load(profile, example)
    media = panel_media(state)
    assert sorted(m.kind for m in media) == sorted(
        (["video"] if example.video else []) + ["image"] * len(example.images) + (["audio"] if example.audio else [])
    )
    assert all(m.tokens > 0 for m in media)
    message, _shown = chat.user_turn(example.prompt, media)
    check_media_limits([message], DEFAULT_MM_LIMITS)  # raises what vLLM's Dots processor would refuse
    if example.video:
        assert state.video is not None and state.video.audio_pad_tokens > 0


def test_switching_examples_replaces_the_media(profile):
    """Clicking one example after another leaves only the last one's media in the panels."""
    page = Page(profile, initial_state(SEQ))
    for example in studio_examples():
        state = _load(profile, example, page)
        kinds = {m.kind for m in panel_media(state)}
        assert ("video" in kinds) == bool(example.video)
        assert ("image" in kinds) == bool(example.images)
        assert ("audio" in kinds) == bool(example.audio)


def test_tools_example_fills_a_valid_tools_editor():
    example = next(e for e in studio_examples() if e.tools)
    text = example_row(example)[4]
    tools = parse_tools_json(text)
    assert [t["function"]["name"] for t in tools] == ["get_weather", "search", "calculator"]
    assert chat_views.validate_tools_md(text).startswith("✓ 3 tool(s)")
