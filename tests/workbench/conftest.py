"""Workbench fixtures: small generated media (a video with sound, an image, an audio clip) and their reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from dots3_demo.inspection import inspect_file
from dots3_demo.inspection.video import VideoSettings
from support import media_factory

SETTINGS = VideoSettings(seq=8192)


@pytest.fixture(scope="session")
def workbench_media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"video": 3 s 320×240 H.264 with an AAC tone, "image": 320×200 PNG, "audio": 1.5 s WAV}."""
    folder = tmp_path_factory.mktemp("workbench-media")
    return {
        "video": media_factory.make_video(folder / "clip with sound.mp4", seconds=3, width=320, height=240, fps=10),
        "image": media_factory.make_image(folder / "picture.png", width=320, height=200),
        "audio": media_factory.make_audio(folder / "tone.wav", seconds=1.5),
    }


@pytest.fixture(scope="session")
def workbench_reports(workbench_media, profile):
    """The inspector's report for each of ``workbench_media`` (the video planned with ``SETTINGS``)."""
    return {kind: inspect_file(path, profile, SETTINGS) for kind, path in workbench_media.items()}
