"""Identify an upload by its content and check it before vLLM sees it.

vLLM's own errors on bad files are unhelpful (a zero-byte mp4 raises ``KeyError: 'b'``), so we
look first — with PIL for images and FFmpeg (PyAV) for audio and video — and say in one line
what is wrong. Nothing here decides what the model sees; that is vLLM's code in the other
modules.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from PIL import Image

from dots3_demo import ffmpeg
from dots3_demo.inspection.errors import InspectionError

Kind = Literal["image", "audio", "video"]

AUDIO_SUFFIXES = {".wav", ".mp3", ".flac", ".ogg", ".opus", ".m4a", ".aac", ".wma", ".webm"}
VIDEO_SUFFIXES = {".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v", ".mpg", ".mpeg", ".ts"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp"}

DEFAULT_MAX_IMAGE_PIXELS = 178_956_970  # PIL's own hard limit (2 x MAX_IMAGE_PIXELS)

# Formats PIL can identify but not decode: an MPEG-1 video elementary stream is "MPEG" to PIL.
# Leave those to FFmpeg instead of calling them images.
_PIL_IDENTIFY_ONLY = {"MPEG"}


@dataclass
class MediaProbe:
    """What a file is, as far as FFmpeg or PIL can tell without decoding it all."""

    path: Path
    kind: Kind
    size_bytes: int
    format_name: str
    notes: list[str] = field(default_factory=list)
    # image
    width: int = 0
    height: int = 0
    mode: str = ""
    n_frames: int = 1
    # audio / video
    duration: float = 0.0
    fps: float = 0.0
    video_codec: str = ""
    audio_codec: str = ""
    has_audio: bool = False
    audio_sample_rate: int = 0
    audio_channels: int = 0


def _looks_like_text(head: bytes) -> bool:
    if not head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(b >= 9 for b in head[:512])


def _open_header(handle: BinaryIO, name: str) -> Image.Image | None:
    """The image in ``handle`` opened lazily by PIL's own format plugin, tried in the order
    ``Image.open`` tries them, but without ``Image.open``'s decompression-bomb check.

    That check compares the picture with the process-wide ``Image.MAX_IMAGE_PIXELS`` (a warning
    above 89 M pixels, an error above 179 M) and would hide the size this module reports against its
    own limit. This module used to lift that global for the length of a call; with inspections
    running side by side one call could then restore another's lifted value, leaving every later
    ``Image.open`` in the process — vLLM's image loader's, Gradio's — with no limit at all. Here
    nothing process-wide is changed: no global, no warning filter.
    """
    prefix = handle.read(16)
    Image.preinit()  # what Image.open tries first (BMP, GIF, JPEG, PPM, PNG) …
    tried: set[str] = set()
    for load in (None, Image.init):  # … then every other registered format
        if load is not None:
            load()
        for fmt in [f for f in Image.ID if f not in tried]:
            tried.add(fmt)
            factory, accept = Image.OPEN[fmt]
            verdict = accept(prefix) if accept else True
            if not verdict or isinstance(verdict, str):
                continue
            handle.seek(0)
            try:
                return factory(handle, name)
            except (SyntaxError, IndexError, TypeError, struct.error):  # what Image.open skips too
                continue
    return None


def _probe_image(path: Path, size: int, max_image_pixels: int) -> MediaProbe | None:
    try:
        with path.open("rb") as handle:
            image = _open_header(handle, str(path))
            if image is None or image.format in _PIL_IDENTIFY_ONLY:
                return None
            probe = MediaProbe(
                path=path,
                kind="image",
                size_bytes=size,
                format_name=image.format or "image",
                width=image.width,
                height=image.height,
                mode=image.mode,
                n_frames=int(getattr(image, "n_frames", 1) or 1),
            )
    except (OSError, SyntaxError, ValueError, Image.UnidentifiedImageError):
        return None
    pixels = probe.width * probe.height
    if max_image_pixels and pixels > max_image_pixels:
        raise InspectionError(
            f"image is {probe.width}×{probe.height} = {pixels / 1e6:.0f} megapixels, above the "
            f"limit of {max_image_pixels / 1e6:.0f} megapixels"
        )
    return probe


def _probe_av(path: Path, size: int) -> MediaProbe:
    if ffmpeg.pyav_problem():  # PyAV without FFmpeg: the libraries, never the file
        raise InspectionError(ffmpeg.media_problem())
    import av

    try:
        container = av.open(str(path))
    except av.error.InvalidDataError as exc:
        raise InspectionError(
            f"FFmpeg cannot read this file as audio or video ({exc.strerror or 'invalid data'}); "
            "it may be corrupt, truncated or not a media file"
        ) from exc
    except av.error.FFmpegError as exc:
        raise InspectionError(f"FFmpeg cannot open this file: {exc.strerror or exc}") from exc
    with container:
        videos = [
            s for s in container.streams.video
            if not (s.disposition & av.stream.Disposition.attached_pic)
        ]
        audios = list(container.streams.audio)
        fmt = container.format.name
        duration = float(container.duration / av.time_base) if container.duration else 0.0
        if not videos and not audios:
            raise InspectionError(
                f"the {fmt} container holds no audio or video stream"
            )
        probe = MediaProbe(
            path=path,
            kind="video" if videos else "audio",
            size_bytes=size,
            format_name=fmt,
            duration=duration,
        )
        if audios:
            a = audios[0]
            probe.has_audio = True
            probe.audio_codec = a.codec_context.name if a.codec_context else ""
            probe.audio_sample_rate = int(a.codec_context.sample_rate or 0)
            probe.audio_channels = int(a.codec_context.channels or 0)
            if a.duration and a.time_base:
                probe.duration = max(probe.duration, float(a.duration * a.time_base))
        if videos:
            v = videos[0]
            probe.video_codec = v.codec_context.name if v.codec_context else ""
            probe.width = int(v.codec_context.width or 0)
            probe.height = int(v.codec_context.height or 0)
            probe.fps = float(v.average_rate or v.guessed_rate or 0)
            if v.duration and v.time_base:
                probe.duration = max(probe.duration, float(v.duration * v.time_base))
            if probe.width <= 0 or probe.height <= 0:
                raise InspectionError("the video stream has no picture size; the file is corrupt")
    if probe.duration <= 0:
        raise InspectionError(f"the {probe.kind} has zero length")
    return probe


def probe_file(
    path: str | Path,
    *,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
) -> MediaProbe:
    """Identify ``path`` by content; raise ``InspectionError`` with a clear reason if unusable."""
    path = Path(path)
    if not path.exists():
        raise InspectionError(f"no such file: {path}")
    if not path.is_file():
        raise InspectionError(f"not a regular file: {path}")
    size = path.stat().st_size
    if size == 0:
        raise InspectionError("the file is empty (0 bytes)")
    with path.open("rb") as handle:
        head = handle.read(4096)

    probe = _probe_image(path, size, max_image_pixels)
    if probe is None:
        try:
            probe = _probe_av(path, size)
        except InspectionError:
            if _looks_like_text(head):
                raise InspectionError(
                    f"this is a text file, not an image, audio or video (named {path.name})"
                ) from None
            raise
    suffix = path.suffix.lower()
    named = (
        "image" if suffix in IMAGE_SUFFIXES
        else "video" if suffix in VIDEO_SUFFIXES - AUDIO_SUFFIXES
        else "audio" if suffix in AUDIO_SUFFIXES - VIDEO_SUFFIXES
        else None
    )
    if named and named != probe.kind:
        probe.notes.append(
            f"named like {named} ({suffix}) but its content is {probe.format_name} {probe.kind}"
        )
    return probe


def require_kind(probe: MediaProbe, expected: Kind) -> None:
    """Raise a clear error when an upload panel receives the wrong kind of media."""
    if probe.kind == expected:
        return
    what = f"{probe.format_name} {probe.kind}"
    if expected == "video" and probe.kind == "audio":
        raise InspectionError(f"{probe.path.name} has no video stream (it is {what}); use the audio panel")
    raise InspectionError(f"{probe.path.name} is {what}, not {expected}; use the {probe.kind} panel")
