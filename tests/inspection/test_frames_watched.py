"""vLLM's video preprocessing watched frame by frame (``vllm_compat.video_preprocess_watching``): the same function,
the same result, each frame handed on the moment vLLM has made it, with the timestamp vLLM puts before it."""

from __future__ import annotations

import subprocess
import threading

import numpy as np
import pytest

from dots3_demo import vllm_compat
from dots3_demo.inspection import VideoSettings, inspect_file
from tests.inspection.conftest import CLIPS

SETTINGS = [VideoSettings(seq=32768), VideoSettings(seq=2048), VideoSettings(seq=8192, audio_cap=0.0)]


def _kwargs(profile, settings: VideoSettings) -> dict:
    """The arguments the inspector passes vLLM's function (``inspection.video.inspect_video_bytes``)."""
    return dict(tokenizer=profile.tokenizer, question=settings.question, seq=settings.seq,
                output_reserve=settings.output_reserve, audio_cap=settings.audio_cap,
                audio_sample_rate=vllm_compat.processor_module()._DEFAULT_SAMPLE_RATE, k_mode=settings.k_mode,
                max_new_tokens=settings.max_new_tokens)


def _same_parts(watched: list, plain: list) -> None:
    assert [p.kind for p in watched] == [p.kind for p in plain]
    for a, b in zip(watched, plain, strict=True):
        if a.kind == "text":
            assert a.value == b.value
        elif a.kind == "image":
            assert a.value.size == b.value.size and a.value.tobytes() == b.value.tobytes()
        else:
            np.testing.assert_array_equal(a.value, b.value)


def _watch(data: bytes, profile, settings: VideoSettings) -> tuple[list, list[tuple[int, float, object, bool]]]:
    """The watched call's parts, and each frame handed on: (position, seconds, picture, whether the call had
    returned then)."""
    made: list[tuple[int, float, object, bool]] = []
    returned = [False]
    function = vllm_compat.video_preprocess_watching(
        lambda position, seconds, picture: made.append((position, seconds, picture, returned[0])))
    parts = function(data, **_kwargs(profile, settings))
    returned[0] = True
    return parts, made


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"seq{s.seq}-audio{s.audio_cap:g}")
@pytest.mark.parametrize("name", sorted(CLIPS))
def test_each_frame_is_handed_on_as_vllm_makes_it_with_its_timestamp(name, settings, clip_factory, profile):
    data = clip_factory(name).read_bytes()
    video = vllm_compat.video_module()
    parts, made = _watch(data, profile, settings)
    _same_parts(parts, video.preprocess_dots3_note_video(data, **_kwargs(profile, settings)))
    images = [p.value for p in parts if p.kind == "image"]
    stamps = [parts[i - 1].value for i, p in enumerate(parts) if p.kind == "image"]  # the text before each frame
    assert [position for position, *_ in made] == list(range(len(images)))
    assert all(picture is image for (_, _, picture, _), image in zip(made, images, strict=True))  # the very pictures
    assert [f"<{video._format_timestamp(seconds)}>" for _, seconds, _, _ in made] == stamps
    assert not any(after for *_, after in made)  # each before vLLM's call returned


def test_a_truncated_video_keeps_the_timestamps_of_the_frames_vllm_could_decode(clip_factory, profile, tmp_path):
    """The moov atom first, the file cut in half: vLLM's first ``get_frames_at`` fails and it retries with fewer
    frames; the frames handed on are those it kept, with their timestamps."""
    fast = tmp_path / "faststart.mp4"
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-i", str(clip_factory("s320_12s_10fps_16k_mono")),
                    "-c", "copy", "-movflags", "+faststart", str(fast)], check=True)
    data = fast.read_bytes()[: fast.stat().st_size // 2]
    settings = VideoSettings(seq=32768)
    video = vllm_compat.video_module()
    parts, made = _watch(data, profile, settings)
    _same_parts(parts, video.preprocess_dots3_note_video(data, **_kwargs(profile, settings)))
    stamps = [parts[i - 1].value for i, p in enumerate(parts) if p.kind == "image"]
    path = tmp_path / "half.mp4"
    path.write_bytes(data)
    report = inspect_file(path, profile, settings)
    assert len(stamps) < report.solver.planned_frames  # vLLM kept fewer than it planned: the retry ran
    assert [f"<{video._format_timestamp(seconds)}>" for _, seconds, _, _ in made] == stamps


def test_vllms_module_is_left_as_it_is_and_other_calls_are_not_watched(clip_factory, profile):
    """The engine's own preprocessing in this process (another thread, the same module) runs as before: nothing
    of the module is replaced, and a plain call running beside a watched one hands nothing on."""
    video = vllm_compat.video_module()
    names = {name: getattr(video, name) for name in ("preprocess_dots3_note_video", "_decode_frames",
                                                     "_open_video", "_jpeg_roundtrip")}
    data = clip_factory("s640_6s_25fps_22k_stereo").read_bytes()
    settings = VideoSettings(seq=32768)
    plain: list = []
    beside = threading.Thread(target=lambda: plain.extend(
        video.preprocess_dots3_note_video(data, **_kwargs(profile, settings))))
    beside.start()
    parts, made = _watch(data, profile, settings)
    beside.join(60)
    assert len(made) == sum(p.kind == "image" for p in parts) == sum(p.kind == "image" for p in plain) > 0
    assert {name: getattr(video, name) for name in names} == names


def test_what_the_watcher_raises_stops_vllms_call(clip_factory, profile):
    data = clip_factory("s320_12s_10fps_16k_mono").read_bytes()
    made: list[int] = []

    class Enough(Exception):
        pass

    def stop_at_third(position, seconds, picture):
        made.append(position)
        if position == 2:
            raise Enough

    with pytest.raises(Enough):
        vllm_compat.video_preprocess_watching(stop_at_third)(data, **_kwargs(profile, VideoSettings(seq=32768)))
    assert made == [0, 1, 2]


def test_the_inspector_raises_what_its_frames_callback_raised_not_an_unreadable_file(clip_factory, profile):
    """A failure of the page's side while vLLM makes the frames is that failure, not "could not read this video"."""
    class PageGone(Exception):
        pass

    def frames_ready(frames):
        raise PageGone

    with pytest.raises(PageGone):
        inspect_file(clip_factory("s320_2s_10fps_silent"), profile, VideoSettings(seq=8192), frames_ready=frames_ready)


def test_a_vllm_whose_frame_loop_calls_other_helpers_gives_its_function_unwatched(monkeypatch):
    """Where ``_decode_frames`` no longer calls ``_open_video`` and ``_jpeg_roundtrip`` (another vLLM; here a
    wrapper), vLLM's function is returned as it is: the frames then come with the rest, never wrong."""
    video = vllm_compat.video_module()
    real = video._decode_frames
    monkeypatch.setattr(video, "_decode_frames", lambda *args, **kwargs: real(*args, **kwargs))
    assert vllm_compat.video_preprocess_watching(lambda *args: None) is video.preprocess_dots3_note_video
