"""What the UI talks to: one engine interface, two adapters (in-process vLLM, remote endpoint).

A Gradio chat callback builds a :class:`TurnRequest`, iterates ``engine.stream_turn(turn)`` and
renders each :class:`TurnDelta`. Cancelling the callback (Stop button, tab closed) closes that
async generator; every adapter aborts the request in a ``finally`` so the GPU is freed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

EngineState = Literal["idle", "loading", "ready", "failed", "stopped"]


class TurnRejected(ValueError):
    """A turn refused before anything was sent to the engine; the message is user-facing."""


class EngineUnavailable(RuntimeError):
    """The engine is not ready (still loading, failed, or shut down); the message says which."""


@dataclass(frozen=True)
class SamplingSettings:
    """Per-turn sampling, mirrored onto vLLM ``SamplingParams`` / the OpenAI request."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = -1  # -1 (or 0): disabled
    max_tokens: int = 1024
    seed: int | None = None
    repetition_penalty: float = 1.0


@dataclass(frozen=True)
class VideoBudget:
    """The Dots video planner's per-request knobs (``mm_processor_kwargs``). None = vLLM default."""

    seq: int | None = None
    output_reserve: int | None = None
    audio_cap: float | None = None
    k_mode: str | None = None  # eval_ek | eval30 | whole | logk


@dataclass
class TurnRequest:
    """One assistant turn to generate.

    ``messages`` are OpenAI chat messages. Media parts may use ``data:`` URLs, ``file://`` URLs
    or plain local paths: ``{"type": "image_url", "image_url": {"url": ...}}``,
    ``{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"}}``,
    ``{"type": "audio_url", "audio_url": {"url": ...}}``,
    ``{"type": "video_url", "video_url": {"url": ...}}``. Assistant messages may carry
    ``tool_calls`` and ``tool`` messages ``tool_call_id`` (the tool-result round trip).
    """

    session_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    video: VideoBudget = field(default_factory=VideoBudget)
    request_id: str = ""

    def __post_init__(self) -> None:
        if not self.request_id:
            self.request_id = new_request_id(self.session_id)


def new_request_id(session_id: str) -> str:
    """A unique engine request id that still tells which session it belongs to."""
    return f"{session_id}-{uuid.uuid4().hex}"


@dataclass
class PromptTokens:
    """Prompt tokens by modality, counted on the token ids the engine received."""

    total: int = 0
    text: int = 0
    image: int = 0
    audio: int = 0
    video: int = 0  # all tokens the video expanded into (frames + its sound track + markers)
    video_frames: int = 0  # image pad tokens inside the video
    video_audio: int = 0  # audio pad tokens inside the video (0 = the sound track was dropped)
    cached: int | None = None  # prefix-cache hits, when the engine reports them


@dataclass
class TurnStats:
    """Numbers for the UI. ``None`` = not known (yet, or not reported by this backend)."""

    ttft_s: float | None = None
    tokens_per_s: float | None = None
    output_tokens: int = 0
    prompt: PromptTokens | None = None
    mtp: dict[str, Any] | None = None  # vLLM's spec-decode metrics (acceptance) when reported
    elapsed_s: float = 0.0
    source: str = ""  # "engine" (vLLM RequestOutput) or "server" (OpenAI usage)


@dataclass
class TurnDelta:
    """What changed since the previous delta of the same turn (text is incremental)."""

    request_id: str
    text: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # all calls so far
    writing_tool_call: bool = False  # a tool-call block is open (nothing parsed from it yet)
    finished: bool = False
    finish_reason: str | None = None
    stats: TurnStats = field(default_factory=TurnStats)


@dataclass(frozen=True)
class EngineStatus:
    state: EngineState
    message: str = ""


@runtime_checkable
class ChatEngine(Protocol):
    """The engine as the UI sees it."""

    @property
    def status(self) -> EngineStatus: ...

    @property
    def capacity(self) -> int:
        """How many sequences the engine runs at once (use it as the chat event's concurrency)."""
        ...

    @property
    def max_model_len(self) -> int | None: ...

    async def start(self) -> None:
        """Build/connect on the running loop. Idempotent; concurrent callers share one start."""
        ...

    def stream_turn(self, turn: TurnRequest) -> AsyncIterator[TurnDelta]:
        """Generate one turn. Raises TurnRejected before sending, EngineUnavailable if not ready."""
        ...

    async def abort(self, request_id: str) -> None: ...

    async def shutdown(self) -> None: ...
