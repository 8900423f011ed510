"""Small test media written with PyAV / PIL (tests only)."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np


def make_clip(path: Path, *, seconds: int = 4, width: int = 320, height: int = 240, fps: int = 8,
              audio: bool = True) -> Path:
    """H.264 clip (changing gray levels) with an optional 440 Hz AAC tone."""
    import av

    with av.open(str(path), mode="w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        sound = None
        if audio:
            sound = container.add_stream("aac", rate=16000)
            sound.layout = "mono"
        for i in range(seconds * fps):
            frame = np.full((height, width, 3), (i * 7) % 255, np.uint8)
            frame[: height // 4, : (i + 1) * width // (seconds * fps)] = 255
            for packet in video.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        if sound is not None:
            rate = 16000
            t = np.arange(seconds * rate) / rate
            tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
            for start in range(0, len(tone), 1024):
                chunk = av.AudioFrame.from_ndarray(tone[None, start : start + 1024], format="fltp", layout="mono")
                chunk.sample_rate, chunk.pts = rate, start
                for packet in sound.encode(chunk):
                    container.mux(packet)
            for packet in sound.encode():
                container.mux(packet)
    return path


def make_wav(path: Path, *, seconds: float = 3.0, rate: int = 16000) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path


def make_png(path: Path, *, width: int = 640, height: int = 480) -> Path:
    from PIL import Image

    gradient = np.tile(np.linspace(0, 255, width, dtype=np.uint8), (height, 1))
    Image.fromarray(np.stack([gradient] * 3, axis=-1)).save(path)
    return path


def png_bytes(width: int = 64, height: int = 48) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()
