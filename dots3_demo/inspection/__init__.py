"""What the model sees: uploads run through vLLM's own dots3_note preprocessing (no Gradio here).

``inspect_file`` is the single entry point the CLI and the UI call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dots3_demo.inspection.audio import AudioReport, inspect_audio_probe
from dots3_demo.inspection.errors import InspectionError
from dots3_demo.inspection.image import ImageReport, inspect_image_probe
from dots3_demo.inspection.limits import UploadLimits, check_limits
from dots3_demo.inspection.probe import DEFAULT_MAX_IMAGE_PIXELS, Kind, MediaProbe, probe_file, require_kind
from dots3_demo.inspection.video import (
    K_MODES,
    Progress,
    VideoReport,
    VideoSettings,
    inspect_video_bytes,
)
from dots3_demo.profiles import Profile

Report = ImageReport | AudioReport | VideoReport

__all__ = [
    "AudioReport", "ImageReport", "InspectionError", "K_MODES", "MediaProbe", "Report",
    "UploadLimits", "VideoReport", "VideoSettings", "inspect_file", "probe_file", "report_to_json",
]


def inspect_file(
    path: str | Path,
    profile: Profile,
    settings: VideoSettings = VideoSettings(),
    *,
    expected: Kind | None = None,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    limits: UploadLimits | None = None,
    progress: Progress | None = None,
) -> Report:
    """Inspect one upload; ``expected`` makes a panel refuse the wrong kind of media.

    ``limits`` (the web app's ``UploadLimits``) are checked on the file's header, before any
    decoding; they replace ``max_image_pixels``.
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
    return inspect_video_bytes(probe.path.read_bytes(), probe, profile, settings, progress)


def report_to_json(path: str | Path, report: Report) -> dict[str, Any]:
    """The CLI's JSON object for one file: ``{"file", "kind", <kind>: {...}}``."""
    kind = {ImageReport: "image", AudioReport: "audio", VideoReport: "video"}[type(report)]
    return {"file": str(path), "kind": kind, kind: report.to_dict()}
