"""Upload limits of the web app, checked on a file's header before any decoding work starts.

``UploadLimits`` is the one place the defaults live; ``python app.py`` exposes each field as a
flag (``dots3_demo.cli.limits``) and ``dots3_demo.ui`` passes the value
down to the upload handlers, which hand it to ``inspect_file(..., limits=...)``. There
``check_limits`` runs on the ``MediaProbe`` — what PIL's lazy ``Image.open`` (image size) and
PyAV's ``av.open`` (container and stream headers: duration, picture size; FFmpeg's stream-info
probe reads at most its ``probesize``, 5 MB) report — and raises ``InspectionError`` naming the
limit, the file's value and the flag that raises it, before vLLM's loaders decode anything. The
limits trust the header: a file that lies about its length is still bounded by the file size.

The file size is enforced by Gradio at upload time (``Blocks.launch(max_file_size=...)``, given
``UploadLimits.max_file_bytes``); ``check_limits`` repeats it for paths that did not come through
an upload. The ``inspect`` command line does not apply these limits (its user picked the files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

from dots3_demo.inspection.errors import InspectionError
from dots3_demo.inspection.probe import DEFAULT_MAX_IMAGE_PIXELS, MediaProbe

# Container durations carry encoder padding (AAC priming, a last frame's length): a "10 minute"
# clip is often 600.02 s. Durations within this slack of a limit pass.
DURATION_SLACK_S = 0.5

# The flag that sets each field (used in error messages and by ``dots3_demo.cli.limits``).
FLAGS: dict[str, str] = {
    "max_file_size": "--max-file-size",
    "max_video_seconds": "--max-video-seconds",
    "max_video_resolution": "--max-video-resolution",
    "max_image_pixels": "--max-image-pixels",
    "max_audio_seconds": "--max-audio-seconds",
}

# Gradio's units for ``max_file_size`` (binary multiples, case-insensitive).
_SIZE_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([a-z]+)?\s*$", re.IGNORECASE)
_RESOLUTION_RE = re.compile(r"^\s*(\d+)\s*[x×X]\s*(\d+)\s*$")
_PIXELS_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(mp|m)?\s*$", re.IGNORECASE)


def parse_file_size(text: str | int) -> int:
    """``"500mb"`` → 524,288,000 bytes (Gradio's ``max_file_size`` syntax; a bare number is bytes)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        unit = (match.group(2) or "b").lower() if match else ""
        if not match or unit not in _SIZE_UNITS:
            raise ValueError(f"{text!r} is not a file size like 500mb, 2gb or 1048576")
        value = int(match.group(1)) * _SIZE_UNITS[unit]
    if value <= 0:
        raise ValueError(f"the file size limit must be positive, not {text!r}")
    return value


def parse_resolution(text: str | tuple[int, int]) -> tuple[int, int]:
    """``"3840x2160"`` → ``(3840, 2160)`` as (long side, short side): either orientation fits."""
    if isinstance(text, tuple):
        a, b = text
    else:
        match = _RESOLUTION_RE.match(str(text))
        if not match:
            raise ValueError(f"{text!r} is not a resolution like 3840x2160")
        a, b = int(match.group(1)), int(match.group(2))
    if a <= 0 or b <= 0:
        raise ValueError(f"a resolution limit needs two positive sides, not {text!r}")
    return max(a, b), min(a, b)


def parse_pixels(text: str | int) -> int:
    """``"50M"`` / ``"50MP"`` / ``"50000000"`` → 50,000,000 pixels."""
    if isinstance(text, int):
        return text
    match = _PIXELS_RE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a pixel count like 50M or 50000000")
    number = float(match.group(1))
    return int(round(number * 1_000_000)) if match.group(2) else int(number)


def _mb(size: int) -> str:
    return f"{size / 1024**2:,.1f} MB"


def _minutes(seconds: float) -> str:
    """``723.4`` → ``12:03``."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@dataclass(frozen=True)
class UploadLimits:
    """What the web app accepts; every field has a ``python app.py`` flag (see ``FLAGS``).

    ``max_video_resolution`` is (long side, short side): a portrait 2160×3840 clip fits 3840x2160.
    ``max_image_pixels`` cannot exceed PIL's own decompression-bomb limit (PIL would refuse to
    decode above it anyway).
    """

    max_file_size: str = "500mb"
    max_video_seconds: float = 600.0
    max_video_resolution: tuple[int, int] = (3840, 2160)
    max_image_pixels: int = 50_000_000
    max_audio_seconds: float = 600.0

    def __post_init__(self) -> None:
        parse_file_size(self.max_file_size)
        resolution = cast(tuple[int, int], tuple(self.max_video_resolution))  # a list from JSON too
        object.__setattr__(self, "max_video_resolution", parse_resolution(resolution))
        for name in ("max_video_seconds", "max_audio_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{FLAGS[name]} must be positive, not {getattr(self, name)!r}")
        if not 0 < self.max_image_pixels <= DEFAULT_MAX_IMAGE_PIXELS:
            raise ValueError(
                f"{FLAGS['max_image_pixels']} must be between 1 and {DEFAULT_MAX_IMAGE_PIXELS:,} "
                f"(PIL's decompression-bomb limit), not {self.max_image_pixels:,}"
            )

    @property
    def max_file_bytes(self) -> int:
        """``max_file_size`` in bytes (what ``Blocks.launch(max_file_size=...)`` gets)."""
        return parse_file_size(self.max_file_size)


def check_limits(probe: MediaProbe, limits: UploadLimits) -> None:
    """Raise ``InspectionError`` if the probed file exceeds ``limits`` (reads only ``probe``)."""
    if probe.size_bytes > limits.max_file_bytes:
        raise InspectionError(
            f"the file is {_mb(probe.size_bytes)}, above this server's limit of {limits.max_file_size} "
            f"({FLAGS['max_file_size']})"
        )
    if probe.kind == "image":
        pixels = probe.width * probe.height
        if pixels > limits.max_image_pixels:
            raise InspectionError(
                f"the image is {probe.width}×{probe.height} = {pixels / 1e6:,.1f} megapixels, above this "
                f"server's limit of {limits.max_image_pixels / 1e6:,.1f} megapixels ({FLAGS['max_image_pixels']})"
            )
        return
    if probe.kind == "video":
        long_side, short_side = max(probe.width, probe.height), min(probe.width, probe.height)
        max_long, max_short = limits.max_video_resolution
        if long_side > max_long or short_side > max_short:
            raise InspectionError(
                f"the video is {probe.width}×{probe.height}, above this server's limit of "
                f"{max_long}×{max_short} (either orientation; {FLAGS['max_video_resolution']})"
            )
        seconds, flag = limits.max_video_seconds, FLAGS["max_video_seconds"]
    else:
        seconds, flag = limits.max_audio_seconds, FLAGS["max_audio_seconds"]
    if probe.duration > seconds + DURATION_SLACK_S:
        raise InspectionError(
            f"the {probe.kind} is {_minutes(probe.duration)} long ({probe.duration:,.1f} s), above this "
            f"server's limit of {seconds:g} s ({flag})"
        )
