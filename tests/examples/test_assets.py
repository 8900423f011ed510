"""The committed example files: present, small, documented, holding what they claim, and rebuilt by the script."""

from __future__ import annotations

import hashlib
import json
import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui.examples import EXAMPLES_DIR, studio_examples

MAX_TOTAL_BYTES = 1_000_000
SPEECH_RMS = 0.02  # well above the encoders' noise, well below espeak-ng's speech level
SILENCE_RMS = 0.003


def _example_files() -> set[str]:
    return {name for example in studio_examples() for name in example.files()}


def _rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if len(samples) else 0.0


def read_wav(path: Path) -> tuple[int, int, np.ndarray]:
    """(rate, channels, float32 samples of the first channel)."""
    with wave.open(str(path), "rb") as w:
        rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        assert width == 2, f"{path.name}: {8 * width}-bit, expected 16-bit"
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, channels)
    return rate, channels, pcm[:, 0].astype(np.float32) / 32768.0


def decode_sound_track(path: Path) -> tuple[int, np.ndarray]:
    """The video's sound track, decoded by PyAV, as (rate, mono float32)."""
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        chunks = [f.to_ndarray().reshape(-1) for frame in container.decode(stream) for f in resampler.resample(frame)]
    return rate, np.concatenate(chunks)


def describe_video(path: Path) -> dict:
    """Stream facts that must not change when the file is rebuilt."""
    with av.open(str(path)) as container:
        video, audio = container.streams.video[0], container.streams.audio[0]
        frames = sum(1 for _ in container.decode(video))
        return {
            "video_codec": video.codec_context.name, "size": (video.width, video.height),
            "fps": video.average_rate, "frames": frames, "duration": round(float(container.duration / av.time_base), 1),
            "audio_codec": audio.codec_context.name, "audio_rate": audio.codec_context.sample_rate,
            "audio_channels": audio.codec_context.channels,
        }


# ---------------------------------------------------------------- the folder
def test_every_example_file_exists():
    for example in studio_examples():
        assert example.files(), example.label
        for name in example.files():
            assert (EXAMPLES_DIR / name).is_file(), f"{example.label}: {name} missing"


def test_folder_holds_only_built_files_and_is_small():
    names = {p.name for p in EXAMPLES_DIR.iterdir()}
    assert names == _example_files() | {"README.md"}
    total = sum(p.stat().st_size for p in EXAMPLES_DIR.iterdir())
    assert total < MAX_TOTAL_BYTES, f"{total:,} bytes"


def test_readme_states_provenance_and_every_prompt():
    text = (EXAMPLES_DIR / "README.md").read_text(encoding="utf-8")
    for needle in ("scripts/build_examples.py", "CC0", "espeak-ng", "Built with:"):
        assert needle in text
    for example in studio_examples():
        assert example.label in text and example.prompt in text and example.expected in text
    for name in _example_files():
        assert f"`{name}`" in text


# ---------------------------------------------------------------- the script rebuilds them
def test_rebuild_writes_the_same_files(rebuilt, build_script):
    assert {p.name for p in rebuilt.iterdir()} == {p.name for p in EXAMPLES_DIR.iterdir()}
    assert (rebuilt / "tools.json").read_bytes() == (EXAMPLES_DIR / "tools.json").read_bytes()
    committed_readme = (EXAMPLES_DIR / "README.md").read_text(encoding="utf-8")
    if f"Built with: {build_script.toolchain()}." in committed_readme:
        # same espeak-ng / PyAV / matplotlib / Pillow as the committed build: the bytes must match
        differ = [p.name for p in EXAMPLES_DIR.iterdir() if p.read_bytes() != (rebuilt / p.name).read_bytes()]
        assert differ == [], f"not reproducible byte for byte: {differ}"


@pytest.mark.parametrize("name", ["rain_chart.png", "shapes.png"])
def test_rebuilt_images_look_the_same(rebuilt, name):
    with Image.open(EXAMPLES_DIR / name) as a, Image.open(rebuilt / name) as b:
        assert (a.size, a.mode) == (b.size, b.mode) == (a.size, "RGB")
        diff = np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16))
    assert diff.mean() < 2.0  # identical here; other matplotlib/Pillow versions may anti-alias differently


@pytest.mark.parametrize("name", ["spoken_question.wav", "shapes_question.wav"])
def test_rebuilt_speech_has_the_same_format_and_length(rebuilt, name):
    rate_a, channels_a, a = read_wav(EXAMPLES_DIR / name)
    rate_b, channels_b, b = read_wav(rebuilt / name)
    assert (rate_a, channels_a) == (rate_b, channels_b) == (16000, 1)
    assert abs(len(a) - len(b)) <= 0.05 * len(a)


def test_rebuilt_video_has_the_same_streams(rebuilt):
    assert describe_video(rebuilt / "room_clip.mp4") == describe_video(EXAMPLES_DIR / "room_clip.mp4")


# ---------------------------------------------------------------- content
@pytest.mark.parametrize("name", ["spoken_question.wav", "shapes_question.wav"])
def test_spoken_questions_are_16k_mono_speech(name):
    rate, channels, samples = read_wav(EXAMPLES_DIR / name)
    assert (rate, channels) == (16000, 1)
    assert 2.0 <= len(samples) / rate <= 6.0
    assert _rms(samples) > SPEECH_RMS
    assert _rms(samples[: int(0.2 * rate)]) < SILENCE_RMS  # the 0.25 s lead-in is silent


def test_video_is_a_small_h264_aac_clip():
    facts = describe_video(EXAMPLES_DIR / "room_clip.mp4")
    assert facts == {
        "video_codec": "h264", "size": (426, 240), "fps": Fraction(10), "frames": 80, "duration": 8.0,
        "audio_codec": "aac", "audio_rate": 16000, "audio_channels": 1,
    }


def test_video_sound_track_speaks_where_the_script_put_speech(build_script):
    rate, track = decode_sound_track(EXAMPLES_DIR / "room_clip.mp4")
    starts = [start for start, _ in build_script.VIDEO_SPEECH]
    assert _rms(track[: int((starts[0] - 0.2) * rate)]) < SILENCE_RMS  # nothing before the first words
    for start in starts:
        window = track[int((start + 0.1) * rate): int((start + 1.0) * rate)]
        assert _rms(window) > SPEECH_RMS, f"no speech after {start} s"


def test_video_picture_is_what_the_script_draws(build_script):
    """Decoded frames match the script's drawing (sign, ball, clock): nothing else is in the picture."""
    with av.open(str(EXAMPLES_DIR / "room_clip.mp4")) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index % 20:
                continue
            decoded = frame.to_ndarray(format="rgb24").astype(np.int16)
            drawn = build_script.video_frame(index).astype(np.int16)
            assert np.abs(decoded - drawn).mean() < 6.0, f"frame {index}"
    spoken = " ".join(text for _, text in build_script.VIDEO_SPEECH).lower()
    assert "falcon" in spoken and "falcon" not in build_script.ROOM_SIGN.lower()


def test_chart_answer_matches_the_data(build_script):
    months, values = build_script.RAIN_MONTHS, build_script.RAIN_MM
    top = int(np.argmax(values))
    assert list(values).count(values[top]) == 1  # one tallest bar
    chart = next(e for e in studio_examples() if "rain_chart.png" in e.images)
    assert chart.expected.startswith("April") and months[top] == "Apr" and f"{values[top]} mm" in chart.expected


def test_shapes_picture_has_three_red_circles(build_script):
    """Count red blobs in the pixels and tell circles (fill ≈ π/4 of the box) from squares (≈ 1)."""
    rgb = np.asarray(Image.open(EXAMPLES_DIR / "shapes.png").convert("RGB"), np.int16)
    red = (rgb[..., 0] > 180) & (rgb[..., 1] < 90) & (rgb[..., 2] < 90)
    labels, count = ndimage.label(red)
    fills = []
    for index, box in enumerate(ndimage.find_objects(labels), start=1):
        area = (labels[box] == index).sum()
        fills.append(area / ((box[0].stop - box[0].start) * (box[1].stop - box[1].start)))
    circles = sum(1 for f in fills if 0.7 < f < 0.85)
    squares = sum(1 for f in fills if f > 0.95)
    assert (count, circles, squares) == (4, 3, 1)
    assert build_script.SHAPES_QUESTION == "How many red circles are in the picture?"
    example = next(e for e in studio_examples() if e.audio == "shapes_question.wav")
    assert example.expected.startswith("3 ")


def test_tools_file_is_the_studio_example_tools():
    assert json.loads((EXAMPLES_DIR / "tools.json").read_text(encoding="utf-8")) == EXAMPLE_TOOLS


def test_example_files_are_distinct():
    digests = {hashlib.sha256((EXAMPLES_DIR / n).read_bytes()).hexdigest() for n in _example_files()}
    assert len(digests) == len(_example_files())
