"""The web app's upload-limit flags: one per ``UploadLimits`` field (``--max-file-size``, …).

``UploadLimits`` (``dots3_demo.inspection.limits``) holds the defaults and the flag names
(``FLAGS``, which its error messages cite); this module turns them into flags and back.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from dots3_demo.cli.parser import flag_type
from dots3_demo.inspection.limits import FLAGS, UploadLimits, parse_file_size, parse_pixels, parse_resolution
from dots3_demo.inspection.probe import DEFAULT_MAX_IMAGE_PIXELS


def _file_size_text(text: str) -> str:
    """Validate a ``--max-file-size`` value and keep its text (``"500mb"``)."""
    parse_file_size(text)
    return text.strip()


def _image_pixels(text: str) -> int:
    """A ``--max-image-pixels`` value, in range (see ``UploadLimits``)."""
    value = parse_pixels(text)
    if not 0 < value <= DEFAULT_MAX_IMAGE_PIXELS:
        raise ValueError(
            f"the image limit must be between 1 and {DEFAULT_MAX_IMAGE_PIXELS:,} pixels "
            f"(PIL's decompression-bomb limit), not {text!r}"
        )
    return value


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"a duration limit must be positive, not {text!r}")
    return value


def add_limit_arguments(group: argparse._ActionsContainer) -> None:
    """Add one flag per ``UploadLimits`` field to ``group``; defaults come from the dataclass.

    String defaults go through the flag's ``type`` (argparse does that), so ``--help`` shows them
    as a user types them (vLLM's parser appends ``(default: …)`` to every help line).
    """
    d = UploadLimits()
    w, h = d.max_video_resolution
    group.add_argument(
        FLAGS["max_file_size"], type=flag_type(_file_size_text, "size"), default=d.max_file_size,
        metavar="SIZE", help="largest upload, e.g. 200mb or 2gb (Gradio refuses bigger uploads)",
    )
    group.add_argument(
        FLAGS["max_video_seconds"], type=flag_type(_positive_seconds, "seconds"),
        default=d.max_video_seconds, metavar="S", help="longest video accepted, in seconds",
    )
    group.add_argument(
        FLAGS["max_video_resolution"], type=flag_type(parse_resolution, "resolution"),
        default=f"{w}x{h}", metavar="WxH", help="largest video picture, either orientation",
    )
    group.add_argument(
        FLAGS["max_image_pixels"], type=flag_type(_image_pixels, "pixels"),
        default=f"{d.max_image_pixels / 1e6:g}M", metavar="N",
        help=f"largest image in pixels, e.g. 50M or 12000000 (at most {DEFAULT_MAX_IMAGE_PIXELS:,}, "
        "PIL's decompression-bomb limit)",
    )
    group.add_argument(
        FLAGS["max_audio_seconds"], type=flag_type(_positive_seconds, "seconds"),
        default=d.max_audio_seconds, metavar="S", help="longest audio file or recording accepted, in seconds",
    )


def limits_from_args(ns: argparse.Namespace) -> UploadLimits:
    """The ``UploadLimits`` the parsed flags describe (``ValueError`` if they are inconsistent)."""
    return UploadLimits(**{f.name: getattr(ns, f.name) for f in fields(UploadLimits)})
