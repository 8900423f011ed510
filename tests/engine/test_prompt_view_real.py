"""The prompt view (issue 21 §1-2) on prompts vLLM's REAL renderer and dots3_note processor expanded (preview
profile, CPU): its ids are the engine input's, its text round-trips, each pad run is one chip of the right kind,
and its counts by modality, read from the ids alone, equal the counts on vLLM's own placeholder ranges."""

from __future__ import annotations

import asyncio

import pytest

from dots3_demo.budget import VideoSettings
from dots3_demo.engine import SamplingSettings, TurnRequest
from dots3_demo.engine.inprocess import render_turn
from dots3_demo.engine.promptview import view_from_tokenizer
from dots3_demo.engine.stats import prompt_tokens_by_modality, prompt_tokens_from_view
from tests.engine.media import make_clip, make_png, make_wav
from tests.engine.real_renderer import build_preview_renderer

LIMITS = {"image": 8, "audio": 4, "video": 1}


@pytest.fixture(scope="module")
def renderer():
    return build_preview_renderer(LIMITS)


def _view(renderer, content, **kwargs):
    turn = TurnRequest(session_id="t", messages=[{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": content}], **kwargs)
    engine_input = asyncio.run(render_turn(renderer, turn, LIMITS))
    tokenizer = renderer.get_tokenizer()
    ids = list(engine_input["prompt_token_ids"])
    view = view_from_tokenizer(ids, tokenizer, "renderer")
    ranges = prompt_tokens_by_modality(ids, engine_input.get("mm_placeholders"), tokenizer.get_vocab())
    assert view.token_ids() == tuple(ids)
    assert view.text() == tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert prompt_tokens_from_view(view) == ranges  # from the ids alone, as on vLLM's placeholder ranges
    return view, ranges


def test_an_image_and_an_audio_clip_fold_to_one_chip_each(renderer, tmp_path):
    image = make_png(tmp_path / "a.png", width=640, height=480)
    wav = make_wav(tmp_path / "a.wav", seconds=3.0)
    view, counts = _view(renderer, [{"type": "image_url", "image_url": {"url": f"file://{image}"}},
                                    {"type": "audio_url", "audio_url": {"url": f"file://{wav}"}},
                                    {"type": "text", "text": "What is this?"}])
    pads = [s for s in view.spans if s.pad]
    assert [(s.kind, s.label) for s in pads] == [("image", f"<image pad> × {counts.image - 2:,}"),
                                                 ("audio", "<audio pad> × 38")]
    kinds = [s.kind for s in view.spans]
    assert kinds.count("image") == 3 and kinds.count("audio") == 3  # marker, pad run, marker
    assert [s.text for s in view.spans if s.kind == "special"][:2] == ["<|system|>", "<|endofsystem|>"]
    assert any(s.kind == "text" and "What is this?" in s.text for s in view.spans)
    assert view.spans[-1].text == "<|assistant|>"


def test_a_video_shows_each_frames_timestamp_and_its_sound_track(renderer, tmp_path):
    clip = make_clip(tmp_path / "v.mp4", seconds=4, audio=True)
    view, counts = _view(renderer, [{"type": "video_url", "video_url": {"url": str(clip)}},
                                    {"type": "text", "text": "Describe"}],
                         sampling=SamplingSettings(max_tokens=512), video=VideoSettings(seq=8192))
    stamps = [s.text for s in view.spans if s.kind == "video frame" and not s.pad and s.text.startswith("<0")]
    frames = [s for s in view.spans if s.kind == "video frame" and s.pad]
    sound = [s for s in view.spans if s.kind == "video sound" and s.pad]
    assert stamps[0] == "<00:00:00.00>" and len(stamps) == len(frames) > 1
    assert sound and sum(s.count for s in sound) == counts.video_audio > 0
    assert not any(s.kind in ("image", "audio") for s in view.spans)
