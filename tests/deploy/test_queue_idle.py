"""``dots3_demo.serving.queue_idle``: Gradio's queue, idle, waits for its next event instead of looking every 1 ms.

Each check serves a small Gradio app (or the studio) on loopback and calls it with ``gradio_client``. None is
timed: the safety net's wait is made longer than the tests' own time limits, so an event that only the net
would start fails them.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import pytest
from gradio_client import Client, handle_file
from PIL import Image

from dots3_demo.serving import queue_idle
from dots3_demo.serving.queue_idle import wait_for_events
from support.live import live_app
from support.waiting import wait_for

SEQ = 8192
TIMEOUT_S = 60  # far below the safety net's wait (600 s), far above an event's time here


@pytest.fixture
def no_safety_net(monkeypatch):
    """An idle queue that nothing wakes waits 10 minutes: only a push can start an event within a test."""
    monkeypatch.setattr(queue_idle, "IDLE_WAIT_S", 600.0)


def _served(demo: gr.Blocks):
    demo.queue()
    waiter = wait_for_events(demo._queue)
    assert waiter is not None
    demo.launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1")
    return waiter


def test_an_idle_queue_waits_for_a_push_and_the_push_starts_the_event(no_safety_net):
    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(lambda text: text.upper(), box, box, api_name="shout")
    waiter = _served(demo)
    try:
        client = Client(demo.local_url, verbose=False)
        wait_for(lambda: waiter.idle_waits >= 1)  # the queue's loop waits for a push, not sleeping 1 ms at a time
        time.sleep(0.3)
        assert waiter.polls == 0 and waiter.idle_waits == 1  # 0.3 s idle: still the one wait, no look since
        for word in ("one", "two", "three"):  # each started by its push (the net would take 10 minutes)
            assert client.submit(word, api_name="/shout").result(timeout=TIMEOUT_S) == word.upper()
        assert waiter.idle_waits >= 4 and waiter.polls == 0
        client.close()
    finally:
        demo.close()


def test_events_waiting_for_their_concurrency_limit_start_as_the_slot_frees(no_safety_net):
    """Queued events that cannot start yet keep Gradio's own 1 ms look, so each starts as the one before ends."""
    running, most = [0], [0]
    lock = threading.Lock()

    def one_at_a_time(text: str) -> str:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return text

    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(one_at_a_time, box, box, api_name="slow", concurrency_limit=1)
    waiter = _served(demo)
    try:
        clients = [Client(demo.local_url, verbose=False) for _ in range(3)]
        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda c, w: c.submit(w, api_name="/slow").result(timeout=TIMEOUT_S), clients,
                                    ["a", "b", "c"]))
        assert answers == ["a", "b", "c"] and most[0] == 1
        assert waiter.polls > 0  # the queued ones were looked for as Gradio does
        for client in clients:
            client.close()
    finally:
        demo.close()


def test_the_studio_waits_for_its_events(profile, tmp_path, no_safety_net):
    photo = tmp_path / "photo.png"
    Image.new("RGB", (320, 240), "teal").save(photo)
    with live_app(profile, seq=SEQ) as demo:
        assert demo._queue.push.__name__ == "push_and_wake"
        client = Client(demo.local_url, verbose=False, download_files=False)
        for _ in range(2):  # each inspection started by its push
            status, *_ = client.submit([handle_file(str(photo))], api_name="/inspect_images").result(timeout=TIMEOUT_S)
            assert status.startswith("✓ 1 image(s)")
        client.close()


def test_a_gradio_whose_loop_does_not_sleep_so_is_left_as_it_is():
    class OtherQueue:
        async def start_processing(self) -> None:
            await self.wait()

        async def wait(self) -> None: ...

    queue = OtherQueue()
    assert wait_for_events(queue) is None
    assert "start_processing" not in vars(queue)
