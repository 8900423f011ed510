"""Image grids/tokens and audio samples/tokens equal vLLM's processor and parser."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from dots3_demo.inspection import inspect_file
from support import media_factory

IMAGE_CASES = [
    ("rgb_small.png", 64, 48, "RGB"),
    ("rgb_vga.png", 640, 480, "RGB"),
    ("rgb_fhd.jpg", 1920, 1080, "RGB"),
    ("under_min_pixels.png", 20, 30, "RGB"),  # below min_pixels: upscaled
    ("wide.png", 3000, 40, "RGB"),
    ("tall.png", 30, 2000, "L"),
    ("rgba.png", 300, 200, "RGBA"),
    ("palette.png", 257, 111, "P"),
    ("la.png", 100, 100, "LA"),
    ("cmyk.jpg", 640, 480, "CMYK"),
    ("gray16.png", 333, 222, "I;16"),
]


@pytest.mark.parametrize("name, width, height, mode", IMAGE_CASES, ids=[c[0] for c in IMAGE_CASES])
def test_image_grid_and_tokens_match_vllm(name, width, height, mode, media_dir, profile):
    path = media_factory.make_image(media_dir / name, width=width, height=height, mode=mode)
    report = inspect_file(path, profile)
    with Image.open(path) as image:
        image.load()
        ref = profile.processor("<|img|><|imgpad|><|endofimg|>", images=[image])
    grid = ref["image_grid_thw"][0].tolist()
    merge = profile.image_processor.merge_size
    patch = profile.image_processor.patch_size
    assert report.grid == grid
    assert report.tokens == math.prod(grid) // merge**2
    assert report.resized_size == (grid[2] * patch, grid[1] * patch)
    assert report.original_size == (width, height)
    assert report.original_mode == mode
    # pixel_values rows = patches: the grid really is what the vision tower receives
    assert ref["pixel_values"].shape[0] == math.prod(grid)


@pytest.fixture(scope="session")
def small_pixel_profile(tmp_path_factory):
    """A config-only copy of the preview profile with max_pixels 200704 (256 tokens), so the
    downscale path is exercised without a 13-megapixel test image."""
    import json
    import shutil

    from dots3_demo.profiles import PREVIEW_PROFILE_DIR, load_profile

    folder = tmp_path_factory.mktemp("small_pixels") / "profile"
    shutil.copytree(PREVIEW_PROFILE_DIR, folder)
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    pre["vision_config"]["max_pixels"] = 200704
    (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    return load_profile(folder)


@pytest.mark.parametrize("width, height", [(1920, 1080), (1000, 1000), (4000, 60)])
def test_image_downscale_matches_vllm(width, height, media_dir, small_pixel_profile):
    profile = small_pixel_profile
    path = media_factory.make_image(media_dir / f"down_{width}x{height}.png", width=width, height=height)
    report = inspect_file(path, profile)
    with Image.open(path) as image:
        ref = profile.processor("<|img|><|imgpad|><|endofimg|>", images=[image.convert("RGB")])
    assert report.grid == ref["image_grid_thw"][0].tolist()
    assert report.resized_size[0] * report.resized_size[1] <= 200704 < width * height


def test_image_upscale_is_visible(media_dir, profile):
    small = inspect_file(media_factory.make_image(media_dir / "small_check.png", width=20, height=30), profile)
    assert small.resized_size[0] * small.resized_size[1] >= profile.image_processor.min_pixels > 20 * 30


AUDIO_CASES = [(fmt, rate, ch) for fmt in ("wav", "flac", "mp3")
               for rate in (16000, 22050, 44100, 48000) for ch in (1, 2)]


def _vllm_samples(path, profile) -> int:
    from vllm.multimodal.media.audio import AudioMediaIO
    from vllm.multimodal.parse import AudioProcessorItems

    audio, sr = AudioMediaIO().load_file(path)
    items = profile.info.get_data_parser().parse_mm_data({"audio": [(np.asarray(audio), float(sr))]})
    waveform = np.asarray(items.get_items("audio", AudioProcessorItems).get(0))
    assert waveform.ndim == 1  # vLLM mixed it to mono
    return waveform


@pytest.mark.parametrize("fmt, rate, channels", AUDIO_CASES,
                         ids=[f"{f}-{r}-{c}ch" for f, r, c in AUDIO_CASES])
def test_audio_samples_and_tokens_match_vllm(fmt, rate, channels, media_dir, profile):
    seconds = 1.3
    path = media_factory.make_audio(media_dir / f"tone_{rate}_{channels}.{fmt}", seconds=seconds,
                                    rate=rate, channels=channels)
    report = inspect_file(path, profile)
    waveform = _vllm_samples(path, profile)
    assert report.samples == waveform.size
    assert abs(report.samples - seconds * 16000) <= 0.08 * 16000  # mp3 adds encoder padding
    stride = profile.processor.audio_token_stride
    lengths = profile.processor("", audios=[waveform.astype(np.float32)])["audio_lengths"].tolist()
    assert report.tokens == math.ceil(lengths[0] / stride) == sum(report.chunk_tokens)
    assert report.sample_rate == 16000
    assert report.original_sample_rate == rate
    assert report.original_channels == channels
    assert any("resampled" in n for n in report.notes) == (rate != 16000)
    assert any("mixed down" in n for n in report.notes) == (channels > 1)
    assert report.waveform is not None and np.allclose(report.waveform, waveform)
