"""What the workbench's parts share, typed once: a reply as it ended (:class:`Answer`) and one compare
round (:class:`CompareRound`: the same media and question under settings A and B).

The chat (``ui.state.ChatSession``: its ``answers`` and ``ratings``), compare, the session record (zip and HTML)
and batch evaluation all carry these from where they are born to where they are shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dots3_demo.budget import VideoSettings
from dots3_demo.engine.protocol import SamplingSettings, ToolCall, TurnStats

if TYPE_CHECKING:
    from dots3_demo.ui.state import MediaItem  # ui.state holds this module's Answer and ReplyRating

Verdict = Literal["up", "down"]
Side = Literal["A", "B"]
Preference = Literal["A", "B", "tie"]


@dataclass(frozen=True)
class Answer:
    """One reply as it ended (or as far as it got: ``finish_reason`` None = stopped or failed)."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    stats: TurnStats | None = None  # the per-reply figures (TTFT, tokens/s, prompt tokens by modality)
    error: str = ""  # one line when the reply failed (the engine refused it, …); "" = none


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
class CompareSetting:
    """What one side of a compare round is answered under."""

    video: VideoSettings
    sampling: SamplingSettings
    system_prompt: str | None = None  # None: the chat's system prompt


@dataclass(frozen=True)
class CompareSide:
    side: Side
    setting: CompareSetting
    answer: Answer | None = None  # None: preview (plans only), or not run yet
    verdict: Verdict | None = None  # 👍 / 👎
    note: str = ""


@dataclass(frozen=True)
class CompareRound:
    """One turn answered under two settings, side by side, and what the researcher judged of it."""

    question: str
    media: tuple[MediaItem, ...]
    a: CompareSide
    b: CompareSide
    preset: str = ""  # the preset it came from ("" = set by hand)
    preference: Preference | None = None  # "A better" / "B better" / "tie"
