"""Prompt tokens by modality, counted on the token ids the engine actually receives; and which limit a reply
that finished with ``length`` ran into."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from dots3_demo.engine.promptview import PromptView
from dots3_demo.engine.protocol import PromptTokens, TurnStats

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


def prompt_tokens_from_view(view: PromptView) -> PromptTokens:
    """Prompt tokens by modality read from the ids alone (a server's ``prompt_token_ids``), counted as
    :func:`prompt_tokens_by_modality` counts on vLLM's placeholder ranges: an item's markers, and a video's
    timestamp text, inside the item; pad tokens inside a video are its frames and its sound track."""
    by: dict[str, int] = {}
    pads: dict[str, int] = {}
    for span in view.spans:
        by[span.kind] = by.get(span.kind, 0) + span.count
        if span.pad:
            pads[span.kind] = pads.get(span.kind, 0) + span.count
    result = PromptTokens(total=view.total, image=by.get("image", 0), audio=by.get("audio", 0),
                          video=by.get("video frame", 0) + by.get("video sound", 0),
                          video_frames=pads.get("video frame", 0), video_audio=pads.get("video sound", 0))
    result.text = result.total - result.image - result.audio - result.video
    return result


LengthLimit = Literal["max tokens", "context", "both", "short of max tokens"]


def length_limit(finish_reason: str | None, stats: TurnStats | None) -> LengthLimit | None:
    """Which limit a reply that finished with ``length`` ran into, from the engine's own counts.

    vLLM ends a request with ``length`` when its output reaches the request's ``max_tokens`` or when prompt +
    output reach ``max_model_len`` (its scheduler's stop check; a server also lowers ``max_tokens`` to what the
    context leaves). So: output ≥ max tokens → "max tokens"; prompt + output ≥ max model len → "context"; both
    → "both". With the context length unknown (a server that does not report it), a ``length`` finish short of
    max tokens is "short of max tokens" (most likely the context; a server's own cap would look the same).
    None: not a ``length`` finish, or the counts do not tell."""
    if finish_reason != "length" or stats is None:
        return None
    output = stats.output_tokens
    by_tokens = stats.max_tokens is not None and output >= stats.max_tokens
    prompt = stats.prompt.total if stats.prompt is not None and stats.prompt.total else None
    if prompt is None:
        return "max tokens" if by_tokens else None
    if not stats.max_model_len:
        return "max tokens" if by_tokens else "short of max tokens" if stats.max_tokens is not None else None
    by_context = prompt + output >= stats.max_model_len
    if by_tokens and by_context:
        return "both"
    return "max tokens" if by_tokens else "context" if by_context else None


def finish_words(finish_reason: str | None, stats: TurnStats | None) -> str:
    """How a reply finished, in words: ``length · context full (2,048)``, ``length · max tokens (1,024)``,
    ``stop``; "" when it did not finish (stopped or failed)."""
    if not finish_reason:
        return ""
    limit = length_limit(finish_reason, stats)
    if limit is None or stats is None:
        return finish_reason
    used = (stats.prompt.total if stats.prompt is not None else 0) + stats.output_tokens
    tokens = f"max tokens ({stats.max_tokens or 0:,})"
    context = f"context full ({stats.max_model_len or 0:,})"
    said = {"max tokens": tokens, "context": context, "both": f"{tokens} and {context}",
            "short of max tokens": f"short of {tokens}: prompt + output = {used:,}, the context length is not known"
            }[limit]
    return f"{finish_reason} · {said}"
