"""What the UI talks to: one engine interface, two adapters (in-process vLLM, remote endpoint).

A Gradio chat callback builds a :class:`TurnRequest`, iterates ``engine.stream_turn(turn)`` and
renders each :class:`TurnDelta`. Cancelling the callback (Stop button, tab closed) closes that
async generator; every adapter aborts the request in a ``finally`` so the GPU is freed.

A tool call is a :class:`ToolCall` (defined with the tool-call parser in ``dots3_demo.tools.calls``,
re-exported here: the engine layer sits above the tools layer) from the parser to the tool panel.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from dots3_demo.budget import VideoSettings
from dots3_demo.engine.promptview import PromptView
from dots3_demo.tools.calls import ToolCall as ToolCall
from dots3_demo.tools.calls import ToolCallStatus as ToolCallStatus

EngineState = Literal["idle", "loading", "ready", "failed", "stopped"]


class TurnRejected(ValueError):
    """A turn refused before anything was sent to the engine; the message is user-facing."""


class EngineUnavailable(RuntimeError):
    """The engine is not ready (still loading, failed, or shut down); the message says which."""


CONTEXT_HINT = ("Clear the chat or shorten the conversation, lower max tokens in Sampling, or for a video "
                "lower seq in the Budget tab.")

# How many replies a server (``engine.remote``) is sent at once: the chat's concurrency, and app.py eval's
# --max-concurrency default. A server does not publish its max_num_seqs (not in /v1/models, nor in /metrics, which
# carries the cache config only), and a router hides how many servers stand behind it: 16 is below vLLM's default
# max_num_seqs on every platform (128 on CPU, 256 or 1024 on a GPU), so no request waits in a lone server's queue
# and its TTFT is the server's own.
DEFAULT_REMOTE_CAPACITY = 16


class RequestRefused(TurnRejected):
    """The engine or server refused a request it was sent (a 400, a prompt over the context length).

    Not an engine failure: the message says what was refused and what to change, in plain words.
    """


@dataclass(frozen=True)
class StructuredOutputs:
    """Decoding held to a shape by vLLM's structured outputs (``StructuredOutputsParams``; a server's request field
    ``structured_outputs``): ``choice``, the reply is exactly one of these strings."""

    choice: tuple[str, ...]


@dataclass(frozen=True)
class SamplingSettings:
    """Per-turn sampling, mirrored onto vLLM ``SamplingParams`` / the OpenAI request."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = -1  # -1 (or 0): disabled
    max_tokens: int = 1024
    seed: int | None = None
    repetition_penalty: float = 1.0
    structured_outputs: StructuredOutputs | None = None  # None: free text (an eval item's sampling may force it)


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
    video: VideoSettings | None = None  # the Budget tab's video budget; None: vLLM's defaults
    tool_choice: str = "auto"  # "required": one call of ``tools``, forced by structured outputs
    request_id: str = ""

    def __post_init__(self) -> None:
        if not self.request_id:
            self.request_id = new_request_id(self.session_id)

    def mm_processor_kwargs(self) -> dict[str, Any]:
        """vLLM's per-request ``mm_processor_kwargs`` for this turn: the video budget, planned for the
        reply's max tokens (both adapters send this; the Dots processor reads it)."""
        max_tokens = int(self.sampling.max_tokens)
        if self.video is None:
            return {"max_new_tokens": max_tokens}
        return self.video.mm_processor_kwargs(max_new_tokens=max_tokens)


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
    by_modality: bool = True  # False: only ``total`` is known (an OpenAI server reports no split)


# ---------------------------------------------------------------- the request as sent (issue 21 §3)
DEFAULT_BASE_URL = "http://localhost:8000/v1"  # ``vllm serve``'s own default, for a request made in-process


@dataclass(frozen=True)
class SentMedia:
    """One media part of the request: its kind, its URL as copied and its size in bytes (None: not a local file)."""

    kind: str
    url: str
    size: int | None = None


@dataclass(frozen=True)
class ChatRequest:
    """One turn's chat-completions request, as ``engine.wire.chat_request`` builds it (``engine.wire`` writes it as
    JSON, ``curl`` and Python). The JSON parts are kept as text: the request never changes once built, and a frozen
    copy is safe to hold in a session."""

    model: str
    messages_json: str  # the messages, local media as file:// URLs
    params_json: str  # OpenAI's own fields besides model and messages: sampling, tools, tool_choice
    extra_json: str  # vLLM's own fields (the openai client's ``extra_body``)
    media: tuple[SentMedia, ...] = ()
    endpoint: str | None = None  # the server it went to (remote mode); None: made in-process

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(json.loads(self.messages_json))

    @property
    def params(self) -> dict[str, Any]:
        return dict(json.loads(self.params_json))

    @property
    def extra(self) -> dict[str, Any]:
        return dict(json.loads(self.extra_json))

    @property
    def base_url(self) -> str:
        return self.endpoint or DEFAULT_BASE_URL

    def body(self) -> dict[str, Any]:
        """The HTTP body, as the server reads it (the client's ``extra_body`` merged in)."""
        return {"model": self.model, "messages": self.messages, **self.params, **self.extra}

    def openai_kwargs(self, messages: list[dict[str, Any]], *, stream: bool) -> dict[str, Any]:
        """Keyword arguments of ``client.chat.completions.create`` for this request, with ``messages`` (the
        remote adapter's: media inlined) and, streamed, the usage on every chunk."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, **self.params}
        if stream:
            kwargs.update(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True})
        kwargs["extra_body"] = self.extra
        return kwargs


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
    # The two limits a ``length`` finish can be: the request's max tokens, and the engine's context
    # (``--max-model-len``; a server's, from its ``/v1/models``). None: not known (a record made before).
    max_tokens: int | None = None
    max_model_len: int | None = None
    # The prompt as the engine got it, token by token (``engine.promptview``); None: not known (a record made before)
    prompt_view: PromptView | None = None
    # The request as sent (``engine.wire``), to copy; runtime only (compare=False: not in a record, whose transcript
    # holds the conversation already)
    request: ChatRequest | None = field(default=None, compare=False)

    def snapshot(self) -> TurnStats:
        """A copy a delta can carry while the adapter keeps updating its own (both adapters use it)."""
        prompt = replace(self.prompt) if self.prompt is not None else None
        return replace(self, prompt=prompt, mtp=dict(self.mtp) if self.mtp else None)


@dataclass
class TurnDelta:
    """What changed since the previous delta of the same turn (text is incremental)."""

    request_id: str
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()  # all calls so far ("writing" while the model writes one)
    writing_tool_call: bool = False  # a tool-call block is open (nothing parsed from it yet)
    finished: bool = False
    finish_reason: str | None = None
    stats: TurnStats = field(default_factory=TurnStats)
    notices: tuple[str, ...] = ()  # plain-words notes on how the request was served (shown once)


@dataclass(frozen=True)
class EngineStatus:
    """What the engine is doing, for the status line, the header and ``/readyz``.

    ``since`` is the ``time.monotonic()`` of the last state change (loading: when the load began);
    ``stage`` the load stage seen last (e.g. "loading weights"); ``details`` the engine's own last
    log lines when it failed to start or died (shown in a fold, never as the message).
    """

    state: EngineState
    message: str = ""
    since: float | None = None
    stage: str = ""
    details: tuple[str, ...] = ()


@runtime_checkable
class ChatEngine(Protocol):
    """The engine as the UI sees it: every hook the UI and the health routes use, and nothing else.

    ``InProcessEngine`` (``engine.inprocess``) and ``RemoteEngine`` (``engine.remote``) implement it.
    """

    @property
    def status(self) -> EngineStatus: ...

    @property
    def capacity(self) -> int:
        """How many sequences the engine runs at once (use it as the chat event's concurrency)."""
        ...

    @property
    def max_model_len(self) -> int | None: ...

    @property
    def mm_limits(self) -> dict[str, int] | None:
        """Media items per request by modality, when known (None: unknown, the engine will say)."""
        ...

    async def start(self) -> None:
        """Build/connect on the running loop. Idempotent; concurrent callers share one start."""
        ...

    def stream_turn(self, turn: TurnRequest) -> AsyncGenerator[TurnDelta, None]:
        """Generate one turn. Raises TurnRejected before sending, EngineUnavailable if not ready.

        Closing the generator before its last delta (``aclose()``: Stop, tab closed) aborts the request.
        """
        ...

    @property
    def label(self) -> str:
        """What the engine is, for the header and the status line (e.g. "in-process vLLM")."""
        ...

    @property
    def model(self) -> str | None:
        """The model it serves, for ``/healthz``: ``--model`` in-process, the server's model name
        when remote (None: not known yet)."""
        ...

    async def abort(self, request_id: str) -> None: ...

    def unfinished_requests(self) -> int | None:
        """Requests the engine still holds (None: this backend cannot tell, e.g. a remote server)."""
        ...

    async def shutdown(self) -> None: ...
