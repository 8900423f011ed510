"""Bad input → one clear line, never a traceback; the rest of a CLI run still prints."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dots3_demo.inspection import InspectionError, inspect_file
from support import media_factory
from support.media_factory import png_claiming
from tests.inspection.conftest import run_cli

CLASS_NAMES = ("Traceback", "KeyError", "IndexError", "RuntimeError", "ValueError", "OSError",
               "Exception", "<_io.", " object at 0x")




@pytest.fixture(scope="session")
def bad(media_dir: Path) -> dict[str, Path]:
    d = media_dir / "bad"
    d.mkdir()
    files: dict[str, Path] = {}

    def put(name: str, data: bytes) -> None:
        files[name] = d / name
        files[name].write_bytes(data)

    good = media_factory.make_video(d / "good.mp4", seconds=2, audio_rate=16000)
    files["good.mp4"] = good
    data = good.read_bytes()
    put("corrupt.mp4", data[:32] + np.random.default_rng(1).bytes(len(data) - 32))
    put("zero.mp4", b"")
    put("half.mp4", data[: len(data) // 2])
    put("text.mp4", b"this is a note, not a video\n" * 4)
    put("random.mkv", np.random.default_rng(0).bytes(4000))
    png = media_factory.make_image(d / "picture.png", width=64, height=48)
    files["picture.png"] = png
    shutil.copy(png, d / "picture.wav")
    files["picture.wav"] = d / "picture.wav"
    files["audio_only.m4a"] = media_factory.make_audio(d / "audio_only.m4a", seconds=1.0)
    files["short.wav"] = media_factory.make_audio(d / "short.wav", seconds=0.05)
    import wave

    with wave.open(str(d / "empty.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"")
    files["empty.wav"] = d / "empty.wav"
    files["tiny.png"] = media_factory.make_image(d / "tiny.png", width=5, height=40)
    files["extreme.png"] = media_factory.make_image(d / "extreme.png", width=5000, height=20)
    files["cmyk.jpg"] = media_factory.make_image(d / "cmyk.jpg", width=100, height=80, mode="CMYK")
    files["gray16.png"] = media_factory.make_image(d / "gray16.png", width=100, height=80, mode="I;16")
    files["rgba.png"] = media_factory.make_image(d / "rgba.png", width=100, height=80, mode="RGBA")
    files["palette.png"] = media_factory.make_image(d / "palette.png", width=100, height=80, mode="P")
    frames = [Image.new("RGB", (64, 48), (60 * i, 0, 0)) for i in range(3)]
    frames[0].save(d / "anim.gif", save_all=True, append_images=frames[1:], duration=100)
    files["anim.gif"] = d / "anim.gif"
    files["big.png"] = media_factory.make_image(d / "big.png", width=1200, height=1000)
    put("huge_header.png", png_claiming(100_000, 100_000))
    trunc = files["big.png"].read_bytes()
    put("truncated.png", trunc[: len(trunc) // 2])
    # MPEG-1 elementary stream: PIL "identifies" it as an image but cannot decode it
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-i", str(good), "-an", "-r", "25",
                    "-c:v", "mpeg1video", "-f", "mpeg1video", str(d / "elementary.m1v")], check=True)
    files["elementary.m1v"] = d / "elementary.m1v"
    return files


def _assert_clear(message: str, *causes: str) -> None:
    assert message and "\n" not in message, message
    for name in CLASS_NAMES:
        assert name not in message, message
    low = message.lower()
    assert any(c.lower() in low for c in causes), f"{message!r} does not mention {causes}"


ERROR_CASES = [
    ("corrupt.mp4", None, ("corrupt", "could not read", "cannot read")),
    ("zero.mp4", None, ("empty (0 bytes)",)),
    ("half.mp4", None, ("truncated",)),
    ("text.mp4", None, ("text file",)),
    ("random.mkv", None, ("cannot read this file", "not a media file")),
    ("picture.wav", "audio", ("PNG image, not audio",)),
    ("empty.wav", None, ("zero length", "no samples")),
    ("audio_only.m4a", "video", ("no video stream",)),
    ("anim.gif", "video", ("GIF image, not video",)),
    ("tiny.png", None, ("at least 7 px",)),
    ("extreme.png", None, ("aspect ratio is 250:1",)),
    ("huge_header.png", None, ("10000 megapixels", "above the limit")),
    ("truncated.png", None, ("truncated",)),
    ("elementary.m1v", None, ("truncated", "codec")),
]


@pytest.mark.parametrize("name, expected, causes", ERROR_CASES, ids=[c[0] + f"-{c[1]}" for c in ERROR_CASES])
def test_bad_file_gives_one_clear_line(name, expected, causes, bad, profile):
    with pytest.raises(InspectionError) as err:
        inspect_file(bad[name], profile, expected=expected)
    _assert_clear(str(err.value), *causes)


def test_pixel_limit_is_applied_before_decoding(bad, profile):
    with pytest.raises(InspectionError) as err:
        inspect_file(bad["big.png"], profile, max_image_pixels=1_000_000)
    _assert_clear(str(err.value), "1200×1000", "above the limit")
    assert inspect_file(bad["big.png"], profile).grid  # fine with the default limit


WORKS_WITH_NOTE = [
    ("picture.wav", "named like audio"),
    ("short.wav", "shorter than one audio token"),
    ("cmyk.jpg", "CMYK"),
    ("gray16.png", "16/32-bit"),
    ("rgba.png", "transparency"),
    ("palette.png", "P image"),
    ("anim.gif", "only the first frame"),
]


@pytest.mark.parametrize("name, note", WORKS_WITH_NOTE, ids=[c[0] for c in WORKS_WITH_NOTE])
def test_odd_file_works_with_note(name, note, bad, profile):
    report = inspect_file(bad[name], profile)
    assert any(note in n for n in report.notes), report.notes
    assert report.tokens > 0


def test_short_audio_gets_one_token(bad, profile):
    report = inspect_file(bad["short.wav"], profile)
    assert report.samples == 800 and report.tokens == 1


def test_renamed_png_is_inspected_as_image(bad, profile):
    assert type(inspect_file(bad["picture.wav"], profile)).__name__ == "ImageReport"


def test_audio_only_m4a_without_expectation_is_audio(bad, profile):
    report = inspect_file(bad["audio_only.m4a"], profile)
    assert report.samples == pytest.approx(16000, abs=2000)


def test_truncated_faststart_mp4_is_explained(bad, media_dir, profile):
    """moov at the front: FFmpeg opens the half file; the report must not blame frame merging."""
    fast = media_dir / "bad" / "faststart.mp4"
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-i", str(bad["good.mp4"]), "-c", "copy",
                    "-movflags", "+faststart", str(fast)], check=True)
    data = fast.read_bytes()
    cut = media_dir / "bad" / "faststart_half.mp4"
    cut.write_bytes(data[: len(data) // 2])
    try:
        report = inspect_file(cut, profile)
    except InspectionError as err:
        _assert_clear(str(err), "truncated")
        return
    if len(report.frames) < report.solver.planned_frames:
        assert any("could not be decoded" in n for n in report.notes), report.notes
        assert not any("are merged" in n for n in report.notes), report.notes


def test_cli_keeps_going_after_bad_files(bad):
    names = ["zero.mp4", "picture.png", "text.mp4", "short.wav", "extreme.png", "picture.wav"]
    status, lines, raw = run_cli(*[str(bad[n]) for n in names], "--json")
    assert status == 2
    assert "Traceback" not in raw
    assert [line["file"] for line in lines] == [str(bad[n]) for n in names]
    by_name = {Path(line["file"]).name: line for line in lines}
    for name in ("zero.mp4", "text.mp4", "extreme.png"):
        assert "error" in by_name[name] and "kind" not in by_name[name]
        _assert_clear(by_name[name]["error"], "empty", "text file", "aspect ratio")
    for name, kind in (("picture.png", "image"), ("short.wav", "audio"), ("picture.wav", "image")):
        assert by_name[name]["kind"] == kind and "error" not in by_name[name]
    assert any("named like audio" in n for n in by_name["picture.wav"]["image"]["notes"])


def test_cli_exit_zero_when_all_good(bad):
    status, lines, _ = run_cli(str(bad["picture.png"]), str(bad["short.wav"]), "--json")
    assert status == 0 and all("error" not in line for line in lines)


def test_cli_text_mode_prints_error_lines(bad):
    status, _, raw = run_cli(str(bad["zero.mp4"]), str(bad["picture.png"]))
    assert status == 2
    lines = raw.splitlines()
    assert any("zero.mp4: ERROR the file is empty" in line for line in lines)
    assert any("picture.png: image" in line for line in lines)
