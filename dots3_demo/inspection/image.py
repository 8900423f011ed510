"""What dots3_note sees of one image: vLLM's loader, then vLLM's image processor."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from dots3_demo import vllm_compat
from dots3_demo.inspection.errors import InspectionError, one_line
from dots3_demo.inspection.probe import MediaProbe, probe_file, require_kind
from dots3_demo.profiles import Profile


@dataclass
class ImageReport:
    """Numbers for one image, all from vLLM's ``Dots3NoteImageProcessor``."""

    original_size: tuple[int, int]  # (width, height)
    original_mode: str
    resized_size: tuple[int, int]  # (width, height) the vision tower receives
    grid: list[int]  # grid_thw [t, h, w] in patches
    tokens: int  # <|imgpad|> tokens = t*h*w / merge_size**2
    patch_size: int
    merge_size: int
    notes: list[str] = field(default_factory=list)
    image: Image.Image | None = field(default=None, repr=False)  # as loaded by vLLM (RGB)

    def to_dict(self) -> dict[str, Any]:
        return {
            "original_size": list(self.original_size),
            "original_mode": self.original_mode,
            "resized_size": list(self.resized_size),
            "grid": self.grid,
            "tokens": self.tokens,
            "patch_size": self.patch_size,
            "merge_size": self.merge_size,
            "notes": self.notes,
        }


def load_image_as_vllm(data: bytes) -> Image.Image:
    """Load image bytes exactly as vLLM's chat path does (``ImageMediaIO``, RGB)."""
    try:
        return vllm_compat.load_image_bytes(data)
    except ValueError as exc:
        text = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", one_line(exc))
        raise InspectionError(text.replace("Failed to load image: ", "cannot decode image: ")) from exc


def _mode_notes(probe: MediaProbe) -> list[str]:
    notes = []
    mode = probe.mode
    if mode in ("RGBA", "LA", "PA") or (mode == "P"):
        notes.append(f"{mode} image: transparency is flattened onto white (vLLM's RGBA→RGB)")
    if mode == "CMYK":
        notes.append("CMYK image: converted to RGB by PIL; colours may shift")
    if mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        notes.append(f"{mode} (16/32-bit) image: PIL's conversion to 8-bit RGB clips values above 255")
    if probe.n_frames > 1:
        notes.append(f"animated image with {probe.n_frames} frames: only the first frame is used")
    return notes


def inspect_image_probe(probe: MediaProbe, profile: Profile) -> ImageReport:
    """Inspect a probed image file with ``profile``'s vLLM image processor."""
    require_kind(probe, "image")
    image = load_image_as_vllm(probe.path.read_bytes())
    image_processor = profile.image_processor
    try:
        pixel_values, grid_thw = image_processor.preprocess(image)
    except ValueError as exc:
        text = str(exc)
        if "at least" in text:
            raise InspectionError(
                f"image is {image.width}×{image.height} px; dots3_note needs at least "
                f"{image_processor.factor // 4} px on each side"
            ) from exc
        if "aspect ratio" in text:
            ratio = max(image.size) / min(image.size)
            raise InspectionError(
                f"image aspect ratio is {ratio:.0f}:1 ({image.width}×{image.height}); "
                "dots3_note accepts at most 200:1"
            ) from exc
        raise InspectionError(f"vLLM's image processor rejected the image: {text}") from exc
    del pixel_values
    grid = [int(v) for v in grid_thw.tolist()]
    merge = image_processor.merge_size
    tokens = grid[0] * grid[1] * grid[2] // merge**2
    resized = (grid[2] * image_processor.patch_size, grid[1] * image_processor.patch_size)
    return ImageReport(
        original_size=(probe.width, probe.height),
        original_mode=probe.mode,
        resized_size=resized,
        grid=grid,
        tokens=tokens,
        patch_size=image_processor.patch_size,
        merge_size=merge,
        notes=probe.notes + _mode_notes(probe),
        image=image,
    )


def inspect_image(path: str | Path, profile: Profile) -> ImageReport:
    """Probe and inspect one image file (``InspectionError`` on unusable input)."""
    return inspect_image_probe(probe_file(path), profile)


def draw_token_grid(report: ImageReport, *, max_side: int = 1024) -> Image.Image:
    """The resized image with its patch grid (thin) and merged-token grid (thick) drawn over it."""
    if report.image is None:
        raise ValueError("report carries no image")
    width, height = report.resized_size
    picture = report.image.resize((width, height), Image.Resampling.BICUBIC).convert("RGBA")
    overlay = Image.new("RGBA", picture.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    patch = report.patch_size
    token = patch * report.merge_size
    if width // patch <= 400 and height // patch <= 400:
        for x in range(0, width + 1, patch):
            draw.line([(x, 0), (x, height)], fill=(255, 255, 255, 60), width=1)
        for y in range(0, height + 1, patch):
            draw.line([(0, y), (width, y)], fill=(255, 255, 255, 60), width=1)
    for x in range(0, width + 1, token):
        draw.line([(x, 0), (x, height)], fill=(255, 64, 160, 200), width=2)
    for y in range(0, height + 1, token):
        draw.line([(0, y), (width, y)], fill=(255, 64, 160, 200), width=2)
    picture = Image.alpha_composite(picture, overlay).convert("RGB")
    scale = max_side / max(width, height)
    if scale < 1:
        picture = picture.resize((max(1, int(width * scale)), max(1, int(height * scale))))
    return picture
