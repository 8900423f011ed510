"""What the workbench's parts share, typed once: a reply as it ended (:class:`Answer`) and one compare
round (:class:`CompareRound`: the same media and question under settings A and B).

The chat (``ui.state.ChatSession`` with its ``ReplyRating``), compare, the session record (zip and HTML)
and batch evaluation all carry these from where they are born to where they are shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dots3_demo.budget import VideoSettings
from dots3_demo.engine.protocol import SamplingSettings, ToolCall, TurnStats
from dots3_demo.ui.state import MediaItem, Verdict

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
