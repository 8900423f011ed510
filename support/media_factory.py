"""Synthetic media made with PyAV / PIL / numpy for tests and benchmarks (no downloads)."""

from __future__ import annotations

import struct
import zlib
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image


def make_video(
    path: Path,
    *,
    seconds: float = 4.0,
    width: int = 320,
    height: int = 240,
    fps: int = 10,
    audio_rate: int | None = 44100,
    audio_channels: int = 1,
    tone_hz: float = 440.0,
    container: str = "mp4",
    gop: int | None = None,
) -> Path:
    """Write an H.264 clip (moving gradient + frame counter bar) with an optional AAC tone."""
    path = Path(path)
    with av.open(str(path), mode="w", format=container) as out:
        vstream = out.add_stream("libx264", rate=fps)
        vstream.width, vstream.height = width, height
        vstream.pix_fmt = "yuv420p"
        vstream.options = {"preset": "ultrafast", "tune": "zerolatency"}
        if gop:
            vstream.codec_context.gop_size = gop
        astream = None
        if audio_rate:
            astream = out.add_stream("aac", rate=audio_rate)
            astream.layout = "mono" if audio_channels == 1 else "stereo"
        n_frames = int(round(seconds * fps))
        xs = np.linspace(0, 255, width, dtype=np.float32)[None, :]
        ys = np.linspace(0, 255, height, dtype=np.float32)[:, None]
        for i in range(n_frames):
            shift = (i * 255 // max(1, n_frames)) % 256
            frame = np.empty((height, width, 3), dtype=np.uint8)
            frame[..., 0] = ((xs + shift) % 256).astype(np.uint8)
            frame[..., 1] = ((ys + 2 * shift) % 256).astype(np.uint8)
            frame[..., 2] = 128
            bar = max(1, width * (i + 1) // n_frames)
            frame[: max(2, height // 10), :bar] = 255
            vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
            for packet in vstream.encode(vf):
                out.mux(packet)
        for packet in vstream.encode():
            out.mux(packet)
        if astream is not None:
            total = int(seconds * audio_rate)
            t = np.arange(total) / audio_rate
            tone = (0.3 * np.sin(2 * np.pi * tone_hz * t)).astype(np.float32)
            chunk = 1024
            for start in range(0, total, chunk):
                block = tone[start : start + chunk]
                data = np.tile(block, (audio_channels, 1)) if audio_channels > 1 else block[None, :]
                layout = "mono" if audio_channels == 1 else "stereo"
                af = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format="fltp", layout=layout)
                af.sample_rate = audio_rate
                af.pts = start
                af.time_base = Fraction(1, audio_rate)
                for packet in astream.encode(af):
                    out.mux(packet)
            for packet in astream.encode():
                out.mux(packet)
    return path


def make_audio(
    path: Path, *, seconds: float = 2.0, rate: int = 16000, channels: int = 1, tone_hz: float = 440.0
) -> Path:
    """Write a WAV (or any PyAV container by suffix) with a sine tone."""
    path = Path(path)
    fmt = {".wav": "wav", ".flac": "flac", ".mp3": "mp3", ".ogg": "ogg", ".m4a": "mp4"}[path.suffix]
    codec = {"wav": "pcm_s16le", "flac": "flac", "mp3": "libmp3lame", "ogg": "libvorbis", "mp4": "aac"}[fmt]
    total = int(round(seconds * rate))
    t = np.arange(total) / rate
    tone = (0.3 * np.sin(2 * np.pi * tone_hz * t)).astype(np.float32)
    layout = "mono" if channels == 1 else "stereo"
    with av.open(str(path), mode="w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = layout
        formats = stream.codec_context.codec.audio_formats
        sample_fmt = formats[0].name if formats else "s16"
        for start in range(0, total, 1024):
            block = tone[start : start + 1024]
            data = np.tile(block, (channels, 1))
            af = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format="fltp", layout=layout)
            af.sample_rate = rate
            af.pts = start
            af.time_base = Fraction(1, rate)
            if sample_fmt != "fltp":
                af = av.AudioResampler(format=sample_fmt, layout=layout, rate=rate).resample(af)
            else:
                af = [af]
            for frame in af:
                for packet in stream.encode(frame):
                    out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def make_image(path: Path, *, width: int = 640, height: int = 480, mode: str = "RGB") -> Path:
    """Write a gradient image in ``mode`` (RGB, RGBA, P, CMYK, I;16, L …)."""
    path = Path(path)
    xs = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    ys = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    rgb = np.stack(
        [np.broadcast_to(xs, (height, width)), np.broadcast_to(ys, (height, width)),
         np.full((height, width), 100, np.float32)], axis=-1
    ).astype(np.uint8)
    image = Image.fromarray(rgb, "RGB")
    if mode == "I;16":
        image = Image.fromarray((rgb[..., 0].astype(np.uint16) * 257), "I;16")
    elif mode != "RGB":
        image = image.convert(mode)
    image.save(path)
    return path


def png_claiming(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims ``width``×``height`` (a decompression bomb's header)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16))
            + chunk(b"IEND", b""))
