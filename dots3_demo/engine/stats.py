"""Prompt tokens by modality, counted on the token ids the engine actually receives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dots3_demo.engine.protocol import PromptTokens

IMAGE_PAD = "<|imgpad|>"
AUDIO_PAD = "<|audio_comp_pad|>"


def prompt_tokens_by_modality(
    prompt_token_ids: Sequence[int],
    mm_placeholders: Mapping[str, Sequence[Any]] | None,
    vocab: Mapping[str, int],
) -> PromptTokens:
    """Split the expanded prompt by the placeholder ranges vLLM's processor produced.

    ``mm_placeholders`` is the renderer output's ``{"image": [PlaceholderRange(offset, length)],
    ...}``; a range covers the item's whole expansion (markers included). Inside a video range,
    image-pad tokens are frames and audio-pad tokens are the interleaved sound track.
    """
    ids = list(prompt_token_ids)
    result = PromptTokens(total=len(ids))
    image_pad, audio_pad = vocab.get(IMAGE_PAD), vocab.get(AUDIO_PAD)
    for modality, ranges in (mm_placeholders or {}).items():
        for placeholder in ranges:
            offset, length = int(placeholder.offset), int(placeholder.length)
            if modality.startswith("image"):
                result.image += length
            elif modality.startswith("audio"):
                result.audio += length
            elif modality.startswith("video"):
                result.video += length
                span = ids[offset: offset + length]
                result.video_frames += sum(1 for t in span if t == image_pad)
                result.video_audio += sum(1 for t in span if t == audio_pad)
    result.text = result.total - result.image - result.audio - result.video
    return result
