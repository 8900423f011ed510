"""What dots3_note hears of one audio file: vLLM's loader, parser (resample + mono) and processor."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dots3_demo import ffmpeg
from dots3_demo.inspection.errors import InspectionError, one_line
from dots3_demo.inspection.probe import MediaProbe, probe_file, require_kind
from dots3_demo.profiles import Profile

# Shorter than one audio token's worth of samples, the model gets a single padded token.
_SHORT_AUDIO_NOTE = "shorter than one audio token ({ms:.0f} ms): the model gets one mostly padded token"


@dataclass
class AudioReport:
    """Numbers for one audio clip as vLLM's dots3_note processor receives it."""

    duration: float  # seconds, of the 16 kHz mono waveform the model receives
    original_sample_rate: int
    original_channels: int
    sample_rate: int  # what the model receives (audio_config.sampling_rate)
    samples: int
    tokens: int  # <|audio_comp_pad|> tokens in the prompt
    token_stride: int  # samples per token
    chunk_seconds: int  # the audio encoder's chunk length
    chunk_tokens: list[int]  # tokens per encoder chunk (they sum to ``tokens``)
    notes: list[str] = field(default_factory=list)
    waveform: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "duration": round(self.duration, 4),
            "original_sample_rate": self.original_sample_rate,
            "original_channels": self.original_channels,
            "sample_rate": self.sample_rate,
            "samples": self.samples,
            "tokens": self.tokens,
            "token_stride": self.token_stride,
            "chunk_seconds": self.chunk_seconds,
            "chunk_tokens": self.chunk_tokens,
            "notes": self.notes,
        }


def load_audio_as_vllm(path: Path, profile: Profile) -> tuple[np.ndarray, int, int]:
    """Decode with vLLM's ``AudioMediaIO``, then resample and mix down with vLLM's parser.

    Returns ``(waveform at the model's rate, original rate, original channel count)``.
    """
    from vllm.multimodal.media.audio import AudioMediaIO
    from vllm.multimodal.parse import AudioProcessorItems

    try:
        audio, sample_rate = AudioMediaIO().load_file(path)
    except Exception as exc:
        # vLLM tries torchcodec, then libsndfile, then PyAV: only when neither FFmpeg-backed decoder
        # has FFmpeg is the failure the libraries' and not the file's.
        if ffmpeg.libraries_problem() and ffmpeg.pyav_problem():
            raise InspectionError(ffmpeg.media_problem()) from exc
        raise InspectionError(
            f"cannot decode the audio ({one_line(exc) or 'no decoder could read it'})"
        ) from exc
    audio = np.asarray(audio)
    channels = 1 if audio.ndim == 1 else int(min(audio.shape))  # vLLM's loader may already mix down
    if audio.size == 0:
        raise InspectionError("the audio has no samples (0 s)")
    not_finite = int(audio.size - np.count_nonzero(np.isfinite(audio)))
    if not_finite:  # a float WAV can carry them; the model's features would be NaN
        raise InspectionError(
            f"the audio holds {not_finite:,} samples that are NaN or infinite (a corrupt float file); "
            "the model cannot use it"
        )
    items = profile.info.get_data_parser().parse_mm_data({"audio": [(audio, float(sample_rate))]})
    waveform = np.asarray(items.get_items("audio", AudioProcessorItems).get(0), dtype=np.float32)
    return waveform, int(round(sample_rate)), channels


def inspect_audio_probe(probe: MediaProbe, profile: Profile) -> AudioReport:
    """Inspect a probed audio file."""
    require_kind(probe, "audio")
    if not profile.has_audio:
        raise InspectionError(f"the profile {profile.name} has no audio_config: this model takes no audio")
    waveform, original_rate, loaded_channels = load_audio_as_vllm(probe.path, profile)
    channels = max(probe.audio_channels, loaded_channels)
    if waveform.size == 0:
        raise InspectionError("the audio has no samples after resampling (0 s)")
    processor = profile.processor
    features = processor("", audios=[waveform])
    samples = int(features["audio_lengths"][0])
    stride = int(processor.audio_token_stride)
    tokens = math.ceil(samples / stride)  # vLLM's audio_replacement: ceil(audio_lengths / stride)
    rate = profile.audio_sample_rate
    chunk_seconds = int((profile.info.audio_config or {}).get("chunk_seconds", 60))
    chunk = chunk_seconds * rate
    chunk_tokens = [
        math.ceil(min(chunk, samples - start) / stride) for start in range(0, samples, chunk)
    ]
    notes = list(probe.notes)
    if samples < stride:
        notes.append(_SHORT_AUDIO_NOTE.format(ms=1000 * stride / rate))
    if channels > 1:
        notes.append(f"{channels} channels mixed down to mono by vLLM's loader")
    if original_rate != rate:
        notes.append(f"resampled {original_rate} Hz → {rate} Hz by vLLM's parser")
    return AudioReport(
        duration=samples / rate,
        original_sample_rate=original_rate,
        original_channels=channels,
        sample_rate=rate,
        samples=samples,
        tokens=tokens,
        token_stride=stride,
        chunk_seconds=chunk_seconds,
        chunk_tokens=chunk_tokens,
        notes=notes,
        waveform=waveform,
    )


def inspect_audio(path: str | Path, profile: Profile) -> AudioReport:
    """Probe and inspect one audio file (``InspectionError`` on unusable input)."""
    return inspect_audio_probe(probe_file(path), profile)
