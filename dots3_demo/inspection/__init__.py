"""What the model sees: uploads run through vLLM's own dots3_note preprocessing (no Gradio here).

``inspect_file`` is the single entry point the CLI and the UI call.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path
from typing import Any, Literal, overload

from dots3_demo.inspection.audio import AudioReport, inspect_audio_probe
from dots3_demo.inspection.errors import InspectionError
from dots3_demo.inspection.image import ImageReport, inspect_image_probe
from dots3_demo.inspection.limits import UploadLimits, check_limits
from dots3_demo.inspection.probe import DEFAULT_MAX_IMAGE_PIXELS, Kind, MediaProbe, probe_file, require_kind
from dots3_demo.inspection.video import (
    K_MODES,
    FramesReady,
    Progress,
    VideoReport,
    VideoSettings,
    inspect_video_bytes,
)
from dots3_demo.profiles import Profile

Report = ImageReport | AudioReport | VideoReport

__all__ = [
    "AudioReport", "ImageReport", "InspectionError", "K_MODES", "MediaProbe", "Report",
    "UploadLimits", "VideoReport", "VideoSettings", "inspect_file", "interruption_points", "keep_image_blocks",
    "probe_file", "report_to_json",
]

IMAGE_BLOCKS_PER_WORKER = 4  # enough for vLLM's frame loop: ~5 frame-sized images, a few alive at once
IMAGE_BLOCKS_MAX = 16  # Pillow's blocks are at most 16 MiB: at most 256 MiB kept, 50 MB for 720p frames



# ``expected`` names the report's type: a panel that expects a video gets a VideoReport (or an InspectionError).
# The unchecked form comes first: mypy types a call that matches no overload by the first one.
@overload
def inspect_file(path: str | Path, profile: Profile, settings: VideoSettings = ..., *, expected: None = ...,
                 max_image_pixels: int = ..., limits: UploadLimits | None = ...,
                 progress: Progress | None = ..., frames_ready: FramesReady | None = ...) -> Report: ...
@overload
def inspect_file(path: str | Path, profile: Profile, settings: VideoSettings = ..., *, expected: Literal["image"],
                 max_image_pixels: int = ..., limits: UploadLimits | None = ...,
                 progress: Progress | None = ..., frames_ready: FramesReady | None = ...) -> ImageReport: ...
@overload
def inspect_file(path: str | Path, profile: Profile, settings: VideoSettings = ..., *, expected: Literal["audio"],
                 max_image_pixels: int = ..., limits: UploadLimits | None = ...,
                 progress: Progress | None = ..., frames_ready: FramesReady | None = ...) -> AudioReport: ...
@overload
def inspect_file(path: str | Path, profile: Profile, settings: VideoSettings = ..., *, expected: Literal["video"],
                 max_image_pixels: int = ..., limits: UploadLimits | None = ...,
                 progress: Progress | None = ..., frames_ready: FramesReady | None = ...) -> VideoReport: ...
@overload
def inspect_file(path: str | Path, profile: Profile, settings: VideoSettings = ..., *, expected: Kind | None = ...,
                 max_image_pixels: int = ..., limits: UploadLimits | None = ...,
                 progress: Progress | None = ..., frames_ready: FramesReady | None = ...) -> Report: ...
def inspect_file(
    path: str | Path,
    profile: Profile,
    settings: VideoSettings = VideoSettings(),
    *,
    expected: Kind | None = None,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    limits: UploadLimits | None = None,
    progress: Progress | None = None,
    frames_ready: FramesReady | None = None,
) -> Report:
    """Inspect one upload; ``expected`` makes a panel refuse the wrong kind of media.

    ``limits`` (the web app's ``UploadLimits``) are checked on the file's header, before any
    decoding; they replace ``max_image_pixels``. ``frames_ready`` gets a video's frames as soon as vLLM has
    sampled them (``inspect_video_bytes``).
    """
    probe = probe_file(path, max_image_pixels=0 if limits is not None else max_image_pixels)
    if expected is not None:
        require_kind(probe, expected)
    if limits is not None:
        check_limits(probe, limits)
    if probe.kind == "image":
        return inspect_image_probe(probe, profile)
    if probe.kind == "audio":
        return inspect_audio_probe(probe, profile)
    return inspect_video_bytes(probe.path.read_bytes(), probe, profile, settings, progress, frames_ready)


def keep_image_blocks(workers: int) -> int:
    """Let Pillow keep freed image buffers for reuse (4 per inspection worker, at most 16); returns how
    many, 0 when ``$PILLOW_BLOCKS_MAX`` is set (the operator chose; Pillow read it at import).

    The web app fixes glibc's mmap threshold at 64 KiB (``dots3_demo.serving.memory``), so every
    buffer above it is a fresh ``mmap`` that the kernel zeroes page by page. vLLM's video preprocessing
    makes about five frame-sized PIL images per frame: on a 30 s 720p clip it took 1.16 s under that
    setting against 0.88 s without it, and 0.89 s with Pillow keeping 16 blocks (0.91 s with 4).
    Process-wide, so it is set once, when the app starts (``launch_app``), never per call.
    """
    from PIL import Image

    if "PILLOW_BLOCKS_MAX" in os.environ:
        return 0
    blocks = max(1, min(IMAGE_BLOCKS_MAX, IMAGE_BLOCKS_PER_WORKER * int(workers)))
    Image.core.set_blocks_max(blocks)
    return blocks


@cache
def interruption_points() -> tuple[str, ...]:
    """Where a superseded inspection may stop (``Job.interruptible``): at a call into vLLM's dots3_note
    code or into this package — never inside a library holding a lock."""
    vllm = importlib.util.find_spec("vllm")
    roots = list(vllm.submodule_search_locations or []) if vllm is not None else []
    places = [os.path.join(root, "models", "dots3_note", "") for root in roots]
    return (*places, os.path.join(os.path.dirname(__file__), ""))  # the form code objects name it by


def report_to_json(path: str | Path, report: Report) -> dict[str, Any]:
    """The CLI's JSON object for one file: ``{"file", "kind", <kind>: {...}}``."""
    kind = {ImageReport: "image", AudioReport: "audio", VideoReport: "video"}[type(report)]
    return {"file": str(path), "kind": kind, kind: report.to_dict()}
