"""FIPS-safe SHA-1, and the silent audio drop when torchcodec cannot decode the sound track."""

from __future__ import annotations

import builtins
import hashlib
import sys

import pytest

from dots3_demo import vllm_compat
from dots3_demo.inspection import InspectionError, VideoSettings, inspect_file, report_to_json
from dots3_demo.inspection import video as video_mod
from tests.inspection.conftest import assert_video_parity

CLIP = "s320_12s_10fps_16k_mono"
_REAL_SHA1 = hashlib.sha1


def _fips_sha1(data=b"", **kwargs):
    """SHA-1 as a FIPS build provides it: refused unless ``usedforsecurity=False``."""
    if kwargs.get("usedforsecurity", True):
        raise ValueError("[digital envelope routines] unsupported: sha1 is disabled for FIPS")
    return _REAL_SHA1(data, **kwargs)


@pytest.fixture
def fips_hashlib(monkeypatch):
    monkeypatch.setattr(hashlib, "sha1", _fips_sha1)


@pytest.mark.parametrize("settings", [VideoSettings(), VideoSettings(k_mode="logk", question="why?")],
                         ids=["eval_ek", "logk"])
def test_inspection_under_fips_hashlib_is_unchanged(settings, clip_factory, profile, inspected, monkeypatch):
    path = clip_factory(CLIP)
    baseline = inspected(path, settings)  # computed (or cached) with the normal hashlib
    monkeypatch.setattr(hashlib, "sha1", _fips_sha1)
    with pytest.raises(ValueError):
        hashlib.sha1(b"x")  # the patch is really in force
    report = inspect_file(path, profile, settings)
    assert report.audio_segments, "audio must be interleaved for vLLM to hash the bytes"
    assert report_to_json(path, report) == report_to_json(path, baseline)


def test_vllm_unshimmed_would_fail_under_fips(clip_factory, profile, monkeypatch, fips_hashlib):
    """Control: vLLM's video module with the plain hashlib raises — so the test above can fail."""
    v = vllm_compat.video_module()
    monkeypatch.setattr(v, "hashlib", hashlib)
    with pytest.raises(ValueError, match="FIPS"):
        v.preprocess_dots3_note_video(clip_factory(CLIP).read_bytes(), tokenizer=profile.tokenizer,
                                      question="", seq=32768, k_mode="logk")


def test_shim_digest_is_bit_identical():
    v = vllm_compat.video_module()
    assert v.hashlib.sha1(b"dots3").hexdigest() == _REAL_SHA1(b"dots3").hexdigest()
    assert v.hashlib.md5 is hashlib.md5


# ------------------------------------------------------------------ torchcodec


class _BrokenAudioDecoder:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("Could not load libtorchcodec. libavutil.so.58: cannot open shared object file")


def test_undecodable_sound_track_marks_report_incomplete(clip_factory, profile, monkeypatch, vllm_video):
    import torchcodec.decoders

    path = clip_factory(CLIP)
    assert inspect_file(path, profile).complete  # control: the same clip is complete normally
    monkeypatch.setattr(torchcodec.decoders, "AudioDecoder", _BrokenAudioDecoder)
    report = inspect_file(path, profile)
    assert report.complete is False
    assert "could not be decoded" in report.audio.reason
    assert report.audio.in_file and not report.audio.decoded and not report.audio.kept
    assert any(n.startswith("INCOMPLETE") for n in report.notes), report.notes
    assert report_to_json(path, report)["video"]["complete"] is False
    # and it is exactly what vLLM does under the same failure: frames only, no audio
    ref = profile.processor._process_video(
        path.read_bytes(), detail="auto", size_overrides={}, seq=32768, output_reserve=None,
        audio_cap=1.0, audio_sample_rate=16000, k_mode="eval_ek", max_new_tokens=0, question="",
    )
    assert len(ref["video_audio_lengths"]) == 0
    assert_video_parity(report, ref, profile)


def test_silent_clip_is_complete_even_if_audio_decoder_broken(clip_factory, profile, monkeypatch):
    import torchcodec.decoders

    monkeypatch.setattr(torchcodec.decoders, "AudioDecoder", _BrokenAudioDecoder)
    report = inspect_file(clip_factory("s320_2s_10fps_silent"), profile)
    assert report.complete and not any("INCOMPLETE" in n for n in report.notes)


@pytest.fixture
def torchcodec_unimportable(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("torchcodec"):
            raise OSError("libavutil.so.58: cannot open shared object file: No such file or directory\n"
                          "[start of libtorchcodec loading traceback]")
        return real_import(name, *args, **kwargs)

    for key in [k for k in sys.modules if k.startswith("torchcodec")]:
        monkeypatch.delitem(sys.modules, key)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    video_mod.torchcodec_problem.cache_clear()
    yield
    video_mod.torchcodec_problem.cache_clear()


def test_torchcodec_problem_message(torchcodec_unimportable):
    message = video_mod.torchcodec_problem()
    assert message is not None
    assert "\n" not in message and "Traceback" not in message
    assert "FFmpeg" in message and "libavutil.so.58" in message and "apt-get install ffmpeg" in message


def test_video_inspection_refuses_clearly_without_torchcodec(clip_factory, profile, torchcodec_unimportable):
    with pytest.raises(InspectionError, match="cannot load FFmpeg's libraries"):
        inspect_file(clip_factory(CLIP), profile)


def test_torchcodec_problem_none_when_available():
    video_mod.torchcodec_problem.cache_clear()
    assert video_mod.torchcodec_problem() is None


# ------------------------------------------------------------------ the advice names what is missing (issue 18 §8)
@pytest.fixture
def torchcodec_absent(monkeypatch):
    """torchcodec not installed (FFmpeg is: the start-up check has nothing to check without torchcodec)."""
    import importlib.util

    from dots3_demo import ffmpeg

    real_find_spec, real_import = importlib.util.find_spec, builtins.__import__

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] == "torchcodec" else real_find_spec(name, *args, **kwargs)

    def fake_import(name, *args, **kwargs):
        if name.split(".")[0] == "torchcodec":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    for key in [k for k in sys.modules if k.startswith("torchcodec")]:
        monkeypatch.delitem(sys.modules, key)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr(ffmpeg, "_status", None)  # checked again, as a process without torchcodec would
    video_mod.torchcodec_problem.cache_clear()
    yield
    video_mod.torchcodec_problem.cache_clear()


def test_without_torchcodec_the_advice_is_to_install_torchcodec(torchcodec_absent):
    message = video_mod.torchcodec_problem()
    assert message is not None and "torchcodec" in message and "is not installed" in message
    assert "pip install 'torchcodec" in message
    assert "apt-get install ffmpeg" not in message and "FFmpeg's libraries" not in message, message


def test_a_video_upload_without_torchcodec_says_torchcodec_is_missing(clip_factory, profile, torchcodec_absent):
    with pytest.raises(InspectionError, match="torchcodec\\) is not installed") as raised:
        inspect_file(clip_factory(CLIP), profile)
    assert "apt-get install ffmpeg" not in str(raised.value)


def test_torchcodec_that_cannot_load_for_another_reason_is_reinstalled_not_ffmpeg(monkeypatch):
    """A torchcodec built for another torch (PyPI's CUDA-linked wheel on a CPU torch): FFmpeg is not the cause."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("torchcodec"):
            raise OSError("libtorch_cuda.so: cannot open shared object file: No such file or directory")
        return real_import(name, *args, **kwargs)

    for key in [k for k in sys.modules if k.startswith("torchcodec")]:
        monkeypatch.delitem(sys.modules, key)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    video_mod.torchcodec_problem.cache_clear()
    try:
        message = video_mod.torchcodec_problem()
    finally:
        video_mod.torchcodec_problem.cache_clear()
    assert message is not None and "libtorch_cuda.so" in message and "Reinstall torchcodec" in message
    assert "apt-get install ffmpeg" not in message


@pytest.mark.real_engine
def test_in_a_real_environment_without_torchcodec_the_advice_is_torchcodec(cpu_python):
    """The real-engine tier's venv has FFmpeg (the system's) and no torchcodec (scripts/cpu_engine_env.sh removes
    PyPI's CUDA-linked build): what a video upload says there."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import importlib.util; assert importlib.util.find_spec('torchcodec') is None; "
            "from dots3_demo.inspection.video import torchcodec_problem; print(torchcodec_problem())")
    done = subprocess.run([cpu_python, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout.strip().splitlines()[-1]
    assert "torchcodec) is not installed" in said and "apt-get install ffmpeg" not in said, said
