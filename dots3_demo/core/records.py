"""What the workbench's parts share, typed once: what a reply ran with (:class:`TurnSetting`), a reply as it
ended (:class:`Answer`, with its setting) and one compare round (:class:`CompareRound`: the same media and question
under settings A and B, with each side's plan).

The chat (``core.state.ChatSession``: its ``answers`` and ``ratings``), compare, the session record (zip and HTML)
and batch evaluation all carry these from where they are born to where they are shown.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from dots3_demo.budget import VideoSettings
from dots3_demo.engine.protocol import SamplingSettings, ToolCall, TurnRequest, TurnStats

Verdict = Literal["up", "down"]
Side = Literal["A", "B"]
Preference = Literal["A", "B", "tie"]


@dataclass(frozen=True)
class MediaItem:
    """One upload attached to a user turn, with the inspector's token counts for it."""

    kind: str  # "image" | "audio" | "video"
    path: str
    tokens: int = 0  # image / audio: embeddings; video: the whole expanded span
    frame_tokens: int = 0  # video only: image pads
    audio_tokens: int = 0  # video only: audio pads (0 = sound track dropped)


@dataclass(frozen=True)
class TurnSetting:
    """What one reply is generated under: a chat reply (the settings when it was sent) or one side of a compare
    round. ``video`` is the budget the engine planned the video with; its ``max_new_tokens`` mirrors the
    sampling's max tokens where the request did so (compare), else it is the Budget tab's."""

    video: VideoSettings
    sampling: SamplingSettings
    system_prompt: str | None = None  # None: the chat's system prompt ("" = none)
    tool_choice: str = "auto"  # the chat's tool choice ("required": one call of the tools); compare sends no tools


def turn_setting(turn: TurnRequest) -> TurnSetting:
    """What ``turn`` is generated under, read from the request as sent: its sampling, its video budget with the
    max new tokens the engine plans the video with (``TurnRequest.mm_processor_kwargs``: the request's max
    tokens), its system message ("" = none) and tool choice."""
    video = turn.video if turn.video is not None else VideoSettings()
    first = turn.messages[0] if turn.messages else {}
    system = first.get("content") if first.get("role") == "system" else ""
    return TurnSetting(video=replace(video, max_new_tokens=int(turn.sampling.max_tokens), problem=""),
                       sampling=turn.sampling, system_prompt=system if isinstance(system, str) else "",
                       tool_choice=turn.tool_choice)


@dataclass(frozen=True)
class Answer:
    """One reply as it ended (or as far as it got: ``finish_reason`` None = stopped or failed)."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    stats: TurnStats | None = None  # the per-reply figures (TTFT, tokens/s, prompt tokens by modality)
    error: str = ""  # one line when the reply failed (the engine refused it, …); "" = none
    setting: TurnSetting | None = None  # what it ran with; None: not recorded (a record of format version 1)


@dataclass(frozen=True)
class ReplyRating:
    """A researcher's judgement of one chat reply: 👍/👎 and a free-text note (part of the session record).

    ``reply`` numbers the conversation's replies: the k-th assistant message of ``ChatSession.messages``
    (0-based; a reply that called tools and the reply after the tool result are two replies).
    """

    reply: int
    verdict: Verdict | None = None
    note: str = ""


@dataclass(frozen=True)
class PlanFigures:
    """The numbers a compare side's plan shows, all from its inspection (the upload panels under the side's video
    budget); kept in the round, so a past round's plan reads again without inspecting anything."""

    frames: int
    fps: float
    patch_cap: int
    frame_size: tuple[int, int]  # (w, h) of the frames vLLM produced
    text: int  # media tokens by modality: the video's timestamps and tags, …
    image: int  # … frames and images, …
    audio: int  # … the video's sound track and audio clips
    reserve: int
    seq: int
    sound_kept: bool
    sound: str  # the inspector's reason the video's sound track is in the prompt or not ("" = no video)
    chosen_scale: float = 1.0  # the solver's frame scale

    @property
    def media(self) -> int:
        return self.text + self.image + self.audio

    @property
    def free(self) -> int:
        return self.seq - self.reserve - self.media


@dataclass(frozen=True)
class CompareSide:
    side: Side
    setting: TurnSetting
    answer: Answer | None = None  # None: preview (plans only), or not run yet
    verdict: Verdict | None = None  # 👍 / 👎
    note: str = ""
    plan: PlanFigures | None = None  # the side's plan; None: it could not be planned (``plan_error``), or a record
    # of format version 1 (which kept no plan per side)
    plan_media: tuple[MediaItem, ...] = ()  # the panels' media with this side's inspector numbers
    plan_error: str = ""  # one line: why the side could not be planned ("" = it was)


@dataclass(frozen=True)
class CompareRound:
    """One turn answered under two settings, side by side, and what the researcher judged of it."""

    question: str
    media: tuple[MediaItem, ...]
    a: CompareSide
    b: CompareSide
    preset: str = ""  # the preset it came from ("" = set by hand)
    preference: Preference | None = None  # "A better" / "B better" / "tie"
