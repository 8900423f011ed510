"""Fixtures for the UI tests: a few bad files next to the shared media, and vLLM's video decoding counted."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dots3_demo import vllm_compat
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


@pytest.fixture
def decodes(monkeypatch):
    """vLLM's video preprocessing, counted: each call's file size, and the most that ran at once; ``threads`` names
    the thread each call ran on (``decodes.threads``)."""
    module = vllm_compat.video_module()
    real = module.preprocess_dots3_note_video
    calls, running, lock = Decodes(), [0, 0], threading.Lock()  # running: now, at most

    def counted(data, **kwargs):
        with lock:
            calls.append(len(data))
            calls.threads.append(threading.current_thread().name)
            running[0] += 1
            running[1] = max(running)
        try:
            return real(data, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(module, "preprocess_dots3_note_video", counted)
    return calls, running


class Decodes(list):
    """The sizes of the files vLLM decoded, in order; ``threads``: the thread each ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []
