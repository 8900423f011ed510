"""The video report's numbers equal what vLLM's Dots3NoteProcessor produces for the same bytes."""

from __future__ import annotations

import pytest

from dots3_demo.inspection import VideoSettings
from tests.inspection.conftest import CLIPS, assert_video_parity

SWEEP_CLIP = "s320_12s_10fps_16k_mono"


@pytest.mark.parametrize("name", list(CLIPS))
def test_default_settings_match_vllm(name, clip_factory, inspected, vllm_video, profile):
    path = clip_factory(name)
    report = inspected(path)
    ref = vllm_video(path)
    assert_video_parity(report, ref, profile)
    spec = CLIPS[name]
    assert report.probe.has_audio == (spec.audio_rate is not None)
    assert report.complete
    if spec.audio_rate:
        # seq 32768 leaves room for every one of these short sound tracks
        assert report.audio.kept and report.audio_segments
        assert report.audio.decoded
        assert report.probe.audio_channels == spec.channels
        assert report.probe.audio_sample_rate == spec.audio_rate
        # the segments tile the 16 kHz track vLLM decoded, without gaps
        assert report.audio_segments[0].start_sample == 0
        assert report.audio_segments[-1].end_sample == pytest.approx(spec.seconds * 16000, rel=0.02)
    else:
        assert not report.audio_segments and not report.audio.kept
        assert "no sound track" in report.audio.reason


def test_public_processor_call_matches_process_video(clip_factory, inspected, profile):
    """The public ``processor("<|video_pad|>", videos=[bytes], …)`` path gives the same numbers."""
    path = clip_factory("s640_6s_25fps_22k_stereo")
    settings = VideoSettings(seq=16384, k_mode="logk", question="what happens at the end?")
    ref = profile.processor(
        "<|video_pad|>", videos=[path.read_bytes()], seq=settings.seq, k_mode=settings.k_mode,
        video_question=settings.question, max_new_tokens=0, audio_cap=1.0,
    )
    assert_video_parity(inspected(path, settings), ref, profile)


@pytest.mark.parametrize("seq", [4096, 8192, 32768, 131072])
def test_seq_sweep(seq, clip_factory, inspected, vllm_video, profile):
    path = clip_factory(SWEEP_CLIP)
    settings = VideoSettings(seq=seq)
    report = inspected(path, settings)
    assert_video_parity(report, vllm_video(path, settings), profile)
    assert report.solver.seq_length == seq - seq // 4


def test_seq_changes_the_result(clip_factory, inspected):
    path = clip_factory("s1280_2s_25fps_44k_stereo")
    small = inspected(path, VideoSettings(seq=4096))
    large = inspected(path, VideoSettings(seq=131072))
    assert small.prompt_tokens < large.prompt_tokens
    assert small.frames[0].tokens < large.frames[0].tokens


@pytest.mark.parametrize("k_mode", ["eval_ek", "eval30", "whole", "logk"])
def test_k_modes(k_mode, clip_factory, inspected, vllm_video, profile):
    path = clip_factory(SWEEP_CLIP)
    settings = VideoSettings(k_mode=k_mode, question="count the red bars" if k_mode == "logk" else "")
    report = inspected(path, settings)
    assert_video_parity(report, vllm_video(path, settings), profile)
    if k_mode == "whole":
        assert report.order[-1] == "audio" and report.order.count("audio") == 1


def test_logk_depends_on_question(clip_factory, inspected, vllm_video, profile):
    path = clip_factory(SWEEP_CLIP)
    orders = set()
    for question in ("a", "b", "c", "d", "e", "f"):
        settings = VideoSettings(k_mode="logk", question=question)
        report = inspected(path, settings)
        assert_video_parity(report, vllm_video(path, settings), profile)
        orders.add(tuple(report.order))
    assert len(orders) > 1  # the question seeds vLLM's grouping; the report follows it


@pytest.mark.parametrize(
    "settings, cause",
    [
        (VideoSettings(audio_cap=0.0), "audio_cap is 0"),
        (VideoSettings(audio_cap=0.001), "audio_cap"),  # 24.5 tokens allowed, ~152 needed
        (VideoSettings(seq=3900), "minimum video"),  # seq − reserve = 2925: audio + min video + 2240 too big
        (VideoSettings(seq=8192, max_new_tokens=5200), "minimum video"),  # reserve raised to 5200
        (VideoSettings(seq=8192, max_new_tokens=3000), None),  # raised reserve, audio still fits
        (VideoSettings(seq=8192, output_reserve=100), None),
        (VideoSettings(audio_cap=0.05), None),  # 1228 allowed: kept
    ],
    ids=["cap0", "cap-small", "seq-small", "max-new-tokens-drop", "max-new-tokens-keep",
         "reserve-100", "cap-0.05"],
)
def test_audio_drop_cases(settings, cause, clip_factory, inspected, vllm_video, profile):
    path = clip_factory(SWEEP_CLIP)
    report = inspected(path, settings)
    ref = vllm_video(path, settings)
    assert_video_parity(report, ref, profile)
    assert report.solver.effective_reserve == max(settings.configured_reserve, settings.max_new_tokens)
    assert report.solver.seq_length == settings.seq - report.solver.effective_reserve
    if cause is None:
        assert report.audio.kept and len(ref["video_audio_lengths"]) > 0
        assert report.audio.reason.startswith("kept")
    else:
        assert not report.audio.kept and len(ref["video_audio_lengths"]) == 0
        assert cause in report.audio.reason, report.audio.reason
        assert report.complete  # dropped by budget is not a decoding failure
        assert report.order == ["frame"] * len(report.frames)


def test_max_new_tokens_raises_reserve(clip_factory, inspected):
    path = clip_factory(SWEEP_CLIP)
    base = inspected(path, VideoSettings(seq=8192))
    raised = inspected(path, VideoSettings(seq=8192, max_new_tokens=5200))
    assert raised.solver.effective_reserve == 5200 > base.solver.effective_reserve == 2048
    assert raised.solver.visual_budget < base.solver.visual_budget


def test_profile_without_audio_tower_is_complete(clip_factory, tmp_path_factory, vllm_video):
    """No audio_config: vLLM forces audio_cap 0; that is not an 'incomplete' decode."""
    import json
    import shutil

    from dots3_demo.inspection import inspect_file
    from dots3_demo.profiles import PREVIEW_PROFILE_DIR, load_profile

    folder = tmp_path_factory.mktemp("no_audio_profile") / "profile"
    shutil.copytree(PREVIEW_PROFILE_DIR, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["audio_config"]
    (folder / "config.json").write_text(json.dumps(config))
    profile = load_profile(folder)
    path = clip_factory(SWEEP_CLIP)
    report = inspect_file(path, profile)
    ref = profile.processor._process_video(
        path.read_bytes(), detail="auto", size_overrides={}, seq=32768, output_reserve=None,
        audio_cap=1.0, audio_sample_rate=16000, k_mode="eval_ek", max_new_tokens=0, question="",
    )
    assert_video_parity(report, ref, profile)
    assert not report.audio.kept and "no audio tower" in report.audio.reason
    assert report.complete
    assert not any("INCOMPLETE" in n for n in report.notes)
