"""A Stop that reaches the server after its reply ended must not cancel the next reply (Gradio's /cancel
cancels by session and event function, whatever event id it is given: ``dots3_demo.serving.cancels``).

The live app over the scripted engine, a Gradio client as the page, and the page's own cancel request
(``POST /gradio_api/cancel``) sent late, by hand."""

from __future__ import annotations

import time

import httpx
import pytest

from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import serving
from tests.browser.test_chat_browser import script
from tests.real_engine.test_chat_real_engine import chat_controls


def _until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def live(profile):
    double = ScriptedAsyncLLM(script, delay_s=0.04)
    with serving(profile, scripted_engine(double)) as demo:
        yield demo, double


def test_a_late_stop_leaves_the_next_reply_alone_and_a_timely_one_cancels(live):
    from gradio_client import Client

    demo, double = live
    url = demo.local_url.rstrip("/")
    chat_fn = next(index for index, fn in demo.fns.items() if fn.api_name == "chat")
    client = Client(url, verbose=False)
    try:
        def pending() -> set[str]:
            return set(demo._queue.pending_event_ids_session.get(client.session_hash, ()))

        def cancel(event_id: str) -> None:
            body = {"session_hash": client.session_hash, "fn_index": chat_fn, "event_id": event_id}
            assert httpx.post(f"{url}/gradio_api/cancel", json=body, timeout=10).json() == {"success": True}

        first = client.submit("alpha", *chat_controls(), api_name="/chat")  # 30 words, about a second
        _until(lambda: len(pending()) == 1, "the first reply running")
        (ended,) = pending()
        first.result(timeout=60)
        second = client.submit("long story", *chat_controls(max_tokens=3000), api_name="/chat")  # 400 words
        _until(lambda: len(double.generated) == len(double.closed_streams) + 1 and len(double.generated) >= 2,
               "the second reply streaming")
        (running,) = pending()
        assert running != ended

        cancel(ended)  # the Stop pressed for the first reply, arriving now
        time.sleep(1.0)
        assert double.aborted == [] and not second.done()  # the second reply streams on

        cancel(running)  # a Stop for the reply that runs: Gradio's own cancel
        request_id = double.generated[-1][2]
        _until(lambda: double.aborted == [request_id], "the engine request aborted")
    finally:
        client.close()
