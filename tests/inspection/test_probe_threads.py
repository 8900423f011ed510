"""PIL's process-wide pixel limit while images are probed on many threads at once.

The probe used to lift ``Image.MAX_IMAGE_PIXELS`` for the length of each call. With inspections side by
side, one call could restore the value another had lifted, leaving the whole process — vLLM's image
loader, Gradio — with no decompression-bomb limit. Now the probe changes nothing process-wide."""

from __future__ import annotations

import sys
import threading
import warnings

import pytest
from PIL import Image

from dots3_demo.inspection import InspectionError, inspect_file, probe_file
from support.media_factory import png_claiming


def test_probing_images_on_many_threads_never_touches_pils_global_limit(tmp_path, profile):
    """The probe used to lift ``Image.MAX_IMAGE_PIXELS`` for each call; on threads side by side one call
    restored another's lifted value and left the process with no decompression-bomb limit at all."""
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_claiming(100_000, 100_000))
    big = tmp_path / "big.png"
    big.write_bytes(png_claiming(10_000, 10_000))  # 100 M pixels: above PIL's warning, under its error
    photo = tmp_path / "photo.png"
    Image.new("RGB", (64, 48), (10, 20, 30)).save(photo)
    original = Image.MAX_IMAGE_PIXELS
    seen: set[object] = set()
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.add(Image.MAX_IMAGE_PIXELS)

    def probe_many(errors: list[str]):
        for _ in range(60):
            try:
                probe_file(bomb, max_image_pixels=50_000_000)
            except InspectionError as exc:
                errors.append(str(exc))
            assert probe_file(big, max_image_pixels=0).width == 10_000
        assert inspect_file(photo, profile, expected="image").grid

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often, inside the probe too
    errors: list[list[str]] = [[] for _ in range(4)]
    try:
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            workers = [threading.Thread(target=probe_many, args=(e,)) for e in errors]
            for w in workers:
                w.start()
            for w in workers:
                w.join(120)
        stop.set()
        watcher.join(10)
    finally:
        sys.setswitchinterval(interval)
    assert seen == {original} and Image.MAX_IMAGE_PIXELS == original
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]
    assert all(len(e) == 60 and "100000×100000 = 10000 megapixels" in e[0] for e in errors)


def test_pils_own_limit_still_guards_everything_else(tmp_path):
    """What the probe leaves in place: Image.open (vLLM's and Gradio's loaders) still refuses a bomb."""
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_claiming(100_000, 100_000))
    with pytest.raises(InspectionError, match="megapixels"):
        probe_file(bomb)
    with pytest.raises(Image.DecompressionBombError):
        Image.open(bomb)
