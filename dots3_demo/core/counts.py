"""The engine's prompt counts against the inspector's, per modality (no Gradio): the check every turn shows
(the chat's and compare's figures lines) and the smoke test asserts.

vLLM counts a placeholder range with its start and end markers; the inspector counts the embeddings between
them, so an image or an audio clip adds :data:`MARKERS_PER_ITEM` to the inspector's side.
"""

from __future__ import annotations

from dataclasses import dataclass

from dots3_demo.core.records import MediaItem
from dots3_demo.core.state import StudioState
from dots3_demo.engine.protocol import PromptTokens

# Dots placeholders wrap each image / audio clip in a start and an end marker
# (<|img|> … <|endofimg|>, <|audio_comp_start|> … <|audio_comp_end|>). vLLM's placeholder range —
# what the engine counts — includes them; the inspector counts the embeddings between them.
MARKERS_PER_ITEM = {"image": 2, "audio": 2}


def inspector_tokens(media: tuple[MediaItem, ...]) -> dict[str, int]:
    """The inspector's counts for the conversation's media, in the engine's units (markers included)."""
    out = {"image": 0, "audio": 0, "video": 0, "video_frames": 0, "video_audio": 0}
    for m in media:
        if m.kind == "video":
            out["video"] += m.tokens
            out["video_frames"] += m.frame_tokens
            out["video_audio"] += m.audio_tokens
        else:
            out[m.kind] += m.tokens + MARKERS_PER_ITEM[m.kind]
    return out


@dataclass(frozen=True)
class TokenPair:
    """One modality's prompt tokens: the engine's count against the inspector's (markers included)."""

    label: str  # "image", "audio", "video", "video frames", "video sound"
    engine: int
    inspector: int
    markers: int = 0  # marker tokens inside ``inspector`` (image/audio: MARKERS_PER_ITEM per item)

    @property
    def equal(self) -> bool:
        return self.engine == self.inspector


def token_pairs(prompt: PromptTokens, media: tuple[MediaItem, ...]) -> list[TokenPair]:
    """Engine against inspector, per modality present in the conversation (or counted by the engine)."""
    inspected = inspector_tokens(media)
    counts = {m.kind: sum(1 for x in media if x.kind == m.kind) for m in media}
    pairs = [("image", prompt.image), ("audio", prompt.audio), ("video", prompt.video),
             ("video frames", prompt.video_frames), ("video sound", prompt.video_audio)]
    keys = {"video frames": "video_frames", "video sound": "video_audio"}
    out = []
    for label, engine_value in pairs:
        key = keys.get(label, label)
        base = key.split("_")[0]
        if base not in counts and engine_value == 0:
            continue
        markers = MARKERS_PER_ITEM[key] * counts[key] if key in MARKERS_PER_ITEM and counts.get(key) else 0
        out.append(TokenPair(label, engine_value, inspected[key], markers))
    return out


def mismatch_causes(pairs: list[TokenPair]) -> list[str]:
    """What a difference between the engine's prompt and the inspector's plan most likely means, per kind of
    difference (issue 21 §2), in plain words; [] when every pair is equal."""
    causes: list[str] = []
    for pair in pairs:
        if pair.equal:
            continue
        if pair.engine == 0 and pair.inspector > 0:
            cause = (f"no {pair.label} reached the engine: a part dropped on the way (a gateway or proxy that drops "
                     "content parts), or a server that drops it")
        elif pair.label.startswith("video"):
            cause = ("the video was planned otherwise: with the server's own defaults (a server started without "
                     "--trust-request-mm-kwargs ignores the Budget tab), or another model's processor config")
        else:
            cause = (f"the {pair.label} was expanded otherwise: another model (its image processor or audio stride "
                     "differ from this profile's)")
        if cause not in causes:
            causes.append(cause)
    return causes


def totals(state: StudioState) -> dict[str, int]:
    """Prompt tokens by modality over every upload (media only: no question, no chat template)."""
    text = image = audio = 0
    if state.video is not None:
        text += state.video.text_tokens
        image += state.video.image_pad_tokens
        audio += state.video.audio_pad_tokens
    image += sum(r.tokens for _, r in state.images)
    if state.audio is not None:
        audio += state.audio.tokens
    return {"text": text, "image": image, "audio": audio}
