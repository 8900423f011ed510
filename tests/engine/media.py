"""The engine tests' media, made by the shared ``support.media_factory`` (tests only)."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from support import media_factory


def make_clip(path: Path, *, seconds: int = 4, width: int = 320, height: int = 240, fps: int = 8,
              audio: bool = True) -> Path:
    """H.264 clip with an optional 16 kHz 440 Hz AAC tone."""
    return media_factory.make_video(
        path, seconds=seconds, width=width, height=height, fps=fps, audio_rate=16000 if audio else None
    )


def make_wav(path: Path, *, seconds: float = 3.0, rate: int = 16000) -> Path:
    return media_factory.make_audio(path, seconds=seconds, rate=rate)


def make_png(path: Path, *, width: int = 640, height: int = 480) -> Path:
    return media_factory.make_image(path, width=width, height=height)


def png_bytes(width: int = 64, height: int = 48) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()
