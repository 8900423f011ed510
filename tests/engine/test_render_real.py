"""render_turn through vLLM's REAL renderer and Dots processor (preview profile, CPU)."""

from __future__ import annotations

import asyncio
import base64

import pytest

from dots3_demo.budget import VideoSettings
from dots3_demo.engine import SamplingSettings, TurnRejected, TurnRequest
from dots3_demo.engine.inprocess import render_turn
from dots3_demo.engine.stats import prompt_tokens_by_modality
from tests.engine.media import make_clip, make_png, make_wav
from tests.engine.real_renderer import build_preview_renderer

LIMITS = {"image": 8, "audio": 4, "video": 1}


@pytest.fixture(scope="module")
def renderer():
    return build_preview_renderer(LIMITS)


def _render(renderer, content, **kwargs):
    turn = TurnRequest(session_id="t", messages=[{"role": "user", "content": content}], **kwargs)
    engine_input = asyncio.run(render_turn(renderer, turn, LIMITS))
    vocab = renderer.get_tokenizer().get_vocab()
    counts = prompt_tokens_by_modality(engine_input["prompt_token_ids"], engine_input.get("mm_placeholders"), vocab)
    return engine_input, counts


def test_image_turn(renderer, tmp_path):
    image = make_png(tmp_path / "a.png", width=640, height=480)
    _, counts = _render(renderer, [{"type": "image_url", "image_url": {"url": f"file://{image}"}},
                                   {"type": "text", "text": "What is this?"}])
    assert counts.image > 100 and counts.audio == 0 and counts.video == 0
    assert counts.text > 5
    assert counts.total == counts.text + counts.image


def test_audio_turn_as_input_audio(renderer, tmp_path):
    wav = make_wav(tmp_path / "a.wav", seconds=3.0)
    encoded = base64.b64encode(wav.read_bytes()).decode()
    _, counts = _render(renderer, [{"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}},
                                   {"type": "text", "text": "Transcribe"}])
    # 3 s at 16 kHz / (hop 160 x 8) = 37.5 -> 38 pad tokens, plus start/end markers
    assert counts.audio == 38 + 2
    assert counts.image == 0 and counts.video == 0


def test_video_turn_keeps_its_sound_track(renderer, tmp_path):
    clip = make_clip(tmp_path / "v.mp4", seconds=4, audio=True)
    engine_input, counts = _render(
        renderer,
        [{"type": "video_url", "video_url": {"url": str(clip)}}, {"type": "text", "text": "Describe"}],
        sampling=SamplingSettings(max_tokens=512), video=VideoSettings(seq=8192),
    )
    assert counts.video > 0 and counts.video_frames > 0
    assert counts.video_audio > 0, "the video's sound track was dropped"
    assert counts.image == 0 and counts.audio == 0
    # items are identified by our SHA-256 uuid of the bytes: a different clip, a different hash
    other = make_clip(tmp_path / "w.mp4", seconds=3, audio=True)
    other_input, _ = _render(renderer, [{"type": "video_url", "video_url": {"url": str(other)}}])
    assert other_input["mm_hashes"]["video"] != engine_input["mm_hashes"]["video"]


def test_silent_video_and_audio_cap_zero(renderer, tmp_path):
    clip = make_clip(tmp_path / "v.mp4", seconds=4, audio=True)
    _, counts = _render(renderer, [{"type": "video_url", "video_url": {"url": str(clip)}}],
                        video=VideoSettings(seq=8192, audio_cap=0.0))
    assert counts.video_frames > 0 and counts.video_audio == 0
    silent = make_clip(tmp_path / "s.mp4", seconds=2, audio=False)
    _, counts = _render(renderer, [{"type": "video_url", "video_url": {"url": str(silent)}}])
    assert counts.video_frames > 0 and counts.video_audio == 0


def test_bad_video_is_rejected_clearly(renderer, tmp_path):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(TurnRejected, match="empty"):
        _render(renderer, [{"type": "video_url", "video_url": {"url": str(empty)}}])
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all" * 10)
    with pytest.raises(TurnRejected, match="cannot open the video"):
        _render(renderer, [{"type": "video_url", "video_url": {"url": str(junk)}}])
