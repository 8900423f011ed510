"""After Stop, a closed tab or Clear, the chat's figures line never says ``streaming…`` (issue 18 §3): the
app's own handlers (``on_chat``, ``on_chat_settle``, ``on_clear``) over the InProcessEngine on the scripted
vLLM double."""

from __future__ import annotations

import asyncio
import contextlib

from dots3_demo.core.records import Answer
from dots3_demo.core.reply import Reply
from dots3_demo.core.state import ChatSession, initial_state, new_session
from dots3_demo.engine.protocol import TurnStats
from dots3_demo.ui import chat_views, layout
from dots3_demo.ui.chat_page import CLEAR_OUTPUTS, SETTLE_OUTPUTS, on_chat, on_chat_settle, on_clear
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.ui.test_clear_during_reply import CONTROLS, pacer

BAD_CONTROLS = layout.ChatControls.ordered({**layout.ChatControls.named(CONTROLS), "temperature": None})


def _named(outputs) -> dict:
    return dict(zip(layout.ChatStream.names(), outputs, strict=True))


async def _held_reply(double: ScriptedAsyncLLM, engine, *, stop) -> tuple[ChatSession, list[dict]]:
    """Send a message, wait until the reply is held in the engine after two deltas, end it with ``stop``
    (given the streaming task and the generator); the outputs seen."""
    steps = on_chat(engine, pacer(), initial_state(32768), new_session(), "Tell me a story.", *CONTROLS)
    seen: list[dict] = []

    async def stream():
        async for outputs in steps:
            seen.append(_named(outputs))

    task = asyncio.create_task(stream())
    await double.reached_hold.wait()
    while not seen or "one two" not in str(seen[-1]["chatbot"]):
        await asyncio.sleep(0.01)
    assert "streaming…" in seen[-1]["figures"]  # what the page shows while it streams
    await stop(task, steps)
    return seen[-1]["session"], seen


async def _cancel(task, _steps) -> None:  # Stop: Gradio cancels the event's task
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_stop_leaves_figures_that_say_stopped():
    double = ScriptedAsyncLLM(["one", " two", " three", " four"], hold_at=2)
    engine = scripted_engine(double)
    last, _ = asyncio.run(_held_reply(double, engine, stop=_cancel))
    settled = dict(zip(SETTLE_OUTPUTS, on_chat_settle(engine, last), strict=True))  # the step after Stop
    figures = settled["figures"]
    assert isinstance(figures, str), figures
    assert figures.startswith(f"{chat_views.STOPPED} · ") and "streaming" not in figures, figures
    assert "output **2** tok" in figures and "prompt **16**" in figures  # the figures of what arrived
    assert settled["session"].figures == figures  # and the session (its record) says the same


def test_a_closed_tab_leaves_a_session_that_says_stopped():
    async def close(task, steps):  # a closed tab: Gradio closes the generator at its next yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await steps.aclose()

    double = ScriptedAsyncLLM(["one", " two", " three", " four"], hold_at=2)
    last, _ = asyncio.run(_held_reply(double, scripted_engine(double), stop=close))
    assert last.figures.startswith(chat_views.STOPPED) and "streaming" not in last.figures, last.figures


def test_clear_after_stop_leaves_no_figures():
    double = ScriptedAsyncLLM(["one", " two", " three", " four"], hold_at=2)
    engine = scripted_engine(double)
    last, _ = asyncio.run(_held_reply(double, engine, stop=_cancel))
    cleared = dict(zip(CLEAR_OUTPUTS, on_clear(last), strict=True))
    assert cleared["figures"] == "" and cleared["session"].figures == ""
    settled = dict(zip(SETTLE_OUTPUTS, on_chat_settle(engine, last), strict=True))  # the stopped event's settle
    assert settled["figures"] == ""


def test_a_finished_reply_keeps_its_finish_and_a_refusal_its_message_after_settle():
    engine = scripted_engine(ScriptedAsyncLLM(["one", " two"]))

    async def run(controls) -> list[dict]:
        steps = on_chat(engine, pacer(), initial_state(32768), new_session(), "Hi.", *controls)
        return [_named(o) async for o in steps]

    done = asyncio.run(run(CONTROLS))[-1]
    settled = dict(zip(SETTLE_OUTPUTS, on_chat_settle(engine, done["session"]), strict=True))
    assert settled["figures"] == done["figures"] and "finish `stop`" in settled["figures"]
    refused = asyncio.run(run(BAD_CONTROLS))[-1]
    settled = dict(zip(SETTLE_OUTPUTS, on_chat_settle(engine, refused["session"]), strict=True))
    assert settled["figures"] == refused["figures"] and "temperature" in settled["figures"]


def _Reply(finished: bool, finish_reason: str | None) -> Reply:
    return Reply(Answer(stats=TurnStats(output_tokens=3), finish_reason=finish_reason),
                 "done" if finished else "streaming")


def test_the_stopped_line_of_a_reply_that_had_finished_is_its_finish():
    assert chat_views.figures_md(_Reply(True, "stop"), (), stopped=True).endswith("finish `stop`")
    line = chat_views.figures_md(_Reply(False, None), (), stopped=True)
    assert line.startswith("⏹ stopped · ") and "streaming" not in line and "finish" not in line
    assert chat_views.figures_md(_Reply(False, None), ()).endswith("streaming…")
