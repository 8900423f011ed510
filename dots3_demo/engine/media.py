"""Turn a chat's media parts into what vLLM's renderer + Dots processor need.

Why not hand the parts to vLLM's chat parser as they are: its ``video_url`` path decodes 32
frames with OpenCV that the Dots processor then ignores, and (with the processor cache on, or
without raw bytes) the video's sound track is never read. So we load media ourselves and pass
each item to ``render_chat_async`` in two halves (both verified against vLLM 0.32 source):

* in the messages, a *uuid-only* part (``{"type": "video_url", "video_url": None, "uuid": h}``):
  vLLM's chat parser then inserts the model's placeholder exactly where the template wants it
  and loads nothing;
* in ``prompt_extras``, ``multi_modal_data`` / ``multi_modal_uuids`` for those items, in the same
  order. ``BaseRenderer._apply_prompt_extras`` writes them onto the tokenized prompt before the
  multimodal processor runs, so the processor gets our objects: the video as a one-item list of
  ``MediaWithBytes((frames, {"fps": fps}), raw_bytes)`` (the bytes path is the only one that
  interleaves the sound track), uuids = SHA-256 of the bytes (no hash collisions).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dots3_demo import vllm_compat
from dots3_demo.engine.protocol import TurnRejected

# A stand-in frame for the video tuple: the Dots processor decodes the bytes itself, and the
# uuid (not the frames) identifies the item.
_STANDIN_FRAMES_SHAPE = (1, 16, 16, 3)

MEDIA_PART_TYPES = {"image_url", "image_pil", "input_image", "input_audio", "audio_url", "video_url"}


@dataclass
class MediaSummary:
    image: int = 0
    audio: int = 0
    video: int = 0


@dataclass
class PreparedMessages:
    """Messages with uuid-only media parts, plus the media the processor will read."""

    messages: list[dict[str, Any]]
    mm_data: dict[str, list[Any]] = field(default_factory=dict)
    mm_uuids: dict[str, list[str]] = field(default_factory=dict)
    counts: MediaSummary = field(default_factory=MediaSummary)


def modality_of(part: dict[str, Any]) -> str | None:
    kind = part.get("type")
    if kind in ("image_url", "image_pil", "input_image"):
        return "image"
    if kind in ("input_audio", "audio_url"):
        return "audio"
    if kind == "video_url":
        return "video"
    return None


def count_media(messages: list[dict[str, Any]]) -> MediaSummary:
    summary = MediaSummary()
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, dict) and (modality := modality_of(part)):
                setattr(summary, modality, getattr(summary, modality) + 1)
    return summary


class MediaRefused(TurnRejected):
    """What :func:`check_media_limits` refuses, with the facts a mode words its own advice from: ``reason``
    "videos" (more than one video), "mixed" (a video with images or audio) or "limit" (more ``modality``
    items, ``count``, than the engine takes, ``allowed``). The message is the chat's."""

    def __init__(self, message: str, *, reason: str, modality: str = "video", count: int = 0,
                 allowed: int = 0) -> None:
        super().__init__(message)
        self.reason, self.modality, self.count, self.allowed = reason, modality, count, allowed


def check_media_limits(messages: list[dict[str, Any]], limits: dict[str, int] | None) -> MediaSummary:
    """Refuse what vLLM's Dots processor would refuse, with a message a user understands
    (:class:`MediaRefused`, worded for the chat).

    The whole conversation is one prompt, so media in earlier turns count too.
    """
    summary = count_media(messages)
    if summary.video > 1:
        raise MediaRefused(
            f"The conversation holds {summary.video} videos; dots3_note takes one video per "
            "request. Start a new chat (or remove the earlier video) to ask about another one.",
            reason="videos", count=summary.video, allowed=1,
        )
    if summary.video and (summary.image or summary.audio):
        raise MediaRefused(
            "dots3_note cannot mix a video with images or audio in one request (the video "
            "already carries its own sound track). Start a new chat for the video, or send the "
            "images/audio without it.",
            reason="mixed",
        )
    for modality in ("image", "audio", "video"):
        count = getattr(summary, modality)
        if limits is not None and count > limits.get(modality, 0):
            allowed = limits.get(modality, 0)
            if allowed == 0:
                raise MediaRefused(
                    f"This engine takes no {modality} input (it runs text only, or was started with "
                    f"--language-model-only or a {modality} limit of 0 in --limit-mm-per-prompt), and the "
                    f"conversation holds {count}. The upload panels still show what the model would see; "
                    "clear them and start a new chat to go on in text.",
                    reason="limit", modality=modality, count=count, allowed=0,
                )
            raise MediaRefused(
                f"This engine accepts at most {allowed} {modality} item(s) per request "
                f"(limit_mm_per_prompt), the conversation holds {count}.",
                reason="limit", modality=modality, count=count, allowed=allowed,
            )
    return summary


def read_media_bytes(url: str) -> bytes:
    """Bytes of a ``data:`` URL, a ``file://`` URL or a local path."""
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        try:
            if header.endswith(";base64"):
                return base64.b64decode(payload, validate=False)
            return urllib.parse.unquote_to_bytes(payload)
        except (binascii.Error, ValueError) as exc:
            raise TurnRejected(f"a media data: URL is not valid base64 ({exc})") from exc
    if url.startswith("file://"):
        path = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
    elif "://" in url:
        raise TurnRejected(f"in-process mode reads local files and data: URLs only, got {url[:60]}")
    else:
        path = Path(url)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TurnRejected(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not data:
        raise TurnRejected(f"{path.name} is empty (0 bytes)")
    return data


def _part_url(part: dict[str, Any], key: str) -> str:
    value = part.get(key)
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str) or not value:
        raise TurnRejected(f"a {part.get('type')} part has no url")
    return value


def probe_video_fps(data: bytes) -> float:
    """Frame rate of an encoded video (PyAV); refuses files without a video stream."""
    import av

    try:
        with av.open(io.BytesIO(data)) as container:
            if not container.streams.video:
                raise TurnRejected("the video file has no video stream")
            rate = container.streams.video[0].average_rate
            return float(rate) if rate else 25.0
    except TurnRejected:
        raise
    except Exception as exc:
        raise TurnRejected(f"cannot open the video: {exc}") from exc


def _load_image(part: dict[str, Any]) -> tuple[Any, str]:
    from PIL import Image

    if part.get("type") == "image_pil":
        image = part.get("image_pil")
        if not isinstance(image, Image.Image):
            raise TurnRejected("an image_pil part holds no PIL image")
        image = image.convert("RGB")
        digest = hashlib.sha256(image.tobytes() + repr(image.size).encode()).hexdigest()
        return image, digest
    data = read_media_bytes(_part_url(part, "image_url"))
    try:
        image = vllm_compat.load_image_bytes(data)  # as the inspector loads it
    except Exception as exc:
        raise TurnRejected(f"cannot read the image: {exc}") from exc
    return image, hashlib.sha256(data).hexdigest()


def _load_audio(part: dict[str, Any]) -> tuple[Any, str]:
    from vllm.multimodal.media.audio import AudioMediaIO

    if part.get("type") == "input_audio":
        payload = part.get("input_audio") or {}
        encoded = payload.get("data") if isinstance(payload, dict) else None
        if not encoded:
            raise TurnRejected("an input_audio part has no data")
        try:
            data = base64.b64decode(encoded)
        except (binascii.Error, ValueError) as exc:
            raise TurnRejected(f"input_audio data is not valid base64 ({exc})") from exc
    else:
        data = read_media_bytes(_part_url(part, "audio_url"))
    try:
        audio, rate = AudioMediaIO().load_bytes(data)
    except Exception as exc:
        raise TurnRejected(f"cannot decode the audio: {exc}") from exc
    return (np.asarray(audio), float(rate)), hashlib.sha256(data).hexdigest()


def _load_video(part: dict[str, Any]) -> tuple[Any, str]:
    from vllm.multimodal.media.base import MediaWithBytes

    data = read_media_bytes(_part_url(part, "video_url"))
    fps = probe_video_fps(data)
    frames = np.zeros(_STANDIN_FRAMES_SHAPE, dtype=np.uint8)
    return MediaWithBytes((frames, {"fps": fps}), data), hashlib.sha256(data).hexdigest()


_LOADERS = {"image": _load_image, "audio": _load_audio, "video": _load_video}
_UUID_PART = {"image": "image_url", "audio": "input_audio", "video": "video_url"}


def prepare_messages(messages: list[dict[str, Any]], limits: dict[str, int] | None) -> PreparedMessages:
    """Validate limits, load every media item (blocking I/O: run in a thread)."""
    counts = check_media_limits(messages, limits)
    prepared = PreparedMessages(messages=[], counts=counts)
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            prepared.messages.append(dict(message))
            continue
        parts: list[Any] = []
        for part in content:
            modality = modality_of(part) if isinstance(part, dict) else None
            if modality is None:
                parts.append(part)
                continue
            item, digest = _LOADERS[modality](part)
            prepared.mm_data.setdefault(modality, []).append(item)
            prepared.mm_uuids.setdefault(modality, []).append(digest)
            kind = _UUID_PART[modality]
            parts.append({"type": kind, kind: None, "uuid": digest})
        prepared.messages.append({**message, "content": parts})
    return prepared
