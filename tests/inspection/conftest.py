"""Inspector test fixtures: synthetic media (session-scoped) and vLLM reference calls.

The reference for every number is vLLM's own ``Dots3NoteProcessor`` run on the same bytes
and profile; nothing of vLLM's logic is re-implemented here.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dots3_demo import vllm_compat
from dots3_demo.inspection import VideoSettings, inspect_file
from support import media_factory

TIMESTAMP_RE = re.compile(r"<(\d\d:\d\d:\d\d\.\d\d)>")


@dataclass(frozen=True)
class ClipSpec:
    name: str
    seconds: float
    width: int
    height: int
    fps: int
    audio_rate: int | None
    channels: int = 1


# Sizes 320x240 / 640x360 / 1280x720, 2-12 s, 10/25/30 fps, mono/stereo, 16/22.05/44.1/48 kHz.
CLIPS = {
    c.name: c
    for c in [
        ClipSpec("s320_2s_10fps_silent", 2, 320, 240, 10, None),
        ClipSpec("s320_12s_10fps_16k_mono", 12, 320, 240, 10, 16000, 1),
        ClipSpec("s640_6s_25fps_22k_stereo", 6, 640, 360, 25, 22050, 2),
        ClipSpec("s640_3s_30fps_48k_mono", 3, 640, 360, 30, 48000, 1),
        ClipSpec("s1280_2s_25fps_44k_stereo", 2, 1280, 720, 25, 44100, 2),
        ClipSpec("s320_5s_30fps_48k_stereo", 5, 320, 240, 30, 48000, 2),
    ]
}


@pytest.fixture(scope="session")
def clip_factory(media_dir: Path):
    """``clip_factory(name)`` → path of the synthetic clip ``CLIPS[name]`` (made once)."""
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            c = CLIPS[name]
            made[name] = media_factory.make_video(
                media_dir / f"{name}.mp4", seconds=c.seconds, width=c.width, height=c.height,
                fps=c.fps, audio_rate=c.audio_rate, audio_channels=c.channels,
            )
        return made[name]

    return make


def settings_key(settings: VideoSettings) -> tuple:
    return (settings.seq, settings.output_reserve, settings.max_new_tokens, settings.audio_cap,
            settings.k_mode, settings.question)


@pytest.fixture(scope="session")
def vllm_video(profile):
    """``vllm_video(path, settings)`` → vLLM's ``Dots3NoteProcessor._process_video`` output."""
    cache: dict[tuple, dict] = {}

    def run(path: Path, settings: VideoSettings = VideoSettings()) -> dict:
        key = (str(path), settings_key(settings))
        if key not in cache:
            cache[key] = profile.processor._process_video(
                Path(path).read_bytes(), detail="auto", size_overrides={}, seq=settings.seq,
                output_reserve=settings.output_reserve, audio_cap=settings.audio_cap,
                audio_sample_rate=16000, k_mode=settings.k_mode,
                max_new_tokens=settings.max_new_tokens, question=settings.question,
            )
        return cache[key]

    return run


@pytest.fixture(scope="session")
def inspected(profile):
    """``inspected(path, settings)`` → the inspector's report (cached per session)."""
    cache: dict[tuple, Any] = {}

    def run(path: Path, settings: VideoSettings = VideoSettings()):
        key = (str(path), settings_key(settings))
        if key not in cache:
            cache[key] = inspect_file(path, profile, settings)
        return cache[key]

    return run


def assert_video_parity(report, ref: dict, profile) -> None:
    """Every number the video report shows equals vLLM's processor output."""
    pm = vllm_compat.processor_module()
    tok = profile.tokenizer
    vocab = tok.get_vocab()
    merge = profile.image_processor.merge_size
    stride = profile.processor.audio_token_stride
    ref_grids = ref["video_image_grid_thw"].tolist()
    ids = ref["video_input_ids"].tolist()

    assert [f.grid for f in report.frames] == ref_grids
    assert len(report.frames) == int(ref["video_frame_counts"][0])
    assert [f.tokens for f in report.frames] == [math.prod(g) // merge**2 for g in ref_grids]
    assert [s.samples for s in report.audio_segments] == ref["video_audio_lengths"].tolist()
    assert [s.tokens for s in report.audio_segments] == [
        math.ceil(n / stride) for n in ref["video_audio_lengths"].tolist()
    ]
    assert [0 if o == "frame" else 1 for o in report.order] == ref["video_modalities"].tolist()
    assert report.prompt_tokens == int(ref["video_prompt_lengths"][0]) == len(ids)
    assert report.image_pad_tokens == ids.count(vocab[pm.IMAGE_PAD])
    assert report.audio_pad_tokens == ids.count(vocab[pm.AUDIO_PAD])
    assert report.image_pad_tokens + report.audio_pad_tokens == int(ref["video_embed_mask"].sum())
    # the "HH:MM:SS.cc" timestamps are the exact text vLLM puts before each frame
    text = tok.decode(ids)
    assert [f.timestamp for f in report.frames] == TIMESTAMP_RE.findall(text)
    # groups cover the frames in order, one audio segment closing each group that has one
    assert [i for g in report.groups for i in g.frames] == list(range(len(report.frames)))
    assert [g.audio for g in report.groups if g.audio is not None] == list(range(len(report.audio_segments)))
    # the report's audio decision agrees with what vLLM actually produced
    assert report.audio.kept == (len(ref["video_audio_lengths"]) > 0)
    assert report.audio.reason.startswith("kept") == report.audio.kept
    # the explanation agrees with vLLM's frames (or the report would carry a mismatch note)
    assert not any("mismatch" in n for n in report.notes), report.notes
    assert report.solver.target_size == report.frames[0].decoded_size
    assert report.solver.planned_frames >= len(report.frames)
    assert report.text_tokens == report.prompt_tokens - report.image_pad_tokens - report.audio_pad_tokens


# ---------------------------------------------------------------- CLI helpers

def cli_args(*argv: str) -> argparse.Namespace:
    from dots3_demo.cli.inspect import add_inspect_arguments

    parser = argparse.ArgumentParser()
    add_inspect_arguments(parser)
    return parser.parse_args(list(argv))


def run_cli(*argv: str) -> tuple[int, list[dict], str]:
    """Run ``inspect`` in-process; returns (exit status, parsed JSON lines, raw output)."""
    from dots3_demo.cli.inspect import run_inspect

    out = io.StringIO()
    status = run_inspect(cli_args(*argv), out=out)
    raw = out.getvalue()
    lines = [json.loads(line) for line in raw.splitlines() if line.strip()] if "--json" in argv else []
    return status, lines, raw


# ---------------------------------------------------------------- app.py in a subprocess

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def app_py_run(tmp_path_factory: pytest.TempPathFactory):
    """Start ``python app.py inspect … --json`` at session start so its ~30 s of vLLM imports
    overlap the in-process tests; ``test_subprocess_app_py`` collects the result."""
    folder = tmp_path_factory.mktemp("app_py")
    files = [
        media_factory.make_image(folder / "cli_image.png", width=500, height=300),
        folder / "cli_empty.mp4",
        media_factory.make_audio(folder / "cli_audio.flac", seconds=2.5, rate=22050, channels=2),
    ]
    files[1].write_bytes(b"")
    proc = subprocess.Popen(
        [sys.executable, "app.py", "inspect", *map(str, files), "--json"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    yield proc, files
    if proc.poll() is None:
        proc.kill()
        proc.communicate()
