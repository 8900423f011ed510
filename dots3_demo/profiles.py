"""Where the geometry and the tokenizer come from: a checkpoint, a config-only folder, or preview.

A *profile* is a folder holding at least ``config.json`` (with ``vision_config`` and/or
``audio_config``), ``preprocessor_config.json`` (its ``vision_config``) and tokenizer files.
That is all vLLM's dots3_note processor reads on the CPU side, so a profile built from a real
checkpoint's small files inspects exactly what that checkpoint would see.

We build vLLM's own ``Dots3NoteProcessingInfo`` over the folder (through a minimal processing
context), so the image processor, the audio token stride, the audio parser and the
"video keeps its sound track" switch are all vLLM's, not re-derived here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dots3_demo import vllm_compat

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
PREVIEW_PROFILE_DIR = ASSETS_DIR / "preview_profile"

# Per-prompt limits vLLM's dots3_note supports (processor.get_supported_mm_limits).
DEFAULT_MM_LIMITS = {"image": 8, "audio": 4, "video": 1}


class ProfileError(ValueError):
    """A profile folder that cannot be used; the message says why."""


@dataclass(frozen=True)
class _MultiModalLimits:
    limits: dict[str, int]

    def get_limit_per_prompt(self, modality: str) -> int:
        return self.limits.get(modality, 0)


@dataclass
class _ProcessingContext:
    """The slice of vLLM's ``InputProcessingContext`` that dots3_note's processing info reads."""

    model_dir: Path
    max_model_len: int
    tokenizer: Any
    mm_limits: dict[str, int]

    @property
    def model_config(self) -> SimpleNamespace:
        return SimpleNamespace(
            model=str(self.model_dir), revision=None, max_model_len=self.max_model_len
        )

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def get_mm_config(self) -> _MultiModalLimits:
        return _MultiModalLimits(self.mm_limits)


@dataclass
class Profile:
    """vLLM's dots3_note preprocessing, configured from one profile folder."""

    path: Path
    is_preview: bool
    max_model_len: int = 32768
    mm_limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MM_LIMITS))

    @property
    def name(self) -> str:
        return "preview (bundled)" if self.is_preview else str(self.path)

    @property
    def approximate(self) -> tuple[str, ...]:
        """Numbers that rest on assumptions in this profile (empty for a real checkpoint)."""
        if not self.is_preview:
            return ()
        return ("text tokens (home-made preview tokenizer)", "image pixel limits (assumed)")

    @cached_property
    def tokenizer(self) -> Any:
        from vllm.tokenizers.registry import get_tokenizer

        try:
            return get_tokenizer(str(self.path))
        except Exception as exc:
            raise ProfileError(f"cannot load the tokenizer in {self.path}: {exc}") from exc

    @cached_property
    def info(self) -> Any:
        """vLLM's ``Dots3NoteProcessingInfo`` for this folder."""
        module = vllm_compat.processor_module()
        ctx = _ProcessingContext(self.path, self.max_model_len, self.tokenizer, self.mm_limits)
        return module.Dots3NoteProcessingInfo(ctx)

    @property
    def processor(self) -> Any:
        """vLLM's ``Dots3NoteProcessor`` (tokenizer + image processor + audio stride)."""
        return self.info.processor

    @property
    def image_processor(self) -> Any:
        image_processor = self.info.image_processor
        if image_processor is None:
            raise ProfileError(f"{self.path} has no vision_config: this model takes no images")
        return image_processor

    @property
    def audio_sample_rate(self) -> int:
        return int((self.info.audio_config or {}).get("sampling_rate", 16000))

    @property
    def has_audio(self) -> bool:
        return self.info.audio_config is not None

    def describe(self) -> dict[str, Any]:
        """A small summary for the UI and the CLI."""
        image = self.info.image_processor
        return {
            "profile": self.name,
            "preview": self.is_preview,
            "approximate": list(self.approximate),
            "patch_size": image.patch_size if image else None,
            "merge_size": image.merge_size if image else None,
            "temporal_patch_size": image.temporal_patch_size if image else None,
            "min_pixels": image.min_pixels if image else None,
            "max_pixels": image.max_pixels if image else None,
            "audio_sample_rate": self.audio_sample_rate if self.has_audio else None,
            "audio_token_stride": self.processor.audio_token_stride if self.has_audio else None,
        }


def load_profile(
    model: str | Path | None = None,
    *,
    max_model_len: int = 32768,
    mm_limits: dict[str, int] | None = None,
) -> Profile:
    """Load ``model`` (a checkpoint or config-only folder), or the bundled preview profile.

    Raises ``ProfileError`` with a one-line reason when the folder cannot be used.
    """
    path = Path(model).expanduser() if model else PREVIEW_PROFILE_DIR
    if not path.is_dir():
        raise ProfileError(f"--model {path}: not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ProfileError(f"{path} has no config.json")
    try:
        config = json.loads(config_file.read_text())
    except ValueError as exc:
        raise ProfileError(f"{config_file} is not valid JSON: {exc}") from exc
    if not isinstance(config.get("vision_config"), dict) and not isinstance(
        config.get("audio_config"), dict
    ):
        raise ProfileError(f"{config_file} has neither vision_config nor audio_config")
    if isinstance(config.get("vision_config"), dict):
        pre = path / "preprocessor_config.json"
        if not pre.is_file():
            raise ProfileError(f"{path} has a vision_config but no preprocessor_config.json")
    profile = Profile(
        path=path.resolve(),
        is_preview=model is None,
        max_model_len=max_model_len,
        mm_limits=dict(mm_limits or DEFAULT_MM_LIMITS),
    )
    profile.info.image_processor  # noqa: B018 - fail now, with a clear reason, not on first upload
    profile.tokenizer  # noqa: B018
    return profile
