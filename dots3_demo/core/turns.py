"""The one turn builder (no Gradio): media, their plans, the budget, the sampling, the conversation so far and the
tools → the engine request (:class:`~dots3_demo.engine.protocol.TurnRequest`). The chat, compare, ``app.py eval``
and ``app.py smoke`` build every request here, so a feature that touches the request is written once.

* :func:`panel_media` / :func:`new_media` — the upload panels' media with the inspector's numbers (what a turn
  sends and what its figures line checks the engine's counts against);
* :func:`user_message` — one user turn as the engine gets it: the media first, then the text;
* :func:`build_turn` — the request: the system prompt (none when blank), the messages, the tools, the sampling
  and the video budget (``TurnRequest.mm_processor_kwargs``);
* :func:`engine_start` — a turn waiting for the engine to load, with the load stage to show meanwhile;
* :func:`asked_ahead` — a turn's engine stream with its first delta asked for at once, so the request reaches the
  engine while the page is sent the step before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

from dots3_demo.core.records import MediaItem
from dots3_demo.core.state import ChatSession, StudioState
from dots3_demo.engine.protocol import ChatEngine, EngineStatus, SamplingSettings, TurnRequest
from dots3_demo.inspection.video import VideoSettings

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
MEDIA_PARTS = {"image": "image_url", "audio": "audio_url", "video": "video_url"}  # a MediaItem's kind → its part
START_WAIT_UPDATE_S = 1.0  # how often a turn waiting for the engine to load shows the load stage
T = TypeVar("T")
_ENDED = object()  # the first ask found the stream empty


def panel_media(studio: StudioState) -> list[MediaItem]:
    """The media in the upload panels, with the inspector's numbers."""
    items: list[MediaItem] = []
    if studio.video_path:
        report = studio.video
        items.append(MediaItem("video", str(studio.video_path),
                               tokens=report.prompt_tokens if report else 0,
                               frame_tokens=report.image_pad_tokens if report else 0,
                               audio_tokens=report.audio_pad_tokens if report else 0))
    for path, image in studio.images:
        items.append(MediaItem("image", str(path), tokens=image.tokens))
    if studio.audio_path:
        items.append(MediaItem("audio", str(studio.audio_path), tokens=studio.audio.tokens if studio.audio else 0))
    return items


def new_media(studio: StudioState, session: ChatSession) -> list[MediaItem]:
    """Panel media not yet in the conversation (an upload is sent once, then stays in the history)."""
    sent = {(m.kind, m.path) for m in session.media}
    return [m for m in panel_media(studio) if (m.kind, m.path) not in sent]


def user_message(text: str, media: Sequence[MediaItem]) -> dict[str, Any]:
    """One user turn as the engine gets it: the media first (as URL parts: a path, ``file://`` or ``data:``),
    then the text (none when empty)."""
    parts: list[dict[str, Any]] = [{"type": MEDIA_PARTS[m.kind], MEDIA_PARTS[m.kind]: {"url": m.path}} for m in media]
    if text:
        parts.append({"type": "text", "text": text})
    return {"role": "user", "content": parts}


def build_turn(*, session_id: str, messages: Sequence[Mapping[str, Any]] = (), system: str = "",
               tools: Sequence[Mapping[str, Any]] = (), sampling: SamplingSettings | None = None,
               video: VideoSettings | None = None, tool_choice: str = "auto") -> TurnRequest:
    """The engine request for one turn: ``system`` (sent as a system message unless blank) before ``messages`` (the
    conversation so far, the new user turn last), ``tools`` (OpenAI function schemas; ``tool_choice`` "required":
    one call of them, forced), ``sampling`` (``None``: the defaults) and ``video``, the budget the engine plans
    the video with (``None``: vLLM's defaults). A new request id, which names ``session_id``."""
    head = [{"role": "system", "content": system}] if system.strip() else []
    return TurnRequest(session_id=session_id, messages=head + [dict(m) for m in messages],
                       tools=[dict(t) for t in tools], sampling=sampling or SamplingSettings(), video=video,
                       tool_choice=tool_choice)


def loading_line(status: EngineStatus) -> str:
    """"loading weights · 23 s" for an engine that is loading ("" otherwise)."""
    if status.state != "loading":
        return ""
    elapsed = f"{time.monotonic() - status.since:.0f} s" if status.since is not None else ""
    return " · ".join(part for part in (status.stage or "starting", elapsed) if part)


async def engine_start(engine: ChatEngine) -> AsyncGenerator[str, None]:
    """Start the engine (or join its start), yielding its load stage every :data:`START_WAIT_UPDATE_S` while it
    loads; raises ``EngineUnavailable`` when it cannot start. The start belongs to the engine: closing this (a Stop,
    a closed tab) only stops waiting, never the load."""
    starting = asyncio.ensure_future(engine.start())
    while True:
        done, _ = await asyncio.wait({starting}, timeout=START_WAIT_UPDATE_S)
        if done:
            starting.result()
            return
        yield loading_line(engine.status) or "starting"


@contextlib.asynccontextmanager
async def asked_ahead(stream: AsyncGenerator[T, None]) -> AsyncIterator[AsyncGenerator[T, None]]:
    """``stream``'s items, the first asked for at once in a task of its own: an engine's ``stream_turn`` renders the
    prompt and hands vLLM the request while the caller is still suspended at a yield (Gradio post-processes and sends
    a streamed step before it asks for the next; the chat's "⏳ sending…" step took ~5 ms of the event loop here,
    one after another for replies started together, and every request waited for its own).

    Leaving the block closes ``stream`` — for an engine, aborting its request (a Stop, a closed tab) — after
    cancelling the ask if it still waits. A cancel of the caller while it awaits the first item cancels the ask too
    (awaiting a task passes its cancel on), so the request is aborted as it would be without the task."""

    async def first_item() -> Any:
        try:
            return await anext(stream)
        except StopAsyncIteration:  # a task cannot raise it to its awaiter
            return _ENDED

    first = asyncio.create_task(first_item())

    async def items() -> AsyncGenerator[T, None]:
        item = await first
        if item is _ENDED:
            return
        yield item
        async for item in stream:
            yield item

    rest = items()
    try:
        yield rest
    finally:
        await rest.aclose()
        if not first.done():
            first.cancel()
            await asyncio.wait({first})
        if not first.cancelled():
            first.exception()  # retrieved: an error nobody awaited (closed before the first item) is not logged as lost
        await stream.aclose()
