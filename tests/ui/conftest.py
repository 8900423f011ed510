"""Fixtures for the UI tests: a few bad files next to the shared media."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import media_factory


@pytest.fixture(scope="session")
def text_as_video(media_dir: Path) -> Path:
    """A text file named like a video."""
    path = media_dir / "notes.mp4"
    path.write_text("this is not a video, just some text\n" * 20)
    return path


@pytest.fixture(scope="session")
def empty_video(media_dir: Path) -> Path:
    path = media_dir / "empty.mp4"
    path.write_bytes(b"")
    return path


@pytest.fixture(scope="session")
def photo(media_dir: Path) -> Path:
    return media_factory.make_image(media_dir / "photo.png")


@pytest.fixture(scope="session")
def tone(media_dir: Path) -> Path:
    return media_factory.make_audio(media_dir / "tone.wav", seconds=3.0)


@pytest.fixture(scope="session")
def long_tone(media_dir: Path) -> Path:
    """Longer than one 30 s encoder chunk."""
    return media_factory.make_audio(media_dir / "long_tone.wav", seconds=31.0)
