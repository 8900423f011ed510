"""``SessionReaper`` against Gradio's real ``StateHolder``: a closed tab's session goes whole after
its time to live; one that came back and is in use stays; the rest of the app is untouched."""

from __future__ import annotations

import asyncio
import datetime

import gradio as gr
import pytest
from gradio.state_holder import StateHolder

from dots3_demo.serving.sessions import SessionReaper

T0 = datetime.datetime(2026, 12, 2, 12, 0, 0)


def _at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


@pytest.fixture
def app():
    """A small Blocks with a ``gr.State`` whose delete callback records what it was given."""
    deleted: list = []
    with gr.Blocks() as demo:
        conversation = gr.State([], delete_callback=deleted.append)
        gr.Textbox()
    holder = StateHolder()
    holder.set_blocks(demo)
    return holder, conversation, deleted


def _open(holder, conversation, session_hash: str, value, when: datetime.datetime) -> None:
    holder[session_hash][conversation._id] = value
    holder.time_last_used[session_hash] = when


def test_a_closed_session_goes_whole_after_its_time_to_live(app):
    holder, conversation, deleted = app
    _open(holder, conversation, "closed", ["hello"], _at(0))
    _open(holder, conversation, "open", ["still here"], _at(0))
    reaper = SessionReaper(ttl_s=60)
    reaper.closed("closed", now=_at(1))
    assert reaper.sweep(holder, now=_at(60)) == 0  # 59 s after closing: kept (the tab may reconnect)
    assert "closed" in holder.session_data and reaper.pending == 1
    assert reaper.sweep(holder, now=_at(61)) == 1
    assert "closed" not in holder.session_data and "closed" not in holder.time_last_used
    assert deleted == [["hello"]]  # the gr.State delete callback ran, as Gradio runs it
    assert holder["open"][conversation._id] == ["still here"] and reaper.pending == 0


def test_a_session_used_after_it_closed_stays_while_in_use(app):
    holder, conversation, _ = app
    _open(holder, conversation, "back", ["hi"], _at(0))
    reaper = SessionReaper(ttl_s=60)
    reaper.closed("back", now=_at(1))
    holder.time_last_used["back"] = _at(50)  # the tab reconnected and sent an event
    assert reaper.next_due(holder) == _at(110)
    assert reaper.sweep(holder, now=_at(100)) == 0
    assert "back" in holder.session_data
    assert reaper.sweep(holder, now=_at(110)) == 1  # idle a whole time to live since its last use


def test_sessions_gone_already_are_forgotten(app):
    holder, conversation, _ = app
    reaper = SessionReaper(ttl_s=0)
    reaper.closed("never-seen", now=_at(0))
    reaper.closed(None)  # an unload without a session hash is ignored
    assert reaper.pending == 1
    assert reaper.sweep(holder, now=_at(5)) == 0 and reaper.pending == 0


def test_on_close_sweeps_again_when_the_time_is_up(app):
    holder, conversation, deleted = app
    _open(holder, conversation, "tab", ["x"], datetime.datetime.now())
    reaper = SessionReaper(ttl_s=0.2)

    async def close_and_wait() -> tuple[int, bool]:
        dropped_now = await reaper.on_close(holder, "tab")
        present_then = "tab" in holder.session_data
        await asyncio.sleep(1.2)  # no other tab closes: the timer does the sweep
        return dropped_now, present_then

    dropped_now, present_then = asyncio.run(close_and_wait())
    assert (dropped_now, present_then) == (0, True)
    assert "tab" not in holder.session_data and deleted == [["x"]]


@pytest.mark.parametrize("ttl", [-1, float("nan")])
def test_a_negative_time_to_live_is_refused(ttl):
    with pytest.raises(ValueError, match="0 s or more"):
        SessionReaper(ttl_s=ttl)


def test_a_dropped_session_leaves_nothing_in_gradios_queue(app):
    """Gradio's queue keeps, per session ever seen, a message queue and an event-id set; a dropped
    session's go with it, unless an event of it is still pending or a message still waits."""
    holder, conversation, _ = app
    with gr.Blocks() as demo:
        gr.Textbox()
    demo.queue()
    queue = demo._queue
    for name in ("idle", "pending", "unread", "open"):
        _open(holder, conversation, name, [name], _at(0))
        queue.pending_messages_per_session[name] = asyncio.Queue()  # as Gradio's queue/join makes them
        queue.pending_event_ids_session[name] = set()
    queue.pending_event_ids_session["pending"].add("event-1")
    queue.pending_messages_per_session["unread"].put_nowait("process_completed")
    reaper = SessionReaper(ttl_s=10)
    for name in ("idle", "pending", "unread"):
        reaper.closed(name, now=_at(1))
    assert reaper.sweep(holder, now=_at(20), queue=queue) == 3
    assert set(queue.pending_messages_per_session) == {"pending", "unread", "open"}
    assert set(queue.pending_event_ids_session) == {"pending", "unread", "open"}
    assert set(holder.session_data) == {"open"}
    reaper.closed("gone-by-lru", now=_at(1))  # Gradio evicted its state first: its queue entries go too
    queue.pending_messages_per_session["gone-by-lru"] = asyncio.Queue()
    queue.pending_event_ids_session["gone-by-lru"] = set()
    reaper.sweep(holder, now=_at(30), queue=queue)
    assert "gone-by-lru" not in queue.pending_messages_per_session
    assert "gone-by-lru" not in queue.pending_event_ids_session
