"""The UI-update budget shared by streaming replies, and what the chat events send per update."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import gradio as gr

from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import initial_state, new_session
from dots3_demo.engine.inprocess import InProcessEngine
from dots3_demo.ui import app as ui_app
from dots3_demo.ui import chat, chat_page, layout
from support.doubles import ScriptedAsyncLLM, scripted_engine

SEQ = 32768


def _engine(double: ScriptedAsyncLLM) -> InProcessEngine:
    return scripted_engine(double, max_num_seqs=8, max_model_len=SEQ)


def test_interval_grows_with_replies_in_flight():
    pacer = StreamPacer(min_interval_s=0.03, max_updates_per_s=100.0)
    assert pacer.interval() == 0.03
    with pacer.streaming(), pacer.streaming():
        assert pacer.active == 2 and pacer.interval() == 0.03  # 2 / 100 s is below the floor
        with pacer.streaming():
            for _ in range(7):
                pacer.active += 1  # ten in flight
            assert abs(pacer.interval() - 0.10) < 1e-9
            pacer.active -= 7
    assert pacer.active == 0


def test_interval_grows_with_the_reply_length_up_to_a_cap():
    pacer = StreamPacer(min_interval_s=0.03, max_updates_per_s=100.0, render_chars_per_s=100_000, max_interval_s=1.0)
    assert pacer.interval(0) == pacer.interval(3_000) == 0.03  # short replies: the floor
    assert abs(pacer.interval(20_000) - 0.2) < 1e-9  # the browser re-renders at most 100,000 chars/s
    assert pacer.interval(500_000) == 1.0  # a very long reply still updates every second
    pacer.active = 300
    assert pacer.interval(500_000) == 3.0  # a busy app's share wins over the cap


def test_a_long_reply_sends_fewer_updates_and_loses_nothing():
    chunk = "x" * 500
    double = ScriptedAsyncLLM([chunk] * 80, delay_s=0.005)  # 40,000 characters in about 0.4 s
    settings = replace(ChatSettings(), pacer=StreamPacer(min_interval_s=0.0, max_updates_per_s=1e9,
                                                               render_chars_per_s=100_000))

    async def main():
        agen = chat.send_message(_engine(double), initial_state(SEQ), new_session(), "hi", settings)
        return [view async for view in agen]

    views = asyncio.run(main())
    texts = [m["content"] for m in views[-1].session.display if m["role"] == "assistant"]
    assert texts[-1] == chunk * 80 and views[-1].done
    assert len(views) <= 12  # 80 deltas; past 10,000 chars at most ~10 updates a second (was 80)


def test_streaming_counter_survives_errors():
    pacer = StreamPacer()
    try:
        with pacer.streaming():
            raise RuntimeError("engine died")
    except RuntimeError:
        pass
    assert pacer.active == 0


def _count_views(pacer: StreamPacer, deltas: int) -> list[chat.ChatView]:
    double = ScriptedAsyncLLM([f"w{i} " for i in range(deltas)], delay_s=0.002)
    settings = replace(ChatSettings(), pacer=pacer)

    async def main():
        agen = chat.send_message(_engine(double), initial_state(SEQ), new_session(), "hi", settings)
        return [view async for view in agen]

    return asyncio.run(main())


def test_busy_app_sends_fewer_updates_per_reply_and_loses_nothing():
    quiet = _count_views(StreamPacer(min_interval_s=0.0, max_updates_per_s=1e9, render_chars_per_s=1e9), 60)
    busy_pacer = StreamPacer(min_interval_s=0.0, max_updates_per_s=10.0, render_chars_per_s=1e9)
    busy_pacer.active = 9  # nine other replies in flight: 1 s between this reply's updates
    busy = _count_views(busy_pacer, 60)
    expected = "".join(f"w{i} " for i in range(60))
    for views in (quiet, busy):
        texts = [m["content"] for m in views[-1].session.display if m["role"] == "assistant"]
        assert texts[-1] == expected and views[-1].done
    assert len(quiet) > 30 and len(busy) <= 4  # sending…, first text, (maybe one timed), final
    assert busy_pacer.active == 9  # this reply's slot was given back


def test_streamed_steps_carry_no_component_updates():
    """Each streamed step is plain values (a component update costs Gradio a constructor call per
    step): Send is disabled by ``lock_send`` before the event and re-enabled by the settle step."""
    double = ScriptedAsyncLLM([f"w{i} " for i in range(12)], delay_s=0.002)
    engine = _engine(double)
    pacer = StreamPacer(min_interval_s=0.0, max_updates_per_s=1e9, render_chars_per_s=1e9)

    async def main():
        agen = chat_page.on_chat(engine, pacer, initial_state(SEQ), new_session(), "hi",
                              "sys", "", 0.7, 0.95, -1, 64, -1, 1.0)
        return [outputs async for outputs in agen]

    outputs = asyncio.run(main())
    assert len(outputs) > 5 and all(len(o) == 6 for o in outputs)
    assert outputs[0][2] is True and all(o[2] == gr.skip() for o in outputs[1:])  # the message taken once (a State)
    assert not any(isinstance(value, gr.components.Component) for o in outputs for value in o)
    held = layout.HeldByReply.names()
    locked = dict(zip(held, chat_page.lock_send(engine), strict=True))  # Send, rating, regenerate-from, import
    assert all(update["interactive"] is False for update in locked.values())
    assert chat_page.lock_send(None) == (gr.skip(),) * len(held)
    settled = dict(zip(chat_page.SETTLE_OUTPUTS, chat_page.on_chat_settle(engine, outputs[-1][1]), strict=True))
    assert all(settled[name]["interactive"] is True for name in held)


def test_chat_events_lock_send_first_and_stream_without_it():
    from dots3_demo.profiles import load_profile

    engine = _engine(ScriptedAsyncLLM(["x"]))
    demo = ui_app.build_interface(load_profile(), engine, seq=SEQ)
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    send = by_id["chat-send"]
    for name in ("chat", "chat_submit", "regenerate", "regenerate_from", "tool_result", "run_example_tool"):
        fn = next(f for f in demo.fns.values() if f.api_name == name)
        assert send not in fn.outputs and len(fn.outputs) == 6
        # neither box is a streamed output (Gradio rebuilds a component for each skipped output at every step)
        assert by_id["chat-input"] not in fn.outputs and by_id["tool-result"] not in fn.outputs
        before = [f for f in demo.fns.values() if f.outputs and f.outputs[0] == send and not f.queue]
        first = next(f for f in before if f.trigger_after is None and fn.trigger_after == f._id)
        box, sent = {"chat": ("chat-input", "chat-message"), "chat_submit": ("chat-input", "chat-message"),
                     "tool_result": ("tool-result", "tool-result-sent")}.get(name, (None, None))
        if box:  # the step before empties the box and hands its text to the event as its input
            assert first.inputs == [by_id[box]] and by_id[box] in first.outputs and by_id[sent] in first.outputs
            assert by_id[sent] in fn.inputs and by_id[box] not in fn.inputs
        else:  # nothing taken: no box emptied (Run example tool leaves the tool-result box as it is)
            assert not first.inputs and not {by_id["chat-input"], by_id["tool-result"]} & set(first.outputs), name
    run = next(f for f in demo.fns.values() if f.api_name == "run_example_tool")
    before_run = next(f for f in demo.fns.values() if f._id == run.trigger_after)
    assert chat_page.leave_input(engine)[-1] is True and isinstance(before_run.outputs[-1], gr.State)


def test_the_settle_step_gives_back_a_text_no_turn_took():
    """``layout.TakenInput``: the settle step puts back a text the event was sent with but did not take (refused,
    stopped before it was sent), before anything typed since; a taken text stays out of the box."""
    engine = _engine(ScriptedAsyncLLM(["x"]))
    names = chat_page.SETTLE_OUTPUTS

    def settled(*args):
        return dict(zip(names, chat_page.on_chat_settle(engine, new_session(), *args), strict=True))

    assert settled(False, "hello", "")["box"] == "hello"
    assert settled(False, "hello", "more")["box"] == "hello\nmore"  # nothing typed since is lost either
    assert settled(False, "hello", "hello")["box"] == "hello"
    for args in ((True, "hello", ""), (False, "", "typed"), (False, None, None)):
        assert settled(*args)["box"] == gr.skip(), args
    assert settled(False, "hello", "")["taken"] is True  # given back once: a later event's settle leaves the box
    preview = dict(zip(names, chat_page.on_chat_settle(None, new_session(), False, "hello", ""), strict=True))
    assert preview["box"] == "hello" and preview["taken"] is True and preview["chatbot"] == gr.skip()
