"""The engine chat's turns and their streaming: plain functions and dataclasses (no Gradio), called by
``ui.app`` and by tests. The session it streams into is ``core.state``'s; each request is built by
``core.turns.build_turn`` and each reply accumulated by ``core.reply.Reply``, as compare, eval and the smoke test
do; what the page shows of it (the engine line, bubbles, tool panel, figures line, tools editor) is in
``ui.chat_views``.

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
are coalesced to at most one per interval — the app's :class:`~dots3_demo.core.pacing.StreamPacer`
shares an update budget among the replies in flight; structural changes (first text, a tool call
appearing or completing, the end) are always yielded at once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, replace
from typing import Any

from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.records import Answer, MediaItem, ReplyRating, Verdict, turn_setting
from dots3_demo.core.reply import Reply
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import ChatSession, SessionMark, StudioState
from dots3_demo.core.turns import MEDIA_PARTS, asked_ahead, build_turn, engine_start, new_media, user_message
from dots3_demo.engine.media import check_media_limits
from dots3_demo.engine.protocol import ChatEngine, EngineUnavailable, RequestRefused, ToolCall, TurnRejected
from dots3_demo.tools import ToolSchemaError, parse_tools_json, run_example_tool
from dots3_demo.ui import chat_views, views

logger = logging.getLogger(__name__)

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
def user_turn(text: str, media: list[MediaItem]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(engine message, chatbot messages) for one user turn: the engine's as ``core.turns.user_message`` builds it
    (media first, then the text), the chat's bubbles in the same order."""
    return user_message(text, media), chat_views.user_bubbles(text, media)


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
            media += sum(1 for part in message["content"]
                         if isinstance(part, dict) and part.get("type") in MEDIA_PARTS.values())
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
    took_input = not run_examples  # the typed result is in the conversation now: the box stays empty
    async with contextlib.aclosing(_stream_reply(engine, studio, updated, settings, unsent=None,
                                                 took_input=took_input)) as views_:
        async for view in views_:
            yield view


async def _wait_for_engine(engine: ChatEngine, sent: ChatSession,
                           clear_input: bool) -> AsyncGenerator[ChatView, None]:
    """Start the engine (or join its start) and show the load stage while the message waits.

    The start itself belongs to the engine: a Stop here cancels the wait, never the load.
    """
    async with contextlib.aclosing(engine_start(engine)) as stages:
        async for stage in stages:
            waiting = f"⏳ waiting for the engine to load ({views.esc(stage)}); " \
                      "your message is sent as soon as the model is ready"
            yield ChatView(replace(sent, figures=chat_views.STOPPED_BEFORE_REPLY), waiting, clear_input=clear_input)


async def _stream_reply(engine: ChatEngine, studio: StudioState, sent: ChatSession, settings: ChatSettings,
                        *, unsent: ChatSession | None, took_input: bool = False) -> AsyncGenerator[ChatView, None]:
    """Stream one assistant reply for ``sent.messages``.

    ``unsent`` is the session before the new user turn: if the engine rejects the turn, the
    user turn is dropped from what the engine will see (the bubble stays, with the notice). With a new
    user turn, or ``took_input`` (a typed tool result is in ``sent``), the views say the box's text was
    taken, so the box is not given it back.
    """
    rejected_base = unsent if unsent is not None else sent
    took = unsent is not None or took_input  # the views say the box's text was taken (``ChatView.clear_input``)

    def refused(reason: str, title: str = "⚠ Not sent to the model") -> ChatView:
        kept = replace(rejected_base, display=sent.display + (chat_views.notice(reason, title),))
        return said(kept, f"⚠ {views.esc(reason)}", clear_input=took)

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
    sending = ChatView(unanswered, "⏳ sending…", clear_input=took)
    # A ready engine gets the request while the "sending…" step is post-processed and sent (``asked_ahead``); one that
    # is loading (or failed) is waited for first, its load stage shown, as before.
    ready = engine.status.state == "ready"
    if not ready:
        yield sending
        try:
            async with contextlib.aclosing(_wait_for_engine(engine, sent, took)) as waiting:
                async for view in waiting:
                    yield view
        except EngineUnavailable as exc:
            yield refused(f"The engine is not available: {exc}")
            return
    turn = build_turn(session_id=sent.session_id, system=settings.system_prompt, messages=sent.messages, tools=tools,
                      sampling=settings.sampling, video=studio.settings, tool_choice=settings.tool_choice)
    note = chat_views.budget_note(studio, settings.sampling, sent.media)
    setting = turn_setting(turn)  # what this reply runs with, kept on its Answer
    reply = Reply(Answer(setting=setting), "streaming")
    last = 0.0
    current = sent
    replies = sent.reply_count  # this reply's number, once it has a message
    folds = chat_views.Folds()  # the figures line's folds, made once for the reply rather than at every step

    def snapshot(error: str = "") -> ChatSession:
        """The session with the reply as it stands: its message, bubbles and calls and, once it has a message,
        its :class:`Answer` (finish None until it finishes, so a stopped reply keeps one) and mark; its figures
        line is the reply's, stopped here (what stays after a Stop or a closed tab)."""
        stopped = chat_views.figures_md(reply, sent.media, budget_note=note, stopped=True, folds=folds)
        shown = replace(sent, display=sent.display + tuple(chat_views.answer_bubbles(reply)),
                        tools=sent.tools + reply.tool_records(), figures=stopped)
        message = reply.engine_message()
        if message is None:
            return shown
        return replace(shown, messages=sent.messages + (message,),
                       answers=sent.answers[:replies] + (replace(reply.answer, error=error),),
                       reply_marks=sent.reply_marks[:replies] + (sent.mark,))

    def broke(title: str, detail: str, figures: str) -> ChatView:
        """The reply ended by an error: keep what arrived; without it the model's view stays as it was."""
        if reply.engine_message() is None:
            # Nothing generated: the next message is not refused for the same reason.
            kept = replace(rejected_base, display=sent.display + tuple(chat_views.answer_bubbles(reply)))
            tail = ("Nothing was generated; your message is shown but was not added to the conversation the "
                    "model sees." if unsent is not None else "Nothing was generated.")
        else:
            kept = snapshot(error=" ".join(detail.split()))
            tail = "The reply above is what arrived before the error; press Regenerate to try again."
        error = {"role": "assistant", "content": f"{detail}\n\n{tail}", "metadata": {"title": title, "status": "done"}}
        return said(replace(kept, display=kept.display + (error,)), figures)

    pacer = settings.pacer or StreamPacer(min_interval_s=settings.min_interval_s, max_updates_per_s=float("inf"),
                                          render_chars_per_s=float("inf"))  # only the interval asked for
    try:
        with pacer.streaming():
            async with asked_ahead(engine.stream_turn(turn)) as stream:  # closed: the request aborted
                if ready:
                    yield sending
                async for delta in stream:
                    before, reply = reply, reply.add(delta)
                    now = time.monotonic()
                    if reply.structural(before) or now - last >= pacer.interval(reply.size()):
                        last = now
                        current = snapshot()
                        yield ChatView(current, chat_views.figures_md(reply, sent.media, folds=folds))
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
    figures = chat_views.figures_md(reply, sent.media, budget_note=note, folds=folds)
    if pending_calls(current):
        figures += ("  \n**The model called a tool** — type a result and press *Send tool result*, or "
                    "*Run example tool*, to continue the turn.")
    yield ChatView(replace(current, figures=figures), figures, done=True)


