"""A chat session's answers and ratings (issue 12 §2, chat side) and regenerating from any reply, over the
InProcessEngine on the scripted AsyncLLM double: every reply keeps its ``Answer`` (stopped and failed ones
too), 👍/👎 and a note are kept by reply number, and Regenerate (from the last user turn or from a chosen
reply) drops the answers and ratings of what it replaces, and only those."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import gradio as gr
import pytest

from dots3_demo.core.records import Answer, ReplyRating
from dots3_demo.core.state import ChatSession, initial_state, new_session
from dots3_demo.inspection import inspect_file
from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui import build_interface, chat, chat_views, layout
from dots3_demo.ui.chat_page import SETTLE_OUTPUTS, on_chat_settle, on_pick_reply
from support.doubles import ScriptedAsyncLLM
from tests.engine.media import make_png
from tests.ui.test_chat import TOOL_SCRIPT, _engine, _settings

SEQ = 32768


def _last(agen) -> chat.ChatView:
    async def main():
        return [view async for view in agen][-1]

    return asyncio.run(main())


def _said(engine_input) -> str:
    """The last user text of a rendered conversation."""
    content = engine_input["conversation"][-1]["content"]
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if p.get("type") == "text")


def echo(engine_input) -> list[str]:
    """``say X`` → ``X-1 X-2 X-3``; the n-th request of a word says so (``X-1#2`` …), so a regenerated reply differs."""
    word = _said(engine_input).split()[-1]
    echo.count[word] = echo.count.get(word, 0) + 1  # type: ignore[attr-defined]
    mark = "" if echo.count[word] == 1 else f"#{echo.count[word]}"  # type: ignore[attr-defined]
    return [f"{word}-{i}{mark} " for i in range(1, 4)]


@pytest.fixture
def double():
    echo.count = {}  # type: ignore[attr-defined]
    return ScriptedAsyncLLM(echo)


@pytest.fixture
def studio():
    return initial_state(SEQ)


def _conversation(double, studio, *words: str) -> ChatSession:
    session = new_session()
    engine = _engine(double)
    for word in words:
        session = _last(chat.send_message(engine, studio, session, f"say {word}", _settings())).session
    return session


def _replies(session: ChatSession) -> list[str]:
    return [m["content"] for m in session.messages if m["role"] == "assistant"]


# ---------------------------------------------------------------- answers
def test_each_reply_keeps_its_answer_with_its_figures(double, studio):
    session = _conversation(double, studio, "alpha", "bravo")
    assert [a.text for a in session.answers] == _replies(session) == ["alpha-1 alpha-2 alpha-3 ",
                                                                       "bravo-1 bravo-2 bravo-3 "]
    first = session.answers[0]
    assert isinstance(first, Answer) and first.finish_reason == "stop" and first.error == ""
    assert first.stats is not None and first.stats.output_tokens == 3 and first.stats.ttft_s == pytest.approx(0.25)
    assert first.stats.prompt is not None and first.stats.prompt.total == 16  # the engine's count (the double's ids)
    assert len(session.reply_marks) == 2 and session.reply_marks[1][0] == 3  # (messages, …): user, reply, user


def test_a_tool_call_and_the_reply_after_its_result_are_two_answers(studio):
    def script(engine_input):
        return ["It is 21 °C."] if engine_input["conversation"][-1]["role"] == "tool" else TOOL_SCRIPT

    engine = _engine(ScriptedAsyncLLM(script))
    settings = _settings(tools_json=json.dumps(EXAMPLE_TOOLS))
    called = _last(chat.send_message(engine, studio, new_session(), "weather in Paris?", settings)).session
    done = _last(chat.send_tool_results(engine, studio, called, settings, run_examples=True)).session
    first, second = done.answers
    assert first.finish_reason == "tool_calls" and [c.name for c in first.tool_calls] == ["get_weather"]
    assert first.text == "Let me check.  One moment please."
    assert (second.text, second.finish_reason, second.tool_calls) == ("It is 21 °C.", "stop", ())


def test_a_stopped_reply_keeps_what_arrived_without_a_finish(studio):
    async def main():
        double = ScriptedAsyncLLM(["a", "b", "c", "d"], hold_at=2)
        seen: list[chat.ChatView] = []

        async def consume():
            async for view in chat.send_message(_engine(double), studio, new_session(), "hi", _settings()):
                seen.append(view)

        task = asyncio.create_task(consume())
        await double.reached_hold.wait()
        task.cancel()  # Stop
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen[-1].session  # what the page keeps (the settle step shows it)

    session = asyncio.run(main())
    (answer,) = session.answers
    assert (answer.text, answer.finish_reason) == ("ab", None)
    assert "stopped before its end" in chat_views.rating_md(session, 0)


class _Breaks(list):
    """A script whose third delta never comes: the engine fails mid-reply."""

    def __iter__(self):
        yield from self[:2]
        raise RuntimeError("the GPU fell over")


def test_a_reply_that_failed_midway_keeps_its_answer_with_the_error(studio):
    session = _last(chat.send_message(_engine(ScriptedAsyncLLM(_Breaks(["par", "tial", "x"]))), studio,
                                      new_session(), "hi", _settings())).session
    (answer,) = session.answers
    assert (answer.text, answer.finish_reason, answer.error) == ("partial", None, "the GPU fell over")


def test_a_reply_with_nothing_generated_has_no_answer(studio):
    session = _last(chat.send_message(_engine(ScriptedAsyncLLM(_Breaks([]))), studio, new_session(), "hi",
                                      _settings())).session
    assert session.answers == () and session.reply_count == 0 and session.reply_marks == ()


# ---------------------------------------------------------------- ratings
def test_verdicts_and_notes_by_reply(double, studio):
    session = _conversation(double, studio, "alpha", "bravo")
    rated = chat.rate_reply(session, 1, "up")
    rated = chat.note_reply(rated, 0, "  missed the door  ")
    rated = chat.rate_reply(rated, 0, "down")
    assert rated.ratings == (ReplyRating(0, "down", "missed the door"), ReplyRating(1, "up", ""))
    assert chat.rate_reply(rated, 0, "up").ratings[0] == ReplyRating(0, "up", "missed the door")
    # the same verdict again takes it back; with no note left the rating goes
    assert chat.rate_reply(rated, 1, "up").ratings == (ReplyRating(0, "down", "missed the door"),)
    assert chat.note_reply(chat.rate_reply(rated, 0, "down"), 0, "").ratings == (ReplyRating(1, "up", ""),)
    assert session.ratings == ()  # sessions are values: the old one is unchanged
    labels = [label for label, _ in chat_views.reply_choices(rated)]
    assert labels == ["reply 1 · 👎 ✎ · alpha-1 alpha-2 alpha-3", "reply 2 · 👍 · bravo-1 bravo-2 bravo-3"]
    assert chat_views.rating_md(rated, 0) == ("**reply 1** of 2 · 👎 · note: “missed the door” · finish `stop`"
                                              + chat_views.picked_marker(rated, 0))


def test_the_picked_replys_marker_says_its_verdict_its_bubbles_and_what_regenerating_from_it_drops(double, studio):
    session = _conversation(double, studio, "alpha", "bravo")
    # each reply's bubbles in the Chatbot's messages: after its question, up to the next question
    assert [list(chat_views.reply_bubbles(session, n)) for n in (0, 1)] == [[1], [3]]
    assert [session.display[i]["role"] for i in (0, 2)] == ["user", "user"]
    assert chat_views.reply_bubbles(session, 2) == range(0)
    assert chat_views.picked_marker(session, 0) == ('<span class="d3-picked d3-verdict-none d3-first-1 d3-end-2" '
                                                    "hidden></span>")
    rated = chat.note_reply(chat.rate_reply(session, 0, "down"), 1, 'said "six" <words>')
    assert chat_views.regenerate_from_loses(session, 0) == ""  # nothing rated: nothing to ask
    assert chat_views.regenerate_from_loses(rated, 1) == (
        '↻ from reply 2 generates it again: reply 2 go, with the rating you gave (reply 2: note “said "six" <words>”). '
        "Generate again?")
    assert chat_views.regenerate_from_loses(rated, 0).startswith(
        "↻ from reply 1 generates it again: replies 1–2 go, with the ratings you gave (reply 1: 👎; reply 2: note")
    marker = chat_views.picked_marker(rated, 1)
    assert 'class="d3-picked d3-verdict-none d3-first-3 d3-end-4"' in marker
    assert ('title="↻ from reply 2 generates it again: reply 2 go, with the rating you gave (reply 2: note '
            '“said &quot;six&quot; &lt;words&gt;”)') in marker  # escaped: an attribute
    assert "d3-verdict-down" in chat_views.picked_marker(rated, 0)


def test_a_reply_the_conversation_does_not_have_is_refused_in_plain_words(double, studio):
    session = _conversation(double, studio, "alpha")
    with pytest.raises(ValueError, match="There is no reply 2: pick one of the 1 replies"):
        chat.rate_reply(session, 1, "up")
    with pytest.raises(ValueError, match="No reply yet"):
        chat.note_reply(new_session(), 0, "x")
    with pytest.raises(ValueError, match="There is no reply none"):
        chat.rate_reply(session, None, "up")


def test_rating_callbacks_of_the_app(profile, double, studio):
    session = _conversation(double, studio, "alpha", "bravo")
    demo = build_interface(profile, _engine(double), seq=SEQ)
    fns = {f.api_name: f for f in demo.fns.values()}
    rated, picker, line = fns["rate_up"].fn(session, 0)
    assert rated.ratings == (ReplyRating(0, "up", ""),) and picker.value == 0 and "👍" in line
    rated, picker, line = fns["rate_note"].fn(rated, "0", "frames too sparse")  # an API call may send text
    assert rated.ratings == (ReplyRating(0, "up", "frames too sparse"),) and "frames too sparse" in line
    assert picker.choices[0] == ("reply 1 · 👍 ✎ · alpha-1 alpha-2 alpha-3", 0)
    kept, picker_kept, line = fns["rate_down"].fn(rated, 7)
    assert kept == gr.skip() and picker_kept == gr.skip() and line.startswith("⚠ There is no reply 8")
    assert on_pick_reply(rated, 0) == ("frames too sparse", chat_views.rating_md(rated, 0))
    assert on_pick_reply(rated, 1)[0] == ""
    for name in ("rate_up", "rate_down", "rate_note"):
        assert [getattr(b, "elem_id", None) for b in fns[name].outputs] == [None, "rate-reply", "rate-status"]
    # after a reply the picker lists every reply and points at the latest
    settled = dict(zip(SETTLE_OUTPUTS, on_chat_settle(_engine(double), rated), strict=True))
    assert settled["reply_picker"].value == 1 and len(settled["reply_picker"].choices) == 2
    assert settled["rate_note"] == {"__type__": "update", "interactive": True, "value": ""}  # reply 2's note: none
    noted = chat.note_reply(rated, 1, "good")
    assert dict(zip(SETTLE_OUTPUTS, on_chat_settle(_engine(double), noted), strict=True))["rate_note"]["value"] == \
        "good"


# ---------------------------------------------------------------- regenerate
def test_regenerate_drops_the_answer_and_rating_of_the_reply_it_replaces(double, studio):
    session = _conversation(double, studio, "alpha", "bravo")
    session = chat.note_reply(chat.rate_reply(chat.rate_reply(session, 0, "up"), 1, "down"), 1, "wrong")
    again = _last(chat.regenerate(_engine(double), studio, session, _settings())).session
    assert _replies(again) == ["alpha-1 alpha-2 alpha-3 ", "bravo-1#2 bravo-2#2 bravo-3#2 "]
    assert [a.text for a in again.answers] == _replies(again)
    assert again.ratings == (ReplyRating(0, "up", ""),)  # reply 2's rating went with reply 2


def test_regenerate_from_an_earlier_reply_drops_what_came_after_it(double, studio):
    session = _conversation(double, studio, "alpha", "bravo", "charlie")
    session = chat.rate_reply(chat.rate_reply(chat.rate_reply(session, 0, "up"), 1, "down"), 2, "up")
    again = _last(chat.regenerate_from(_engine(double), studio, session, 1, _settings())).session
    assert _replies(again) == ["alpha-1 alpha-2 alpha-3 ", "bravo-1#2 bravo-2#2 bravo-3#2 "]
    users = [_said({"conversation": [m]}) for m in again.messages if m["role"] == "user"]
    assert users == ["say alpha", "say bravo"]  # charlie's turn is gone
    assert "charlie" not in str(again.display) and "bravo-1 " not in str(again.display)
    assert [a.text for a in again.answers] == _replies(again) and again.ratings == (ReplyRating(0, "up", ""),)
    # Regenerate now re-runs the turn of the reply just made, not charlie's
    last = _last(chat.regenerate(_engine(double), studio, again, _settings())).session
    assert _replies(last)[-1] == "bravo-1#3 bravo-2#3 bravo-3#3 " and len(last.answers) == 2


def test_regenerate_from_a_reply_after_a_tool_result_keeps_the_call(studio):
    rounds = {"n": 0}

    def script(engine_input):
        if engine_input["conversation"][-1]["role"] == "tool":
            rounds["n"] += 1
            return [f"Answer {rounds['n']}."]
        return TOOL_SCRIPT

    engine = _engine(ScriptedAsyncLLM(script))
    settings = _settings(tools_json=json.dumps(EXAMPLE_TOOLS))
    called = _last(chat.send_message(engine, studio, new_session(), "weather in Paris?", settings)).session
    done = _last(chat.send_tool_results(engine, studio, called, settings, run_examples=True)).session
    again = _last(chat.regenerate_from(engine, studio, done, 1, settings)).session
    assert _replies(again)[-1] == "Answer 2." and again.messages[-2]["role"] == "tool"
    assert [t.status for t in again.tools] == ["answered"] and len(again.answers) == 2
    # from the tool-call reply itself: the call goes too, and the model is asked again
    first = _last(chat.regenerate_from(engine, studio, done, 0, settings)).session
    assert [m["role"] for m in first.messages] == ["user", "assistant"] and first.answers[0].finish_reason == \
        "tool_calls"
    assert [t.status for t in first.tools] == ["called"]


def test_regenerate_from_a_reply_that_is_not_there_changes_nothing(double, studio):
    session = _conversation(double, studio, "alpha")
    view = _last(chat.regenerate_from(_engine(double), studio, session, 3, _settings()))
    assert "There is no reply 4" in view.figures and view.done
    assert replace(view.session, figures=session.figures) == session  # only its figures line says why
    assert len(double.generated) == 1


def test_the_regenerate_from_event(profile, double, studio):
    """The wired event: the reply picker's value and the chat controls, in ``ChatControls``' order."""
    session = _conversation(double, studio, "alpha", "bravo")
    demo = build_interface(profile, _engine(double), seq=SEQ)
    fn = next(f for f in demo.fns.values() if f.api_name == "regenerate_from")
    assert fn.concurrency_id == "chat"
    assert [getattr(b, "elem_id", None) for b in fn.inputs][2:4] == ["rate-reply", "system-prompt"]
    controls = layout.ChatControls.ordered({
        "system_prompt": "", "tools_json": "", "temperature": 0.7, "top_p": 0.95, "top_k": -1, "max_tokens": 64,
        "seed": -1, "repetition_penalty": 1.0, "tool_choice": "auto"})

    async def main():  # the event as wired: its engine and the app's pacer bound, the page's inputs in order
        return [o async for o in fn.fn(studio, session, 0, *controls)]

    steps = asyncio.run(main())
    final = dict(zip(layout.ChatStream.names(), steps[-1], strict=True))["session"]
    assert _replies(final) == ["alpha-1#2 alpha-2#2 alpha-3#2 "] and len(final.answers) == 1


# ---------------------------------------------------------------- marks read back (an imported record)
def test_reply_marks_read_back_from_the_conversation_equal_the_ones_kept(studio, profile, tmp_path):
    """A session record keeps messages and bubbles, not marks: reading them back from those gives the marks the
    chat kept, through tool calls and results, a refused turn, a reply stopped while thinking and a failed one."""
    state = {"think": False}

    def script(engine_input):
        last = engine_input["conversation"][-1]
        if last["role"] == "tool":
            return ["It is 21 °C."]
        said = _said(engine_input)
        if "weather" in said:
            return TOOL_SCRIPT
        if "ponder" in said:
            state["think"] = True
            return ["<think>hmm", " hmm", " hmm</think>", "done"]
        if "break" in said:
            return _Breaks(["half", " a reply", "x"])
        return [f"{said.split()[-1]}-1 ", "end"]

    async def stopped_while_thinking(engine, session):
        views: list[chat.ChatView] = []

        async def consume():
            async for view in chat.send_message(engine, studio, session, "ponder this", _settings()):
                views.append(view)

        task = asyncio.create_task(consume())
        await double.reached_hold.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        double.hold_at = None
        return views[-1].session

    double = ScriptedAsyncLLM(script)
    engine = _engine(double)
    tools = _settings(tools_json=json.dumps(EXAMPLE_TOOLS))
    png = make_png(tmp_path / "p.png")
    with_image = replace(studio, images=((str(png), inspect_file(str(png), profile, expected="image")),))
    session = _last(chat.send_message(engine, with_image, new_session(), "look at this", _settings())).session
    session = _last(chat.send_message(engine, studio, session, "weather in Paris?", tools)).session
    session = _last(chat.send_tool_results(engine, studio, session, tools, run_examples=True)).session
    session = _last(chat.send_message(engine, studio, session, "refused", _settings(tools_json="[nope"))).session
    double.hold_at = 1
    session = asyncio.run(stopped_while_thinking(engine, session))
    assert state["think"] and "Thinking" in str(session.display)
    session = _last(chat.send_message(engine, studio, session, "please break", _settings())).session
    session = _last(chat.send_message(engine, studio, session, "say zulu", _settings())).session
    assert session.reply_count == 5 and len(session.reply_marks) == 5
    assert chat.read_reply_marks(session) == session.reply_marks
    assert chat.read_reply_marks(replace(session, display=session.display[:-1])) is None  # bubbles ≠ messages
    assert chat.read_reply_marks(new_session()) == ()
