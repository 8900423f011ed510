"""``python app.py inspect FILE... --json``: field names, --model, and the budget flags."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from dots3_demo.inspection import VideoSettings
from dots3_demo.profiles import PREVIEW_PROFILE_DIR
from support import media_factory
from tests.inspection.conftest import run_cli

TS = re.compile(r"^\d\d:\d\d:\d\d\.\d\d$")
CLIP = "s320_12s_10fps_16k_mono"


@pytest.fixture(scope="session")
def trio(media_dir, clip_factory) -> dict[str, Path]:
    return {
        "image": media_factory.make_image(media_dir / "cli_image.png", width=500, height=300),
        "audio": media_factory.make_audio(media_dir / "cli_audio.flac", seconds=2.5, rate=22050, channels=2),
        "video": clip_factory(CLIP),
    }


def _check_contract(item: dict, kind: str) -> None:
    assert item["kind"] == kind and "file" in item and "error" not in item
    data = item[kind]
    if kind == "image":
        assert isinstance(data["grid"], list) and len(data["grid"]) == 3
        assert data["tokens"] == math.prod(data["grid"]) // 4
    elif kind == "audio":
        assert isinstance(data["samples"], int) and isinstance(data["tokens"], int)
        assert data["tokens"] == math.ceil(data["samples"] / data["token_stride"])
    else:
        for frame in data["frames"]:
            assert TS.match(frame["timestamp"]), frame["timestamp"]
            assert len(frame["grid"]) == 3 and frame["tokens"] == math.prod(frame["grid"]) // 4
        for seg in data["audio_segments"]:
            assert isinstance(seg["samples"], int) and seg["tokens"] == math.ceil(seg["samples"] / 1280)
        assert set(data["order"]) <= {"frame", "audio"}
        assert data["order"].count("frame") == len(data["frames"])
        assert data["order"].count("audio") == len(data["audio_segments"])
        assert data["image_pad_tokens"] == sum(f["tokens"] for f in data["frames"])
        assert data["audio_pad_tokens"] == sum(s["tokens"] for s in data["audio_segments"])
        assert data["prompt_tokens"] > data["image_pad_tokens"] + data["audio_pad_tokens"]
        assert isinstance(data["complete"], bool)


def test_json_fields(trio, profile, vllm_video):
    status, lines, raw = run_cli(str(trio["image"]), str(trio["audio"]), str(trio["video"]), "--json")
    assert status == 0, raw
    assert len(lines) == 3 == len(raw.strip().splitlines())
    for item, kind in zip(lines, ("image", "audio", "video"), strict=True):
        _check_contract(item, kind)
        assert item["profile"] == "preview (bundled)" and item["approximate"]
    ref = vllm_video(trio["video"])
    assert [f["grid"] for f in lines[2]["video"]["frames"]] == ref["video_image_grid_thw"].tolist()
    assert lines[2]["video"]["prompt_tokens"] == int(ref["video_prompt_lengths"][0])


def test_model_dir_config_only_copy(trio, tmp_path):
    folder = tmp_path / "my model"
    shutil.copytree(PREVIEW_PROFILE_DIR, folder)
    files = [str(trio["image"]), str(trio["video"])]
    status_a, preview, _ = run_cli(*files, "--json")
    status_b, copied, raw = run_cli(*files, "--json", "--model", str(folder))
    assert status_a == status_b == 0, raw
    for a, b in zip(preview, copied, strict=True):
        assert b["profile"] == str(folder.resolve())
        assert "approximate" not in b
        assert a[a["kind"]] == b[b["kind"]]


@pytest.mark.parametrize("make_bad, cause", [
    (lambda p: p / "missing", "not a directory"),
    (lambda p: p, "no config.json"),
    (lambda p: (p / "config.json").write_text("{not json") and p, "not valid JSON"),
], ids=["missing", "empty-dir", "bad-json"])
def test_bad_model_dir(make_bad, cause, trio, tmp_path):
    folder = make_bad(tmp_path)
    status, lines, raw = run_cli(str(trio["image"]), "--json", "--model", str(folder))
    assert status == 2
    assert len(lines) == 1 and cause in lines[0]["error"], raw
    assert "Traceback" not in raw


@pytest.mark.parametrize("flags, settings", [
    (["--seq", "4096"], VideoSettings(seq=4096)),
    (["--seq", "8192", "--max-new-tokens", "5200"], VideoSettings(seq=8192, max_new_tokens=5200)),
    (["--audio-cap", "0.001"], VideoSettings(audio_cap=0.001)),
    (["--audio-cap", "0"], VideoSettings(audio_cap=0.0)),
    (["--k-mode", "whole"], VideoSettings(k_mode="whole")),
    (["--k-mode", "logk", "--question", "what?"], VideoSettings(k_mode="logk", question="what?")),
    (["--seq", "16384", "--output-reserve", "1000"], VideoSettings(seq=16384, output_reserve=1000)),
], ids=["seq", "max-new-tokens", "audio-cap-small", "audio-cap-0", "whole", "logk", "reserve"])
def test_budget_flags_follow_vllm(flags, settings, trio, vllm_video):
    status, lines, raw = run_cli(str(trio["video"]), "--json", *flags)
    assert status == 0, raw
    data = lines[0]["video"]
    ref = vllm_video(trio["video"], settings)
    assert [f["grid"] for f in data["frames"]] == ref["video_image_grid_thw"].tolist()
    assert [s["samples"] for s in data["audio_segments"]] == ref["video_audio_lengths"].tolist()
    assert [0 if o == "frame" else 1 for o in data["order"]] == ref["video_modalities"].tolist()
    assert data["prompt_tokens"] == int(ref["video_prompt_lengths"][0])
    assert data["budget"]["output_reserve"] == settings.effective_reserve


def test_flags_change_the_result(trio, clip_factory):
    outs = {}
    for key, flags in {"default": [], "seq": ["--seq", "4096"], "cap": ["--audio-cap", "0"],
                       "whole": ["--k-mode", "whole"]}.items():
        status, lines, _ = run_cli(str(trio["video"]), "--json", *flags)
        assert status == 0
        outs[key] = lines[0]["video"]
    hd = clip_factory("s1280_2s_25fps_44k_stereo")
    small = run_cli(str(hd), "--json", "--seq", "4096")[1][0]["video"]
    large = run_cli(str(hd), "--json", "--seq", "131072")[1][0]["video"]
    assert small["prompt_tokens"] < large["prompt_tokens"]
    assert outs["seq"]["solver"]["seq_length"] == 3072
    assert outs["cap"]["audio_segments"] == [] and outs["default"]["audio_segments"]
    assert outs["whole"]["order"] != outs["default"]["order"]


def test_invalid_settings_exit_2(trio):
    status, lines, raw = run_cli(str(trio["video"]), "--json", "--seq", "1000", "--max-new-tokens", "1000")
    assert status == 2 and len(lines) == 1 and "leaves no room" in lines[0]["error"], raw


def test_subprocess_app_py(app_py_run):
    """The real entry point: one JSON object per line, exit 2 when any file failed, no traceback."""
    proc, files = app_py_run
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr[-2000:]
    assert "Traceback" not in stdout + stderr
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert [Path(x["file"]).name for x in lines] == ["cli_image.png", "cli_empty.mp4", "cli_audio.flac"]
    _check_contract(lines[0], "image")
    assert "empty (0 bytes)" in lines[1]["error"] and "kind" not in lines[1]
    _check_contract(lines[2], "audio")
