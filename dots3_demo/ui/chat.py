"""The engine chat's turns and their streaming: plain functions and dataclasses (no Gradio), called by
``ui.app`` and by tests. The session it streams into is in ``ui.state``; what the page shows of it (the
engine line, bubbles, tool panel, figures line, tools editor) is in ``ui.chat_views``.

One browser session owns one :class:`ChatSession` (kept in ``gr.State``; a new uuid per session).
It holds two views of the same conversation:

* ``messages`` — the OpenAI chat messages the engine gets (user turns carry the media that was in
  the upload panels when they were sent; assistant turns carry ``tool_calls``; tool results are
  ``tool`` messages with ``tool_call_id``);
* ``display`` — the Chatbot's messages (media as file blocks, collapsible "Thinking" and
  "🛠 tool" bubbles, notices).

``send_message`` / ``send_tool_results`` / ``regenerate`` are async generators of
:class:`ChatView`: each is a complete, immutable snapshot, so a Stop (task cancelled) or a closed
tab (``GeneratorExit`` at a yield) leaves the session at the last snapshot. The engine stream is
wrapped in ``aclosing`` at every level (callers must do the same when they relay these
generators): whichever way the generator ends early, the engine adapter's ``finally`` aborts the
request at once rather than when the garbage collector finalizes an abandoned generator. Yields
are coalesced to at most one per interval — the app's :class:`~dots3_demo.ui.pacing.StreamPacer`
shares an update budget among the replies in flight; structural changes (first text, a tool call
appearing or completing, the end) are always yielded at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dots3_demo.engine.media import check_media_limits
from dots3_demo.engine.protocol import (
    ChatEngine,
    EngineUnavailable,
    RequestRefused,
    SamplingSettings,
    ToolCall,
    TurnDelta,
    TurnRejected,
    TurnRequest,
    TurnStats,
)
from dots3_demo.tools import ToolSchemaError, parse_tools_json, run_example_tool
from dots3_demo.tools.forcing import TOOL_CHOICES
from dots3_demo.ui import chat_views, views
from dots3_demo.ui.handlers import control_number
from dots3_demo.ui.pacing import MIN_INTERVAL_S, StreamPacer
from dots3_demo.ui.state import ChatSession, MediaItem, SessionMark, StudioState
from dots3_demo.workbench.records import Answer, ReplyRating, TurnSetting, Verdict, turn_setting

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class ChatSettings:
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    tools_json: str = ""
    min_interval_s: float = MIN_INTERVAL_S  # without a pacer
    problem: str = ""  # a control that is not a usable number: every turn is refused with this message
    pacer: StreamPacer | None = None  # the app's: update intervals shared among the replies in flight
    tool_choice: str = "auto"  # "required": the reply is one call of the tools, forced by structured outputs


def settings_from_controls(system_prompt: str | None, tools_json: str | None, temperature: float, top_p: float,
                           top_k: float | str | None, max_tokens: float, seed: float | str | None,
                           repetition_penalty: float, tool_choice: str | None = "auto", *,
                           min_interval_s: float = MIN_INTERVAL_S) -> ChatSettings:
    """The chat's controls as settings. ``seed`` < 0 or empty = random; ``top_k`` ≤ 0 or empty = off.

    Never raises: an emptied number box or a value that is not a number (an API call can send
    ``null`` or NaN) gives settings whose ``problem`` says which control, and the turn is refused.
    """
    problems: list[str] = []
    seed_number = None if seed is None or seed == "" else control_number(seed, "seed", -1, problems)
    top_k_number = 0 if top_k is None or top_k == "" else control_number(top_k, "top-k", 0, problems)
    sampling = SamplingSettings(
        temperature=control_number(temperature, "temperature", 0.7, problems),
        top_p=control_number(top_p, "top-p", 0.95, problems),
        top_k=int(top_k_number) if top_k_number > 0 else -1,
        max_tokens=max(1, int(control_number(max_tokens, "max tokens", 1024, problems))),
        seed=None if seed_number is None or seed_number < 0 else int(seed_number),
        repetition_penalty=control_number(repetition_penalty, "repetition penalty", 1.0, problems),
    )
    problem = f"Check the Sampling panel: {'; '.join(problems)}." if problems else ""
    choice = tool_choice if tool_choice in TOOL_CHOICES else "auto"
    return ChatSettings(system_prompt=system_prompt or "", tools_json=tools_json or "", sampling=sampling,
                        min_interval_s=min_interval_s, problem=problem, tool_choice=choice)


def _refused_settings(session: ChatSession, settings: ChatSettings) -> ChatView | None:
    """The session unchanged with the settings' problem, or None when the settings are usable."""
    if not settings.problem:
        return None
    return said(session, f"⚠ {views.esc(settings.problem)}")


@dataclass(frozen=True)
class ChatView:
    """One UI update: the session (history inside), the figures line, the tool panel rows.

    ``figures`` is the line to show now; the session's own ``figures`` is the line to show once the event
    ends here — the same for the last view, and for a reply still streaming the line of that reply stopped
    where it stands (``⏹ stopped …``), which the settle step shows after a Stop."""

    session: ChatSession
    figures: str
    clear_input: bool = False
    done: bool = False

    @property
    def history(self) -> list[dict[str, Any]]:
        return list(self.session.display)

    @property
    def tool_rows(self) -> list[list[str]]:
        return chat_views.tool_rows(self.session)


def said(session: ChatSession, line: str, *, clear_input: bool = False) -> ChatView:
    """The last view of an event that ends by saying ``line`` on the figures line (the session keeps it)."""
    return ChatView(replace(session, figures=line), line, clear_input=clear_input, done=True)


# ---------------------------------------------------------------- media and turns
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


def _media_part(item: MediaItem) -> dict[str, Any]:
    key = {"image": "image_url", "audio": "audio_url", "video": "video_url"}[item.kind]
    return {"type": key, key: {"url": item.path}}


def user_turn(text: str, media: list[MediaItem]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(engine message, chatbot messages) for one user turn: media first, then the text."""
    parts = [_media_part(m) for m in media]
    if text:
        parts.append({"type": "text", "text": text})
    shown = [{"role": "user", "content": {"path": m.path, "alt_text": views.name_of(m.path)}} for m in media]
    if text:
        shown.append({"role": "user", "content": text})
    return {"role": "user", "content": parts}, shown


# ---------------------------------------------------------------- the streaming assistant
@dataclass
class _Reply:
    reasoning: str = ""
    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    writing: bool = False  # a tool-call block is open, nothing parsed from it yet
    finished: bool = False
    finish_reason: str | None = None
    stats: TurnStats = field(default_factory=TurnStats)
    first_at: float | None = None
    notices: tuple[str, ...] = ()

    def add(self, delta: TurnDelta) -> bool:
        """Apply a delta; True when something structural changed (yield it at once)."""
        structural = bool(delta.notices)
        self.notices += delta.notices
        if (delta.text or delta.reasoning) and not (self.text or self.reasoning):
            structural = True
        if delta.text and not self.text and self.reasoning:
            structural = True  # thinking done
        self.reasoning += delta.reasoning
        self.text += delta.text
        if len(delta.tool_calls) != len(self.calls) or delta.writing_tool_call != self.writing:
            structural = True
        if delta.tool_calls or delta.finished:
            self.calls = delta.tool_calls
        self.writing = delta.writing_tool_call
        self.stats = delta.stats
        if delta.finished:
            self.finished, self.finish_reason, self.writing, structural = True, delta.finish_reason, False, True
        return structural

    def size(self) -> int:
        """Characters the chat re-renders on each update of this reply."""
        return len(self.reasoning) + len(self.text) + sum(len(c.arguments) for c in self.calls)

    def engine_message(self) -> dict[str, Any] | None:
        if not (self.text or self.calls):
            return None
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.calls:
            message["tool_calls"] = [c.as_openai() for c in self.calls]
        return message

    def display(self) -> list[dict[str, Any]]:
        shown: list[dict[str, Any]] = [
            {"role": "assistant", "content": text, "metadata": {"title": "ℹ How this request was served",
                                                                  "status": "done"}}
            for text in self.notices
        ]
        if self.reasoning:
            thinking = not self.text and not self.calls and not self.finished
            shown.append({"role": "assistant", "content": self.reasoning,
                          "metadata": {"title": "Thinking", "status": "pending" if thinking else "done"}})
        if self.text:
            shown.append({"role": "assistant", "content": self.text})
        shown += [chat_views.tool_call_bubble(call) for call in self.calls]
        if self.writing:
            shown.append({"role": "assistant", "content": "…",
                          "metadata": {"title": chat_views.WRITING_TOOL_CALL, "status": "pending"}})
        return shown

    def answer(self, setting: TurnSetting, error: str = "") -> Answer:
        """The reply as it stands, as the session records it (``finish_reason`` None until it finishes), with the
        ``setting`` it runs with."""
        return Answer(text=self.text, reasoning=self.reasoning, tool_calls=self.calls, finish_reason=self.finish_reason,
                      stats=self.stats, error=error, setting=setting)

    def records(self) -> tuple[ToolCall, ...]:
        """The reply's calls for the tool panel (a "…" row while a call is begun but not yet parsed)."""
        return self.calls + ((ToolCall(id="", name="…", status="writing"),) if self.writing else ())


# ---------------------------------------------------------------- turns
async def send_message(engine: ChatEngine | None, studio: StudioState, session: ChatSession, message: str | None,
                       settings: ChatSettings) -> AsyncGenerator[ChatView, None]:
    """Send ``message`` with the panel media not yet in the conversation, stream the reply."""
    text = (message or "").strip()
    if engine is None:
        echoed = ({"role": "user", "content": text},) if text else ()
        help_ = ({"role": "assistant", "content": chat_views.ENGINE_HELP},)
        yield ChatView(replace(session, display=session.display + echoed + help_), session.figures,
                       clear_input=True, done=True)
        return
    if (refusal := _refused_settings(session, settings)) is not None:
        yield refusal
        return
    media = new_media(studio, session)
    if not text and not media:
        yield said(session, "Type a message (or upload media) first.")
        return
    user_message, shown = user_turn(text, media)
    sent = replace(session, messages=session.messages + (user_message,), display=session.display + tuple(shown),
                   media=session.media + tuple(media))
    sent = replace(sent, regen_mark=sent.mark)
    async with contextlib.aclosing(_stream_reply(engine, studio, sent, settings, unsent=session)) as views_:
        async for view in views_:
            yield view


async def regenerate(engine: ChatEngine | None, studio: StudioState, session: ChatSession,
                     settings: ChatSettings) -> AsyncGenerator[ChatView, None]:
    """Re-run the last user turn (drops its reply and any tool exchange after it)."""
    if engine is None or session.regen_mark is None:
        yield said(session, "Nothing to regenerate yet.")
        return
    if (refusal := _refused_settings(session, settings)) is not None:
        yield refusal
        return
    base = session.cut(session.regen_mark)
    async with contextlib.aclosing(_stream_reply(engine, studio, base, settings, unsent=None)) as views_:
        async for view in views_:
            yield view


def regeneration_base(session: ChatSession, reply: int) -> ChatSession:
    """The conversation as it was just before reply ``reply`` (0-based) was generated: that reply and
    everything after it dropped, with their answers and ratings. Raises ``ValueError`` (a one-line message)
    for a reply the conversation does not have."""
    if not 0 <= reply < len(session.reply_marks):
        raise ValueError(reply_missing(session, reply))
    mark = session.reply_marks[reply]
    base = session.cut(mark)
    # Regenerate (the last user turn) now means the user turn this reply answered: the mark of its first reply.
    turn = next((m for m in reversed(base.reply_marks + (mark,))
                 if m[0] and base.messages[m[0] - 1].get("role") == "user"), None)
    return replace(base, regen_mark=turn, figures="")


MEDIA_PARTS = ("image_url", "audio_url", "video_url")  # the user-turn parts that carry a MediaItem (``user_turn``)

def _message_bubble(bubble: dict[str, Any]) -> bool:
    """A reply bubble only a reply with an engine message has: its text, or a tool call parsed whole."""
    title = str((bubble.get("metadata") or {}).get("title", ""))
    return not title or (title.startswith("🛠 ") and title != chat_views.WRITING_TOOL_CALL)


def read_reply_marks(session: ChatSession) -> tuple[SessionMark, ...] | None:
    """The mark of each reply, read back from the conversation itself (a session record keeps the messages
    and bubbles, not the marks). A reply's bubbles follow the bubbles of what it answers; a run of reply
    bubbles with text or a whole tool call is a reply with a message. None when the bubbles and the
    messages do not match up (the conversation was not made by this chat)."""
    if not session.reply_count:
        return ()
    starts: list[int] = []
    bubbles = session.display
    at = 0
    while at < len(bubbles):
        if not chat_views.reply_bubble(bubbles[at]):
            at += 1
            continue
        end = at
        while end < len(bubbles) and chat_views.reply_bubble(bubbles[end]):
            end += 1
        if any(_message_bubble(b) for b in bubbles[at:end]):
            starts.append(at)
        at = end
    if len(starts) != session.reply_count:
        return None
    marks: list[SessionMark] = []
    tools = media = 0
    for index, message in enumerate(session.messages):
        if message.get("role") == "assistant":
            marks.append(SessionMark(index, starts[len(marks)], tools, media))
            tools += len(message.get("tool_calls") or ())
        elif message.get("role") == "user" and isinstance(message.get("content"), list):
            media += sum(1 for part in message["content"] if isinstance(part, dict) and part.get("type") in MEDIA_PARTS)
    return tuple(marks)


def reply_missing(session: ChatSession, reply: int | None) -> str:
    count = len(session.reply_marks)
    if not count:
        return "No reply yet: send a message first."
    shown = "none" if reply is None else str(reply + 1)
    return f"There is no reply {shown}: pick one of the {count} replies of this conversation."


async def regenerate_from(engine: ChatEngine | None, studio: StudioState, session: ChatSession, reply: int | None,
                          settings: ChatSettings) -> AsyncGenerator[ChatView, None]:
    """Generate reply ``reply`` (0-based) again: it and everything after it are dropped (answers and
    ratings too); the conversation before it is sent as it was, with the settings of now."""
    if engine is None:
        yield said(session, "No engine attached: nothing can be generated.")
        return
    try:
        base = regeneration_base(session, -1 if reply is None else int(reply))
    except ValueError as exc:
        yield said(session, f"⚠ {views.esc(exc)}")
        return
    if (refusal := _refused_settings(session, settings)) is not None:
        yield refusal
        return
    async with contextlib.aclosing(_stream_reply(engine, studio, base, settings, unsent=None)) as views_:
        async for view in views_:
            yield view


# ---------------------------------------------------------------- ratings
def _rated(session: ChatSession, reply: int | None, change: Callable[[ReplyRating], ReplyRating]) -> ChatSession:
    """``session`` with reply ``reply``'s rating changed by ``change`` (a rating with neither verdict nor
    note is dropped). Raises ``ValueError`` for a reply the conversation does not have."""
    if reply is None or not 0 <= int(reply) < session.reply_count:
        raise ValueError(reply_missing(session, reply))
    number = int(reply)
    old = next((r for r in session.ratings if r.reply == number), ReplyRating(reply=number))
    new = change(old)
    others = tuple(r for r in session.ratings if r.reply != number)
    kept = (new,) if new.verdict is not None or new.note else ()
    return replace(session, ratings=tuple(sorted(others + kept, key=lambda r: r.reply)))


def rate_reply(session: ChatSession, reply: int | None, verdict: Verdict) -> ChatSession:
    """👍 or 👎 on reply ``reply`` (0-based); the same verdict again takes it back. The note stays."""
    return _rated(session, reply, lambda r: replace(r, verdict=None if r.verdict == verdict else verdict))


def note_reply(session: ChatSession, reply: int | None, note: str | None) -> ChatSession:
    """The free-text note on reply ``reply`` (0-based); an empty note removes it. The verdict stays."""
    return _rated(session, reply, lambda r: replace(r, note=(note or "").strip()))


def pending_calls(session: ChatSession) -> list[ToolCall]:
    return [t for t in session.tools if t.status == "called"]


async def send_tool_results(engine: ChatEngine | None, studio: StudioState, session: ChatSession,
                            settings: ChatSettings, *, result: str | None = None,
                            run_examples: bool = False) -> AsyncGenerator[ChatView, None]:
    """Answer the waiting tool calls and let the model continue the turn.

    ``result`` answers the first waiting call; ``run_examples`` runs every waiting call with the
    built-in example executor. When every call is answered the model streams again.
    """
    waiting = pending_calls(session)
    if engine is None or not waiting:
        yield said(session, "No tool call is waiting for a result.")
        return
    if (refusal := _refused_settings(session, settings)) is not None:
        yield refusal
        return
    answers: dict[str, str] = {}
    if run_examples:
        for call in waiting:
            answers[call.id] = run_example_tool(call.name, call.arguments)
    else:
        if not (result or "").strip():
            yield said(session, f"Type the result of `{waiting[0].name}` first.")
            return
        answers[waiting[0].id] = (result or "").strip()
    tools = tuple(t.answered(answers[t.id]) if t.id in answers else t for t in session.tools)
    answered = [t.answered(answers[t.id]) for t in waiting if t.id in answers]
    messages = session.messages + tuple(t.result_message() for t in answered)
    display = session.display + tuple(chat_views.tool_result_bubble(t) for t in answered)
    updated = replace(session, tools=tools, messages=messages, display=display)
    still = pending_calls(updated)
    if still:
        yield said(updated, f"Result sent for `{waiting[0].name}`; {len(still)} call(s) still waiting "
                   "(the model continues once every call has a result).", clear_input=True)
        return
    async with contextlib.aclosing(_stream_reply(engine, studio, updated, settings, unsent=None)) as views_:
        async for view in views_:
            yield view


START_WAIT_UPDATE_S = 1.0  # how often a message waiting for the engine to load shows the load stage


async def _wait_for_engine(engine: ChatEngine, sent: ChatSession,
                           clear_input: bool) -> AsyncGenerator[ChatView, None]:
    """Start the engine (or join its start) and show the load stage while the message waits.

    The start itself belongs to the engine: a Stop here cancels the wait, never the load.
    """
    starting = asyncio.ensure_future(engine.start())
    while True:
        done, _ = await asyncio.wait({starting}, timeout=START_WAIT_UPDATE_S)
        if done:
            starting.result()  # raises EngineUnavailable when the start failed
            return
        stage = chat_views.loading_line(engine.status) or "starting"
        waiting = f"⏳ waiting for the engine to load ({views.esc(stage)}); " \
                  "your message is sent as soon as the model is ready"
        yield ChatView(replace(sent, figures=chat_views.STOPPED_BEFORE_REPLY), waiting, clear_input=clear_input)


async def _stream_reply(engine: ChatEngine, studio: StudioState, sent: ChatSession, settings: ChatSettings,
                        *, unsent: ChatSession | None) -> AsyncGenerator[ChatView, None]:
    """Stream one assistant reply for ``sent.messages``.

    ``unsent`` is the session before the new user turn: if the engine rejects the turn, the
    user turn is dropped from what the engine will see (the bubble stays, with the notice).
    """
    rejected_base = unsent if unsent is not None else sent

    def refused(reason: str, title: str = "⚠ Not sent to the model") -> ChatView:
        kept = replace(rejected_base, display=sent.display + (chat_views.notice(reason, title),))
        return said(kept, f"⚠ {views.esc(reason)}", clear_input=unsent is not None)

    try:
        tools = parse_tools_json(settings.tools_json)
    except ToolSchemaError as exc:
        yield refused(f"The tools JSON is not usable — {exc}. Fix it in the Tools panel and send again.")
        return
    if settings.tool_choice == "required" and not tools:
        yield refused("Tool choice is “required” but the Tools panel has no tools: add tools, or set tool "
                      "choice to “auto”.")
        return
    try:  # media an engine known to take none (--language-model-only) is refused before any wait
        check_media_limits(list(sent.messages), engine.mm_limits)
    except TurnRejected as exc:
        yield refused(str(exc))
        return
    unanswered = replace(sent, figures=chat_views.STOPPED_BEFORE_REPLY)  # what stays if stopped before the reply
    yield ChatView(unanswered, "⏳ sending…", clear_input=unsent is not None)
    try:
        async with contextlib.aclosing(_wait_for_engine(engine, sent, unsent is not None)) as waiting:
            async for view in waiting:
                yield view
    except EngineUnavailable as exc:
        yield refused(f"The engine is not available: {exc}")
        return
    system = [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt.strip() else []
    turn = TurnRequest(session_id=sent.session_id, messages=system + [dict(m) for m in sent.messages],
                       tools=tools, sampling=settings.sampling, video=studio.settings,
                       tool_choice=settings.tool_choice)
    note = chat_views.budget_note(studio, settings.sampling, sent.media)
    setting = turn_setting(turn)  # what this reply runs with, kept on its Answer
    reply = _Reply()
    last = 0.0
    current = sent
    replies = sent.reply_count  # this reply's number, once it has a message

    def snapshot(error: str = "") -> ChatSession:
        """The session with the reply as it stands: its message, bubbles and calls and, once it has a message,
        its :class:`Answer` (finish None until it finishes, so a stopped reply keeps one) and mark; its figures
        line is the reply's, stopped here (what stays after a Stop or a closed tab)."""
        stopped = chat_views.figures_md(reply, sent.media, budget_note=note, stopped=True)
        shown = replace(sent, display=sent.display + tuple(reply.display()), tools=sent.tools + tuple(reply.records()),
                        figures=stopped)
        message = reply.engine_message()
        if message is None:
            return shown
        return replace(shown, messages=sent.messages + (message,),
                       answers=sent.answers[:replies] + (reply.answer(setting, error),),
                       reply_marks=sent.reply_marks[:replies] + (sent.mark,))

    def broke(title: str, detail: str, figures: str) -> ChatView:
        """The reply ended by an error: keep what arrived; without it the model's view stays as it was."""
        if reply.engine_message() is None:
            # Nothing generated: the next message is not refused for the same reason.
            kept = replace(rejected_base, display=sent.display + tuple(reply.display()))
            tail = ("Nothing was generated; your message is shown but was not added to the conversation the "
                    "model sees." if unsent is not None else "Nothing was generated.")
        else:
            kept = snapshot(error=" ".join(detail.split()))
            tail = "The reply above is what arrived before the error; press Regenerate to try again."
        error = {"role": "assistant", "content": f"{detail}\n\n{tail}", "metadata": {"title": title, "status": "done"}}
        return said(replace(kept, display=kept.display + (error,)), figures)

    pacer = settings.pacer or StreamPacer(min_interval_s=settings.min_interval_s, max_updates_per_s=float("inf"),
                                          render_chars_per_s=float("inf"))  # only the interval asked for
    stream = engine.stream_turn(turn)
    try:
        with pacer.streaming():
            async with contextlib.aclosing(stream):
                async for delta in stream:
                    structural = reply.add(delta)
                    now = time.monotonic()
                    if structural or now - last >= pacer.interval(reply.size()):
                        last = now
                        current = snapshot()
                        yield ChatView(current, chat_views.figures_md(reply, sent.media))
    except RequestRefused as exc:
        yield broke("⚠ Refused — not an engine failure", str(exc), f"⚠ {views.esc(exc)}")
        return
    except TurnRejected as exc:
        yield refused(str(exc))
        return
    except EngineUnavailable as exc:
        yield broke("⚠ The engine stopped", f"The engine is not available: {exc}",
                    f"⚠ engine unavailable: {views.esc(exc)}")
        return
    except Exception as exc:
        logger.exception("chat turn %s failed", turn.request_id)
        detail = str(exc).strip() or f"{type(exc).__name__} without a message (see the server log)"
        yield broke("⚠ The engine failed during this reply", detail, f"⚠ engine error: {views.esc(detail)}")
        return
    current = snapshot()
    figures = chat_views.figures_md(reply, sent.media, budget_note=note)
    if pending_calls(current):
        figures += ("  \n**The model called a tool** — type a result and press *Send tool result*, or "
                    "*Run example tool*, to continue the turn.")
    yield ChatView(replace(current, figures=figures), figures, done=True)


