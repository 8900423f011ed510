"""A browser session's state (plain dataclasses; no Gradio): what the page's ``gr.State`` keeps between events.

* :class:`StudioState` — the uploads and their inspection reports (``handlers`` fills it, ``views``
  draws it, ``chat`` sends its media);
* :class:`ChatSession` — the conversation (``chat`` streams into it, ``chat_views`` shows it), with
  its :class:`MediaItem` uploads and the :class:`ChatClears` count it shares with every version of it.

The chat, compare and the session record read these; this module imports only the engine's and the
inspector's shapes and :mod:`dots3_demo.core.records`.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from dots3_demo.core.records import Answer, MediaItem, ReplyRating
from dots3_demo.engine.protocol import ToolCall
from dots3_demo.inspection.audio import AudioReport
from dots3_demo.inspection.image import ImageReport
from dots3_demo.inspection.video import VideoReport, VideoSettings


# ---------------------------------------------------------------- the uploads
@dataclass(frozen=True)
class StudioState:
    """One browser session's uploads and their reports (kept in ``gr.State``)."""

    settings: VideoSettings = field(default_factory=VideoSettings)
    video_path: str | None = None
    video: VideoReport | None = None
    images: tuple[tuple[str, ImageReport], ...] = ()
    audio_path: str | None = None
    audio: AudioReport | None = None
    audio_source: str = ""


def initial_state(seq: int) -> StudioState:
    return StudioState(settings=VideoSettings(seq=int(seq)))


# ---------------------------------------------------------------- the conversation
class ChatClears:
    """How many times a browser session's chat was cleared: the one mutable part of its ``ChatSession``,
    shared by every version of it (``replace`` keeps the reference).

    The page sends Clear (``queue=False``) and the cancel of the streaming chat event as two requests, so a
    reply can write one more step after Clear wrote the empty session. A session made before the last
    Clear is ``stale``: its reply stops at its next step (closing it aborts the engine request), and the
    settle step, the last to write the session, shows the cleared conversation instead of it.
    """

    def __init__(self) -> None:
        self._epoch = 0
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        return self._epoch

    def clear(self) -> int:
        """Count one more Clear; the new epoch."""
        with self._lock:
            self._epoch += 1
            return self._epoch

    def __deepcopy__(self, memo: dict[int, Any]) -> ChatClears:
        return self  # one per browser session, whoever copies the session holding it


class SessionMark(NamedTuple):
    """How long a conversation's parts were at one moment: cutting them back to it (``ChatSession.cut``)
    gives the conversation as it was then. A tuple ``(messages, display, tools, media)``: the session
    record (``workbench.record``) keeps marks as such tuples."""

    messages: int
    display: int
    tools: int
    media: int


Mark = tuple[int, int, int, int]  # a SessionMark, or the same four numbers as a plain tuple (an imported record)


@dataclass(frozen=True)
class ChatSession:
    session_id: str
    messages: tuple[dict[str, Any], ...] = ()
    display: tuple[dict[str, Any], ...] = ()
    media: tuple[MediaItem, ...] = ()
    tools: tuple[ToolCall, ...] = ()  # every call of the conversation, as the tool panel shows them
    # (len(messages), len(display), len(tools), len(media)) right after the last user turn was added
    regen_mark: Mark | None = None
    figures: str = ""
    answers: tuple[Answer, ...] = ()  # one per reply (the k-th assistant message), as it ended, with its figures
    ratings: tuple[ReplyRating, ...] = ()  # at most one per reply, in reply order
    reply_marks: tuple[Mark, ...] = ()  # one per reply: the conversation's mark just before it was generated
    epoch: int = 0  # the clears.epoch this conversation belongs to
    clears: ChatClears = field(default_factory=ChatClears, compare=False, repr=False)

    @property
    def stale(self) -> bool:
        """Cleared since this version was made (see ``ChatClears``)."""
        return self.epoch != self.clears.epoch

    @property
    def mark(self) -> SessionMark:
        """The conversation's lengths now."""
        return SessionMark(len(self.messages), len(self.display), len(self.tools), len(self.media))

    @property
    def reply_count(self) -> int:
        """Replies so far: the assistant messages the engine sees."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    def cut(self, mark: Mark) -> ChatSession:
        """The conversation cut back to ``mark``: the replies after it go, with their answers and ratings."""
        at = SessionMark(*mark)
        messages = self.messages[:at.messages]
        kept = sum(1 for m in messages if m.get("role") == "assistant")
        return replace(self, messages=messages, display=self.display[:at.display], tools=self.tools[:at.tools],
                       media=self.media[:at.media], answers=self.answers[:kept],
                       ratings=tuple(r for r in self.ratings if r.reply < kept), reply_marks=self.reply_marks[:kept])


def new_session() -> ChatSession:
    """A fresh session (``gr.State(new_session)`` calls this once per browser session)."""
    return ChatSession(session_id=uuid.uuid4().hex[:12])


def clear_session(session: ChatSession) -> ChatSession:
    """The empty conversation after a Clear (a reply still streaming for the old one stops)."""
    return ChatSession(session_id=session.session_id, epoch=session.clears.clear(), clears=session.clears)


def current_session(session: ChatSession) -> ChatSession:
    """``session``, or the empty conversation of the last Clear when it was cleared since it was made."""
    if not session.stale:
        return session
    return ChatSession(session_id=session.session_id, epoch=session.clears.epoch, clears=session.clears)
