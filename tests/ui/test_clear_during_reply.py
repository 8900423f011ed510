"""Clear while a reply streams: the page sends Clear (``queue=False``) and the chat event's cancel as two
requests, so the reply may step once more after Clear wrote the empty session. The app's own handlers
(``on_chat``, ``on_clear``, ``on_chat_settle``) must still end on the cleared chat and abort the request."""

from __future__ import annotations

import asyncio

from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.state import ChatSession, clear_session, current_session, initial_state, new_session
from dots3_demo.ui import layout
from dots3_demo.ui.chat_page import CLEAR_OUTPUTS, SETTLE_OUTPUTS, on_chat, on_chat_settle, on_clear
from support.doubles import ScriptedAsyncLLM, scripted_engine

CONTROLS = layout.ChatControls.ordered({
    "system_prompt": "", "tools_json": "", "temperature": 0.8, "top_p": 0.95, "top_k": -1, "max_tokens": 64,
    "seed": -1, "repetition_penalty": 1.0, "tool_choice": "auto"})


def pacer() -> StreamPacer:
    return StreamPacer(min_interval_s=0.0, max_updates_per_s=float("inf"), render_chars_per_s=float("inf"))  # all steps


def _named(outputs) -> dict:
    return dict(zip(layout.ChatStream.names(), outputs, strict=True))


def test_a_reply_cleared_mid_stream_stops_aborts_and_settles_on_the_empty_chat():
    async def main():
        double = ScriptedAsyncLLM(["one", " two", " three", " four"], hold_at=2)
        engine = scripted_engine(double)
        studio = initial_state(32768)
        session = new_session()
        steps = on_chat(engine, pacer(), studio, session, "Tell me a story.", *CONTROLS)
        seen = []

        async def stream():
            async for outputs in steps:
                seen.append(_named(outputs))

        task = asyncio.create_task(stream())
        await double.reached_hold.wait()  # the reply held in the engine after " two"

        async def shown_two():
            while not seen or "one two" not in str(seen[-1]["session"].display):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(shown_two(), 10)
        last = seen[-1]["session"]
        clear = dict(zip(CLEAR_OUTPUTS, on_clear(last), strict=True))  # Clear arrives before the cancel does
        chatbot, cleared, panel, figures = clear["chatbot"], clear["session"], clear["tool_panel"], clear["figures"]
        assert (chatbot, panel, figures, cleared.display) == ([], [], "", ())
        assert clear["reply_picker"].choices == [] and clear["rating_note"] == ""
        before = len(seen)
        double.released.set()  # the engine sends " three": the reply must not show it
        await asyncio.wait_for(task, 10)
        assert len(seen) == before, [s["chatbot"] for s in seen[before:]]
        (_, _, request_id), = double.generated
        for _ in range(100):  # the close runs the engine's abort in its finally; give a loaded box time
            if double.aborted:
                break
            await asyncio.sleep(0.05)
        assert double.aborted == [request_id]  # closing the stale reply let the engine request go
        # settle runs last with the session the event wrote last (the old conversation)
        settled = dict(zip(SETTLE_OUTPUTS, on_chat_settle(engine, last), strict=True))
        assert settled["chatbot"] == [] and settled["tool_panel"] == [] and settled["figures"] == ""
        assert settled["session"].display == () and not settled["session"].stale
        # the next message starts from the cleared chat
        again = on_chat(engine, pacer(), studio, settled["session"], "Hi.", *CONTROLS)
        outputs = [_named(o) async for o in again]
        said = str(outputs[-1]["chatbot"])
        assert "Hi." in said and "Tell me a story." not in said

    asyncio.run(main())


def test_settle_keeps_a_conversation_that_was_not_cleared():
    engine = scripted_engine(ScriptedAsyncLLM(["x"]))
    session = new_session()
    kept = ChatSession(session_id=session.session_id, display=({"role": "user", "content": "hi"},),
                       clears=session.clears)
    settled = dict(zip(SETTLE_OUTPUTS, on_chat_settle(engine, kept), strict=True))
    assert settled["session"] is kept and settled["chatbot"] == [{"role": "user", "content": "hi"}]
    clear_session(kept)
    assert kept.stale and current_session(kept).display == ()


def test_every_way_to_clear_the_chat_is_wired_to_the_same_clearing(profile):
    """The "Clear chat" button and the Chatbot's own trash icon (its ``clear`` event, issue 18 §1): the same
    handler, the same outputs (the conversation the model gets, the rating row…), and both stop every reply."""
    from dots3_demo.ui import build_interface

    demo = build_interface(profile, scripted_engine(ScriptedAsyncLLM(["x"])), seq=32768)
    chatbot = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "chatbot")
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "chat-clear")
    def wired(block, event: str):
        fns = [fn for fn in demo.fns.values() if (block._id, event) in fn.targets]
        handler = next(fn for fn in fns if not fn.is_cancel_function)
        cancels = sorted(c for fn in fns for c in fn.cancels)
        return handler, cancels

    (icon, icon_cancels), (clear, clear_cancels) = wired(chatbot, "clear"), wired(button, "click")
    assert icon.fn is on_clear and clear.fn is on_clear
    assert [b._id for b in icon.outputs] == [b._id for b in clear.outputs] and len(icon.outputs) == len(CLEAR_OUTPUTS)
    assert [b._id for b in icon.inputs] == [b._id for b in clear.inputs]
    chat = next(fn for fn in demo.fns.values() if fn.api_name == "chat")
    assert chat._id in icon_cancels and icon_cancels == clear_cancels  # a reply streaming is stopped by either
