"""Every way the page offers to clear the chat clears what the model gets (issue 18 §1), in real Chromium.

The Chatbot's own trash icon (top right of the chat) empties the bubbles in the browser; the conversation the
model gets, the rating row and a reply still streaming must go with them, as with the "Clear chat" button.
The engine is the product's ``InProcessEngine`` over the scripted vLLM double with vLLM's *real* renderer for
the preview profile (``tests/engine/real_renderer.py``): the prompt token ids checked here are the ones vLLM's
chat template renders for the conversation the studio sent.
"""

from __future__ import annotations

import re
import time

import pytest

from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import serve
from tests.browser.test_chat_browser import _open, _send

pytestmark = pytest.mark.browser

DELAY_S = 0.04  # per delta: the browser sees a long reply stream
TRASH = "#chatbot button[aria-label='Clear']"  # the Chatbot's own icon (Gradio's label for it)


def replies(tokenizer):
    """The last ``say X`` of the rendered prompt → ``X-1 … X-6``; ``long X`` → 400 words (cleared mid-stream)."""

    def script(engine_input) -> list[str]:
        asked = re.findall(r"\b(say|long) (\w+)", tokenizer.decode(engine_input["prompt_token_ids"]))
        kind, word = asked[-1]
        return [f"{word}-{i} " for i in range(1, (400 if kind == "long" else 6) + 1)]

    return script


@pytest.fixture(scope="module")
def double():
    from tests.engine.real_renderer import build_preview_renderer

    renderer = build_preview_renderer()
    scripted = ScriptedAsyncLLM(replies(renderer.get_tokenizer()), delay_s=DELAY_S)
    scripted.renderer = renderer
    return scripted


@pytest.fixture(scope="module")
def chat_url(profile, double):
    with serve(profile, scripted_engine(double)) as url:
        yield url


@pytest.fixture
def page(chromium, chat_url):
    context, page = _open(chromium, chat_url)
    try:
        yield page
    finally:
        context.close()


def _wait_chat(page, needle: str) -> None:
    page.wait_for_function("(n) => document.querySelector('#chatbot').innerText.includes(n)", arg=needle, polling=10)


def _wait_settled(page, needle: str) -> None:
    """The reply that says ``needle`` finished and the page is ready for the next message."""
    _wait_chat(page, needle)
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('finish')"
                           " && !document.querySelector('#chat-send').disabled")


def _prompt_ids(double, request_id: str) -> list[int]:
    return next(list(i["prompt_token_ids"]) for i, _, r in double.generated if r == request_id)


def _last_request(double) -> str:
    return double.generated[-1][2]


def _wait_aborted(double, request_id: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while request_id not in double.aborted:
        assert time.monotonic() < deadline, f"{request_id} was not aborted: {double.aborted}"
        time.sleep(0.05)


def test_the_chat_icon_clears_what_the_model_gets_and_the_rating_row(page, double, shots_dir):
    _send(page, "say alpha")
    _wait_settled(page, "alpha-6")
    first = _last_request(double)
    page.locator("#rate-up").click()  # the rating row counts the reply
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('reply 1 of 1 · 👍')")
    page.locator(TRASH).click()
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('No reply to rate yet')",
                           timeout=15_000)
    assert page.locator("#rate-reply input").input_value() == ""
    assert "alpha-" not in page.locator("#chatbot").inner_text()
    assert page.locator("#chat-figures").inner_text().strip() == ""
    _send(page, "say alpha")  # the same question again: the model must get exactly what it got the first time
    _wait_settled(page, "alpha-6")
    again = _last_request(double)
    assert again != first
    tokenizer = double.renderer.get_tokenizer()
    prompt = tokenizer.decode(_prompt_ids(double, again))
    assert prompt.count("say alpha") == 1 and "alpha-1" not in prompt, prompt
    assert _prompt_ids(double, again) == _prompt_ids(double, first)  # no hidden history
    assert "reply 1 of 1 · not rated" in page.locator("#rate-status").inner_text()  # the old 👍 is gone
    assert page.locator("#chatbot").inner_text().count("alpha-6") == 1  # the old bubbles did not come back
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "chat_icon_cleared.png"))


def test_the_chat_icon_during_a_reply_stops_it_and_the_old_messages_stay_gone(page, double):
    _send(page, "say bravo")
    _wait_settled(page, "bravo-6")
    _send(page, "long charlie")
    _wait_chat(page, "charlie-3")
    streaming = _last_request(double)
    page.locator(TRASH).click()
    _wait_aborted(double, streaming)  # the reply in flight was stopped with the chat
    page.wait_for_function("() => !document.querySelector('#chat-send').disabled")
    time.sleep(0.5)  # a late step of the stopped reply would show here
    shown = page.locator("#chatbot").inner_text()
    assert "charlie" not in shown and "bravo" not in shown, shown
    assert "streaming" not in page.locator("#chat-figures").inner_text()
    _send(page, "say delta")
    _wait_settled(page, "delta-6")
    prompt = double.renderer.get_tokenizer().decode(_prompt_ids(double, _last_request(double)))
    assert "bravo" not in prompt and "charlie" not in prompt, prompt
    shown = page.locator("#chatbot").inner_text()
    assert "charlie" not in shown and "bravo" not in shown, shown
    assert "reply 1 of 1" in page.locator("#rate-status").inner_text()
