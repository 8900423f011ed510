"""The UI's plain handler functions, called directly (no browser, no server); uploads run as the page's events
run them (``support.uploads.Page``)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from dots3_demo.core.settings import ChatSettings, video_settings_from_controls
from dots3_demo.core.state import initial_state, new_session
from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.inspection.video import SampledFrames
from dots3_demo.ui import chat, chat_views, handlers
from dots3_demo.ui.chat_views import ENGINE_HELP
from dots3_demo.ui.handlers import EVENT_KEYS, FIGURE_KEYS, LATER_KEYS, SHARED_KEYS, VIEW_KEYS
from support.uploads import Page


@pytest.fixture(scope="module")
def loaded(profile, clip_with_audio):
    """State after uploading the 8 s clip with sound at the default budget."""
    state = initial_state(32768)
    shown = Page(profile, state).video(str(clip_with_audio), state.settings)
    assert shown.error is None, shown.error
    return shown


def test_video_upload_fills_gallery_like_inspect_file(profile, clip_with_audio, loaded):
    expected = inspect_file(clip_with_audio, profile, VideoSettings(seq=32768), expected="video")
    gallery = loaded.panel["frames_gallery"]
    assert len(gallery) == len(expected.frames) == len(loaded.state.video.frames)
    for (image, caption), frame in zip(gallery, expected.frames, strict=True):
        assert caption.startswith(frame.timestamp + " · ")
        assert f"{frame.grid[1]}×{frame.grid[2]} grid" in caption
        assert caption.endswith(f"{frame.tokens} tok")
        assert image.size == frame.image.size
    assert set(loaded.views) <= set(VIEW_KEYS)
    assert set(loaded.panel) <= set(EVENT_KEYS["video"]) and set(loaded.shared) == set(SHARED_KEYS)
    assert set(loaded.later) == set(LATER_KEYS) and not set(loaded.panel) & set(LATER_KEYS)
    assert set(loaded.figures) == {"cost_plot", "fps_plot", "timeline_plot"} < set(FIGURE_KEYS)
    for key in ("cost_plot", "fps_plot", "timeline_plot"):
        assert isinstance(loaded.figures[key], Figure)
    assert isinstance(loaded.shared["budget_plot"], Figure)
    assert "✓" in loaded.status, loaded.status
    assert f"{len(expected.frames)} frames" in loaded.status, loaded.status
    # the interleave view lists every audio segment and the groups
    assert len(loaded.later["segment_pick"]["choices"]) == len(expected.audio_segments)
    assert len(loaded.later["groups_df"]) == len(expected.groups)
    assert "Sound track kept" in loaded.shared["summary"]
    text = re.sub(r"<[^>]+>", "", loaded.shared["summary"])
    assert re.search(r"Sound track kept: \d+ tokens reserved", text), text  # the verdict is said once


def test_the_frames_are_shown_as_vllm_makes_them_before_the_budget_is_explained_and_drawn(profile, clip_with_audio):
    """vLLM's frames reach the page as its call makes them, one more each time, then all of them the moment its
    call returns: before the inspector explains the budget, and before the inspection commits, so before its other
    views, the summary and the figures (all drawn from the committed state)."""
    session = handlers.new_inspections(initial_state(32768))
    steps: list[str] = []
    seen: list[tuple[SampledFrames, object, int]] = []

    def frames_shown(frames):
        steps.append("all frames shown" if frames.complete else "frames shown")
        seen.append((frames, session.state.video, session.panel_version("video")))

    handlers.announce_video(session, str(clip_with_audio))
    update = handlers.inspect_video(session, profile, str(clip_with_audio), VideoSettings(seq=32768),
                                    lambda fraction, text: steps.append(text), frames_shown=frames_shown)
    assert update is not None and update.error is None
    report = update.state.video
    n = len(report.frames)
    assert steps.index("decoding with vLLM's preprocess_dots3_note_video") < steps.index("frames shown")
    assert steps.count("frames shown") == n and steps.count("all frames shown") == 1
    assert steps.index("all frames shown") < steps.index("explaining the budget"), steps
    assert [len(frames.frames) for frames, _, _ in seen] == [*range(1, n + 1), n]  # one more each time, then all
    assert all(video_then is None and version_then == 0 for _, video_then, version_then in seen)  # nothing committed
    assert session.panel_version("video") > 0
    for frames, _, _ in seen:  # each the very picture vLLM gave, with its timestamp, size, grid and tokens
        assert [f.to_dict() for f in frames.frames] == [f.to_dict() for f in report.frames[:len(frames.frames)]]
        assert all(a.image is b.image for a, b in zip(frames.frames, report.frames, strict=False))
    assert [image for image, _ in update.views["frames_gallery"]] == [f.image for f in seen[-1][0].frames]


def test_preview_marks_approximate_numbers(profile, loaded):
    assert profile.is_preview
    assert "≈" in loaded.panel["frames_gallery"][0][1]
    assert "≈" in loaded.shared["summary"]


def test_seq_change_resolves(profile, loaded):
    small = video_settings_from_controls(2048, True, 0, 0, 1.0, "eval_ek")
    outcome = Page(profile, loaded.state).settings(small)
    assert outcome.error is None, outcome.error
    assert outcome.state.settings.seq == 2048
    assert outcome.state.video.solver.seq == 2048
    assert len(outcome.panel["frames_gallery"]) < len(loaded.panel["frames_gallery"])
    assert outcome.panel["reserve"] == 512  # auto reserve follows seq
    assert "Re-solved for seq 2,048" in outcome.status
    # the earlier state object is untouched (gr.State keeps what we return)
    assert loaded.state.settings.seq == 32768


def test_explicit_reserve_and_max_new_tokens(profile, loaded):
    settings = video_settings_from_controls(8192, False, 1024, 3000, 1.0, "whole")
    outcome = Page(profile, loaded.state).settings(settings)
    assert outcome.error is None
    assert outcome.state.video.solver.effective_reserve == 3000
    assert outcome.state.video.solver.k_mode == "whole"


def test_bad_video_keeps_prior_state(profile, loaded, text_as_video, empty_video):
    for bad in (text_as_video, empty_video):
        outcome = Page(profile, loaded.state).video(str(bad), loaded.state.settings)
        assert outcome.error and bad.name in outcome.error
        assert bad.name in outcome.status and "⚠" in outcome.status
        assert outcome.state is loaded.state  # frames, images, audio all kept
        assert outcome.views == {}  # every other output is left alone


def test_image_in_video_panel_is_refused(profile, loaded, photo):
    outcome = Page(profile, loaded.state).video(str(photo), loaded.state.settings)
    assert outcome.error and outcome.state is loaded.state


def test_invalid_settings_keep_prior_state(profile, loaded):
    settings = video_settings_from_controls(4096, False, 4096, 0, 1.0, "eval_ek")
    outcome = Page(profile, loaded.state).settings(settings)
    assert outcome.error and "leaves no room" in outcome.error
    assert outcome.state is loaded.state and outcome.views == {}


def test_settings_without_video_update_budget_only(profile):
    state = initial_state(16384)
    outcome = Page(profile, state).settings(video_settings_from_controls(8192, True, 0, 0, 1, "eval_ek"))
    assert outcome.error is None
    assert set(outcome.panel) == {"reserve"} and set(outcome.shared) == {"summary", "budget_plot"}
    # the video panel's figures are drawn again, as the placeholders they were (there is no video)
    assert set(outcome.figures) == {"cost_plot", "fps_plot", "timeline_plot"}
    assert outcome.figures["fps_plot"] is None
    assert outcome.state.settings.seq == 8192


def test_images_good_and_bad(profile, loaded, photo, text_as_video):
    page = Page(profile, loaded.state)
    outcome = page.images([str(photo), str(text_as_video)])
    assert outcome.error and text_as_video.name in outcome.error  # the bad one is reported …
    assert len(outcome.state.images) == 1  # … the good one is shown
    assert len(outcome.panel["grid_gallery"]) == 1
    assert "34×46" in outcome.panel["grid_gallery"][0][1]
    assert outcome.state.video is loaded.state.video
    only_bad = page.images([str(text_as_video)])
    assert only_bad.error and only_bad.state is outcome.state and only_bad.views == {}


def test_audio_and_mel(profile, loaded, tone, long_tone):
    page = Page(profile, loaded.state)
    outcome = page.audio(str(tone))
    assert outcome.error is None
    rate, samples = outcome.panel["heard_audio"]
    assert rate == 16000 and samples.dtype == np.int16 and len(samples) == 48000
    assert isinstance(outcome.figures["mel_plot"], Figure)
    assert "audio clip" in outcome.shared["summary"]
    longer = page.audio(str(long_tone), "microphone")
    assert len(longer.state.audio.chunk_tokens) == 2
    assert longer.state.audio_source == "microphone"
    # clearing the file input while a recording is shown keeps the recording
    kept = page.audio(None, "file")
    assert kept.state.audio is longer.state.audio and kept.views == {}
    cleared = page.audio(None, "microphone")
    assert cleared.state.audio is None


def test_bad_audio(profile, loaded, text_as_video):
    outcome = Page(profile, loaded.state).audio(str(text_as_video))
    assert outcome.error and outcome.state is loaded.state


def test_segment_audio(loaded):
    report = loaded.state.video
    for seg in report.audio_segments:
        rate, samples = handlers.segment_audio(loaded.state, seg.index)
        assert rate == report.sample_rate and len(samples) == seg.samples
    assert handlers.segment_audio(loaded.state, 99) is None
    assert handlers.segment_audio(initial_state(1024), 0) is None


def test_clearing_video(profile, loaded):
    outcome = Page(profile, loaded.state).video(None, loaded.state.settings)
    assert outcome.state.video is None and outcome.panel["frames_gallery"] == []


def test_initial_views_cover_every_output(profile):
    views = handlers.all_views(profile, initial_state(32768))
    assert set(views) == set(VIEW_KEYS)
    assert "Nothing uploaded yet" in views["summary"]


def test_chat_without_engine_explains_how_to_attach(profile):
    async def collect():
        views = chat.send_message(None, initial_state(1024), new_session(), "hi", ChatSettings())
        return [view.history async for view in views]

    (history,) = asyncio.run(collect())
    assert history[0] == {"role": "user", "content": "hi"}
    assert history[-1]["content"] == ENGINE_HELP
    assert "--engine inprocess --tensor-parallel-size 8" in ENGINE_HELP
    assert "--endpoint http://host:8000/v1" in ENGINE_HELP
    assert "--tool-call-parser dots" in ENGINE_HELP
    assert chat_views.chat_welcome(None)[0]["content"] == ENGINE_HELP
    assert chat_views.engine_status(None, brief=True) == "no engine attached — preview mode"


def test_incomplete_video_is_flagged(profile, loaded):
    """A sound track that exists but was not decoded: the summary must say frames-only."""
    from dataclasses import replace

    report = loaded.state.video
    broken = replace(report, audio=replace(report.audio, decoded=False, kept=False, reason="not decoded"),
                     audio_segments=[], audio_pad_tokens=0)
    assert broken.complete is False
    html = handlers.summary_views(profile, replace(loaded.state, video=broken))["summary"]
    assert "INCOMPLETE" in html and "frames only" in html


def test_files_path_types(profile, loaded, photo):
    """Gradio may hand over a single path string or Path objects."""
    outcome = Page(profile, loaded.state).images(str(photo))
    assert len(outcome.state.images) == 1
    outcome = Page(profile, loaded.state).images([Path(photo)])
    assert len(outcome.state.images) == 1
