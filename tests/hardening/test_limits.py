"""Upload limits: refused on the file's header with a message naming the limit, before any decoding.

The over-limit files are cheap: a PNG whose header declares 8000×8000 (16 bytes of pixel data),
an 11-minute 64×64 clip at 1 fps, an 11-minute 1 kHz WAV, one 4096×2176 frame.
"""

from __future__ import annotations

import contextlib
import io
import struct
import urllib.request
import uuid
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from dots3_demo import vllm_compat
from dots3_demo.cli.limits import limits_from_args
from dots3_demo.core.state import StudioState, initial_state
from dots3_demo.core.turns import panel_media
from dots3_demo.inspection import InspectionError, inspect_file
from dots3_demo.inspection import audio as audio_module
from dots3_demo.inspection import image as image_module
from dots3_demo.inspection.limits import (
    DURATION_SLACK_S,
    FLAGS,
    UploadLimits,
    check_limits,
    parse_file_size,
    parse_pixels,
    parse_resolution,
)
from dots3_demo.inspection.probe import MediaProbe
from dots3_demo.ui import handlers
from support import media_factory
from support.uploads import Page, Shown
from tests.inspection.conftest import run_cli

DEFAULT = UploadLimits()


def _png_declaring(path: Path, width: int, height: int) -> Path:
    """A valid PNG header declaring ``width``×``height`` with almost no pixel data (decoding fails)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16))
                     + chunk(b"IEND", b""))
    return path


@pytest.fixture(scope="module")
def files(media_dir: Path) -> dict[str, Path]:
    d = media_dir / "limits"
    d.mkdir(exist_ok=True)
    return {
        "huge.png": _png_declaring(d / "huge.png", 8000, 8000),
        "photo.png": media_factory.make_image(d / "photo.png", width=640, height=480),
        "long.mp4": media_factory.make_video(d / "long.mp4", seconds=660, width=64, height=64, fps=1,
                                             audio_rate=None),
        "wide.mp4": media_factory.make_video(d / "wide.mp4", seconds=1, width=4096, height=2176, fps=1,
                                             audio_rate=None),
        "short.mp4": media_factory.make_video(d / "short.mp4", seconds=2, width=160, height=96, fps=5,
                                              audio_rate=None),
        "long.wav": media_factory.make_audio(d / "long.wav", seconds=660, rate=1000),
        "tone.wav": media_factory.make_audio(d / "tone.wav", seconds=1.5),
    }


def _probe(kind: str, *, width: int = 0, height: int = 0, duration: float = 1.0, size: int = 1000) -> MediaProbe:
    return MediaProbe(path=Path(f"x.{kind}"), kind=kind, size_bytes=size, format_name=kind,  # type: ignore[arg-type]
                      width=width, height=height, duration=duration)


def _rejects(probe: MediaProbe, limits: UploadLimits = DEFAULT) -> str:
    with pytest.raises(InspectionError) as err:
        check_limits(probe, limits)
    return str(err.value)


# ---------------------------------------------------------------- the limits themselves
def test_defaults_are_the_documented_ones():
    assert DEFAULT == UploadLimits(max_file_size="500mb", max_video_seconds=600, max_video_resolution=(3840, 2160),
                                   max_image_pixels=50_000_000, max_audio_seconds=600)
    assert DEFAULT.max_file_bytes == 500 * 1024**2


@pytest.mark.parametrize("text, expected", [("500mb", 500 * 1024**2), ("2GB", 2 * 1024**3), ("64 kb", 65536),
                                            ("1048576", 1048576), (4096, 4096)])
def test_file_size_syntax_is_gradios(text, expected):
    import gradio.utils

    assert parse_file_size(text) == expected
    if not str(text).isdigit():  # Gradio wants a unit on strings; the app hands it bytes anyway
        assert gradio.utils._parse_file_size(text) == expected  # what Blocks.launch(max_file_size=…) makes of it


@pytest.mark.parametrize("text", ["", "mb", "5 parsecs", "-1mb", "0", "1.5gb"])
def test_bad_file_sizes_are_refused(text):
    with pytest.raises(ValueError):
        parse_file_size(text)


def test_resolution_and_pixel_syntax():
    assert parse_resolution("3840x2160") == parse_resolution("2160×3840") == (3840, 2160)
    assert parse_pixels("50M") == parse_pixels("50mp") == parse_pixels("50000000") == 50_000_000
    assert parse_pixels("12.5M") == 12_500_000
    for bad in ("3840", "0x100", "wide"):
        with pytest.raises(ValueError):
            parse_resolution(bad)
    with pytest.raises(ValueError):
        parse_pixels("lots")


@pytest.mark.parametrize("field, value", [("max_video_seconds", 0), ("max_audio_seconds", -5),
                                          ("max_image_pixels", 0), ("max_image_pixels", 200_000_000),
                                          ("max_file_size", "big"), ("max_video_resolution", (0, 10))])
def test_inconsistent_limits_are_refused(field, value):
    with pytest.raises(ValueError):
        replace(DEFAULT, **{field: value})


def test_checks_on_probes_name_limit_value_and_flag():
    message = _rejects(_probe("image", width=8000, height=8000))
    assert "8000×8000 = 64.0 megapixels" in message and "50.0 megapixels" in message
    assert FLAGS["max_image_pixels"] in message
    message = _rejects(_probe("video", width=4096, height=2176))
    assert "4096×2176" in message and "3840×2160" in message and FLAGS["max_video_resolution"] in message
    message = _rejects(_probe("video", width=320, height=240, duration=723.4))
    assert "12:03" in message and "723.4 s" in message and "600 s" in message and FLAGS["max_video_seconds"] in message
    message = _rejects(_probe("audio", duration=3700))
    assert "1:01:40" in message and "600 s" in message and FLAGS["max_audio_seconds"] in message
    message = _rejects(_probe("image", width=10, height=10, size=600 * 1024**2))
    assert "600.0 MB" in message and "500mb" in message and FLAGS["max_file_size"] in message


def test_limits_are_inclusive_and_orientation_free():
    check_limits(_probe("image", width=10_000, height=5_000), DEFAULT)  # exactly 50 MP
    _rejects(_probe("image", width=10_001, height=5_000))
    check_limits(_probe("video", width=2160, height=3840), DEFAULT)  # portrait 4K
    check_limits(_probe("video", width=3840, height=2160, duration=600 + DURATION_SLACK_S), DEFAULT)
    _rejects(_probe("video", width=3841, height=100))
    _rejects(_probe("video", width=2161, height=2161))  # short side over 2160
    check_limits(_probe("video", width=100, height=3840), DEFAULT)
    _rejects(_probe("video", width=64, height=64, duration=600 + DURATION_SLACK_S + 0.1))
    check_limits(_probe("audio", duration=600.02), DEFAULT)  # encoder padding on a 10-minute clip
    # each limit is its own: a long audio file is fine for the video limit and vice versa
    check_limits(_probe("audio", duration=900), replace(DEFAULT, max_audio_seconds=1000, max_video_seconds=10))
    _rejects(_probe("video", width=64, height=64, duration=900), replace(DEFAULT, max_audio_seconds=1000))


# ---------------------------------------------------------------- on real files, before decoding
@pytest.fixture
def no_decoding(monkeypatch):
    """Make every decoding step of the inspector raise: a test passing through it fails."""

    def refuse(*args, **kwargs):
        raise AssertionError("decoding started")

    for target, name in ((vllm_compat, "video_module"), (image_module, "load_image_as_vllm"),
                         (audio_module, "load_audio_as_vllm")):
        monkeypatch.setattr(target, name, refuse)
    import dots3_demo.inspection as inspection

    for name in ("inspect_video_bytes", "inspect_image_probe", "inspect_audio_probe"):
        monkeypatch.setattr(inspection, name, refuse)


OVER_LIMIT = [
    ("huge.png", "image", DEFAULT, ("8000×8000", "64.0 megapixels", "--max-image-pixels")),
    ("photo.png", "image", replace(DEFAULT, max_image_pixels=300_000), ("640×480", "0.3 megapixels")),
    ("long.mp4", "video", DEFAULT, ("11:00", "660.0 s", "600 s", "--max-video-seconds")),
    ("wide.mp4", "video", DEFAULT, ("4096×2176", "3840×2160", "--max-video-resolution")),
    ("short.mp4", "video", replace(DEFAULT, max_video_resolution=(128, 96)), ("160×96", "128×96")),
    ("long.wav", "audio", DEFAULT, ("11:00", "--max-audio-seconds")),
    ("tone.wav", "audio", replace(DEFAULT, max_audio_seconds=0.5), ("1.5 s", "limit of 0.5 s")),
    ("photo.png", "image", replace(DEFAULT, max_file_size="1kb"), ("above this server's limit of 1kb",
                                                                   "--max-file-size")),
]


@pytest.mark.parametrize("name, kind, limits, needles", OVER_LIMIT,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(OVER_LIMIT)])
def test_over_limit_files_are_refused_before_decoding(name, kind, limits, needles, files, profile, no_decoding):
    with pytest.raises(InspectionError) as err:
        inspect_file(files[name], profile, expected=kind, limits=limits)
    message = str(err.value)
    assert "\n" not in message and "decoding started" not in message
    for needle in needles:
        assert needle in message, message


@pytest.mark.parametrize("name, kind", [("photo.png", "image"), ("short.mp4", "video"), ("tone.wav", "audio")])
def test_the_decoding_trap_works(name, kind, files, profile, no_decoding):
    """Within the limits the same call reaches the (trapped) decoders: the test above can fail."""
    with pytest.raises(AssertionError, match="decoding started"):
        inspect_file(files[name], profile, expected=kind, limits=DEFAULT)


def test_within_limits_the_report_is_unchanged(files, profile):
    for name in ("photo.png", "short.mp4", "tone.wav"):
        limited = inspect_file(files[name], profile, limits=DEFAULT)
        assert limited.to_dict() == inspect_file(files[name], profile).to_dict()


def test_the_wrong_panel_is_said_before_the_limit(files, profile):
    with pytest.raises(InspectionError, match="no video stream"):
        inspect_file(files["long.wav"], profile, expected="video", limits=DEFAULT)


def test_the_inspect_command_applies_no_upload_limits(files):
    """``python app.py inspect`` is a local tool: the web app's limits are not applied there."""
    status, lines, _ = run_cli(str(files["wide.mp4"]), "--json")
    assert status == 0, lines
    assert lines[0]["kind"] == "video" and lines[0]["video"]["frames"]


# ---------------------------------------------------------------- the UI's handlers keep the session
@pytest.fixture(scope="module")
def session(profile, files) -> StudioState:
    """A session holding a video, an image and an audio clip (all within the limits)."""
    page = Page(profile, initial_state(8192), limits=DEFAULT)
    for shown in (page.video(str(files["short.mp4"])), page.images([str(files["photo.png"])]),
                  page.audio(str(files["tone.wav"]))):
        assert shown.error is None, shown.error
    state = page.state
    assert state.video is not None and state.images and state.audio is not None
    return state


def _assert_refused_and_kept(outcome: Shown, before: StudioState, flag: str, name: str) -> None:
    assert outcome.state is before  # the whole session (reports and paths) as it was
    assert outcome.error and flag in outcome.error and name in outcome.error
    assert outcome.status.startswith("⚠") and flag in outcome.status
    assert outcome.views == {}  # every panel keeps what it shows


def test_handlers_refuse_and_keep_the_session(profile, files, session, no_decoding):
    before = session

    def page() -> Page:  # each upload on a page of its own: its status line is that panel's alone
        return Page(profile, before, limits=DEFAULT)

    _assert_refused_and_kept(page().video(str(files["long.mp4"])), before, "--max-video-seconds", "long.mp4")
    _assert_refused_and_kept(page().video(str(files["wide.mp4"])), before, "--max-video-resolution", "wide.mp4")
    _assert_refused_and_kept(page().images([str(files["huge.png"])]), before, "--max-image-pixels", "huge.png")
    for source in ("file", "microphone"):
        _assert_refused_and_kept(page().audio(str(files["long.wav"]), source), before, "--max-audio-seconds",
                                 "long.wav")


def test_each_panel_applies_the_limits_it_is_given(profile, files, session, no_decoding):
    """Limits tighter than the defaults, on files the defaults accept: every panel refuses by the limits it was
    given, not by its own defaults (a panel that dropped them would accept these)."""
    tight = UploadLimits(max_video_seconds=1, max_image_pixels=100_000,  # (durations: 0.5 s of slack)
                         max_audio_seconds=0.5)

    def page() -> Page:
        return Page(profile, session, limits=tight)

    _assert_refused_and_kept(page().video(str(files["short.mp4"])), session, "--max-video-seconds", "short.mp4")
    _assert_refused_and_kept(page().images([str(files["photo.png"])]), session, "--max-image-pixels", "photo.png")
    for source in ("file", "microphone"):
        _assert_refused_and_kept(page().audio(str(files["tone.wav"]), source), session, "--max-audio-seconds",
                                 "tone.wav")


def test_a_refused_upload_never_reaches_the_chat(profile, files, session, no_decoding):
    outcome = Page(profile, session, limits=DEFAULT).video(str(files["long.mp4"]))
    sent = {m.path for m in panel_media(outcome.state)}
    assert str(files["long.mp4"]) not in sent
    assert sent == {str(files["short.mp4"]), str(files["photo.png"]), str(files["tone.wav"])}


def test_one_refused_image_leaves_the_others(profile, files, session):
    outcome = Page(profile, session, limits=DEFAULT).images([str(files["photo.png"]), str(files["huge.png"])])
    assert [Path(p).name for p, _ in outcome.state.images] == ["photo.png"]
    assert "huge.png" in outcome.error and "--max-image-pixels" in outcome.error


# ---------------------------------------------------------------- wiring: flags → launch → handlers
def test_flags_parse_to_limits():
    import app

    assert limits_from_args(app.parse_args([])) == DEFAULT
    args = app.parse_args(["--max-file-size", "2gb", "--max-video-seconds", "90", "--max-video-resolution",
                           "1080x1920", "--max-image-pixels", "12M", "--max-audio-seconds", "30.5"])
    assert limits_from_args(args) == UploadLimits("2gb", 90.0, (1920, 1080), 12_000_000, 30.5)


@pytest.mark.parametrize("argv, needle", [
    (["--max-file-size", "5 parsecs"], "not a file size"),
    (["--max-image-pixels", "500M"], "decompression-bomb limit"),
    (["--max-video-resolution", "big"], "not a resolution"),
    (["--max-video-seconds", "0"], "must be positive"),
])
def test_bad_flags_are_usage_errors(argv, needle):
    import app

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        app.parse_args(argv)
    assert exit_.value.code == 2
    assert argv[0] in err.getvalue() and needle in err.getvalue()


def test_help_lists_the_flags():
    import app

    for argv in (["--help"], ["--help=Dots3 NOTE Studio"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            app.parse_args(argv)
        text = " ".join(out.getvalue().split())
        for flag in FLAGS.values():
            assert flag in text, (argv, text)
    assert "(default: 3840x2160)" in text and "(default: 500mb)" in text and "(default: 50M)" in text


def test_build_interface_binds_the_limits(profile, files):
    from dots3_demo.ui import build_interface
    from dots3_demo.ui.app import launch_options

    limits = replace(DEFAULT, max_video_seconds=1.0, max_file_size="64mb")
    demo = build_interface(profile, None, seq=8192, limits=limits)
    for name in ("inspect_video", "set_seq", "inspect_images", "inspect_audio", "inspect_recording",
                 "sync_max_new_tokens"):
        fn = next(f for f in demo.fns.values() if f.api_name == name)
        assert fn.fn.keywords["limits"] is limits, name
    assert launch_options(limits)["max_file_size"] == 64 * 1024**2
    video = next(f for f in demo.fns.values() if f.api_name == "inspect_video")
    state = initial_state(8192)
    [result] = video.fn(handlers.new_inspections(state), str(files["short.mp4"]), 8192, True, 0, 0, 1.0,
                        "eval_ek")  # 2 s > 1 s: refused before vLLM's call, so no frames are shown first
    assert result[0] is state and "--max-video-seconds" in result[1]


@pytest.fixture(scope="module")
def small_server(profile):
    """The live app with a 64 kB upload limit."""
    from dots3_demo.ui import launch_app

    demo = launch_app(profile, None, host="127.0.0.1", port=None, seq=8192,
                      limits=replace(DEFAULT, max_file_size="64kb"), prevent_thread_lock=True, quiet=True)
    try:
        yield demo
    finally:
        demo.close()


def _upload(url: str, name: str, data: bytes) -> tuple[int, bytes]:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(f"{url}/gradio_api/upload", data=body, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_gradio_refuses_uploads_over_the_file_size(small_server, files):
    assert small_server.max_file_size == 64 * 1024
    url = small_server.local_url.rstrip("/")
    status, body = _upload(url, "small.png", files["photo.png"].read_bytes()[:1000])
    assert status == 200, body
    status, body = _upload(url, "big.wav", files["long.wav"].read_bytes())  # 1.3 MB
    assert status == 413, (status, body)
