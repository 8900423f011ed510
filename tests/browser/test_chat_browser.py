"""The engine chat in real Chromium: the live app over an InProcessEngine on the scripted double."""

from __future__ import annotations

import time

import pytest

from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import serve

pytestmark = pytest.mark.browser

DELAY_S = 0.04  # per delta: slow enough for the browser to see partial replies
WORDS = 30
TOOL_CALL = ["<dots_function_call>\n<invoke name=\"get_weather\">\n",
             "<parameter name=\"city\">Paris</parameter>\n</invoke>\n</dots_function_call>"]


def _last_user_text(conversation) -> str:
    content = conversation[-1]["content"]
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def script(engine_input) -> list[str]:
    """Answer per message: ``alpha`` → ``alpha-1 … alpha-30``; ``weather`` → a tool call mid-text;
    ``long …`` → 400 words (for Stop / tab close)."""
    if engine_input["conversation"][-1]["role"] == "tool":
        return [f"{w} " for w in "The example tool says 21 °C and partly cloudy in Paris.".split()]
    message = _last_user_text(engine_input["conversation"]).strip()
    word = message.split()[-1]
    if message.startswith("weather"):
        return ["<think>The user asks for the weather in Paris;", " get_weather can answer that.</think>",
                "Let me check the weather. ", *TOOL_CALL, *[f" then-{i}" for i in range(1, WORDS + 1)]]
    count = 400 if message.startswith("long") else WORDS
    return [f"{word}-{i} " for i in range(1, count + 1)]



@pytest.fixture(scope="module")
def double():
    return ScriptedAsyncLLM(script, delay_s=DELAY_S)


@pytest.fixture(scope="module")
def chat_url(profile, double):
    with serve(profile, scripted_engine(double)) as url:
        yield url


def _open(chromium, url):
    context = chromium.new_context(viewport={"width": 1440, "height": 1100})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector("#chat-input textarea")
    return context, page


@pytest.fixture
def page(chromium, chat_url):
    context, page = _open(chromium, chat_url)
    try:
        yield page
    finally:
        context.close()


def _send(page, text: str) -> None:
    page.locator("#chat-input textarea").fill(text)
    page.locator("#chat-send").click()


def _chat_text(page) -> str:
    return page.locator("#chatbot").inner_text()


def _wait_text(page, needle: str, *, absent: str | None = None, timeout: float = 30_000) -> None:
    page.wait_for_function(
        "([needle, absent]) => { const t = document.querySelector('#chatbot').innerText;"
        " return t.includes(needle) && (!absent || !t.includes(absent)); }",
        arg=[needle, absent], timeout=timeout, polling=10,
    )


def _request_for(double, text: str) -> str:
    for engine_input, _, request_id in reversed(double.generated):
        if _last_user_text(engine_input["conversation"]).strip() == text:
            return request_id
    raise AssertionError(f"no request for {text!r}")


def _wait_aborted(double, request_id: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if request_id in double.aborted:
            return
        time.sleep(0.05)
    raise AssertionError(f"{request_id} was not aborted: {double.aborted}")


def test_reply_streams_in_progressively(page, double, shots_dir):
    _send(page, "say alpha")
    _wait_text(page, "alpha-3", absent=f"alpha-{WORDS}")  # a partial bubble…
    partial = _chat_text(page)
    assert "alpha-1" in partial and f"alpha-{WORDS}" not in partial
    # Send stays disabled while the reply streams (mid-stream updates carry its label as a plain value)
    _wait_text(page, "alpha-6", absent=f"alpha-{WORDS}")
    assert not page.locator("#chat-send").is_enabled()
    _wait_text(page, f"alpha-{WORDS}")  # …then the final one
    page.wait_for_function("() => !document.querySelector('#chat-send').disabled")
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('finish')")
    figures = page.locator("#chat-figures").inner_text()
    assert "finish stop" in figures and "TTFT" in figures and "output" in figures
    assert "engine ready" in page.locator("#engine-status").inner_text()
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "chat_stream.png"))


def test_tool_call_reaches_the_panel_while_text_streams(page, double, shots_dir):
    page.locator("#tool-examples input").click()
    page.get_by_role("option", name="weather", exact=True).click()
    page.wait_for_function("() => document.querySelector('#tools-status').innerText.includes('1 tool(s)')")
    _send(page, "weather in Paris")
    page.wait_for_function(
        "([last]) => document.querySelector('#tool-panel').innerText.includes('get_weather')"
        " && !document.querySelector('#chatbot').innerText.includes(last)",
        arg=[f"then-{WORDS}"], polling=10,
    )
    assert "waiting for result" in page.locator("#tool-panel").inner_text()
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "chat_tool_call_streaming.png"))
    _wait_text(page, f"then-{WORDS}")
    assert "🛠 get_weather" in _chat_text(page)
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('tool_calls')")
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "chat_tool_call.png"))
    page.locator("#tool-run").click()  # the round trip: the example executor answers, the model continues
    page.wait_for_function("() => document.querySelector('#tool-panel').innerText.includes('answered')")
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('finish')")
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "chat_tool_round_trip.png"))
    page.screenshot(path=str(shots_dir / "chat_full.png"), full_page=True)


def _box(page) -> str:
    return page.locator("#chat-input textarea").input_value()


def test_the_box_empties_on_send_keeps_what_is_typed_meanwhile_and_gets_back_a_refused_message(page, double,
                                                                                                shots_dir):
    """The box is no output of the streaming reply: Send empties it at once (the step before the reply), what is
    typed while the reply streams stays, and a message no turn took (refused before it was sent: longer than the
    context) comes back."""
    _send(page, "say delta")
    page.wait_for_function("() => document.querySelector('#chat-input textarea').value === ''", polling=10)
    _wait_text(page, "delta-3", absent=f"delta-{WORDS}")
    page.locator("#chat-input textarea").fill("next question")  # typed while the reply streams
    _wait_text(page, f"delta-{WORDS}")
    page.wait_for_function("() => !document.querySelector('#chat-send').disabled")
    time.sleep(0.3)  # the settle step has run: nothing it sends may touch the box
    assert _box(page) == "next question"
    sent = len(double.generated)
    too_long = "word " * 33_000  # more tokens than the engine's context (32,768): the meter refuses it unsent
    page.locator("#chat-input textarea").fill(too_long)
    page.locator("#chat-send").click()
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('will not fit')")
    page.wait_for_function("n => document.querySelector('#chat-input textarea').value.length === n",
                           arg=len(too_long), polling=10, timeout=10_000)
    assert len(double.generated) == sent  # refused before the engine
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "chat_refused_kept_in_box.png"))


def _tool_box(page) -> str:
    return page.locator("#tool-result textarea").input_value()


def test_the_tool_result_box_gets_back_a_result_no_call_took_and_empties_for_one_that_is_taken(page, double):
    """The tool-result box works as the chat box (``layout.TakenInput``): a result sent while no call waits comes
    back, with the notice; one sent for a waiting call is taken (the box stays empty) and reaches the model."""
    page.locator("#tool-result textarea").fill('{"temperature": 7}')
    page.locator("#tool-send").click()
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('No tool call is "
                           "waiting')", timeout=10_000)
    page.wait_for_function("() => document.querySelector('#tool-result textarea').value === '{\"temperature\": 7}'",
                           polling=10, timeout=10_000)
    page.locator("#tool-examples input").click()
    page.get_by_role("option", name="weather", exact=True).click()
    page.wait_for_function("() => document.querySelector('#tools-status').innerText.includes('1 tool(s)')")
    _send(page, "weather in Lyon")
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('tool_calls')")
    assert _tool_box(page) == '{"temperature": 7}'  # the reply left the box alone
    page.locator("#tool-result textarea").fill('{"temperature": 19}')
    page.locator("#tool-send").click()
    page.wait_for_function("() => document.querySelector('#tool-result textarea').value === ''", polling=10)
    page.wait_for_function("() => document.querySelector('#tool-panel').innerText.includes('answered')")
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('finish')")
    time.sleep(0.3)  # the settle step has run: the taken result stays out of the box
    assert _tool_box(page) == ""
    last = double.generated[-1][0]["conversation"][-1]
    assert last["role"] == "tool" and "19" in str(last["content"]), last


def test_stop_ends_the_stream_and_aborts(page, double, shots_dir):
    _send(page, "long bravo")
    _wait_text(page, "bravo-3")
    page.locator("#chat-stop").click()
    request_id = _request_for(double, "long bravo")
    _wait_aborted(double, request_id)
    time.sleep(0.3)
    frozen = _chat_text(page)
    time.sleep(0.5)
    assert _chat_text(page) == frozen and "bravo-400" not in frozen
    assert page.locator("#chat-send").is_enabled()
    assert page.locator("#chat-panel .error").count() == 0  # no red "Error" badge after Stop
    # the figures line says the reply was stopped, with the figures of what arrived, and no longer "streaming…"
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.startsWith('⏹ stopped')",
                           timeout=10_000)
    time.sleep(0.5)
    figures = page.locator("#chat-figures").inner_text()
    assert "streaming" not in figures and "finish" not in figures and "output" in figures, figures
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "chat_stopped.png"))


def test_closing_the_tab_aborts(chromium, chat_url, double):
    context, page = _open(chromium, chat_url)
    _send(page, "long charlie")
    _wait_text(page, "charlie-3")
    request_id = _request_for(double, "long charlie")
    context.close()
    _wait_aborted(double, request_id)


def test_two_sessions_stream_at_once_without_mixing(chromium, chat_url, double):
    (ctx_a, a), (ctx_b, b) = _open(chromium, chat_url), _open(chromium, chat_url)
    try:
        _send(a, "say delta")
        _send(b, "say echo")
        _wait_text(a, "delta-2")
        _wait_text(b, "echo-2")
        # both partial at the same moment: they stream concurrently, not one after the other
        text_a, text_b = _chat_text(a), _chat_text(b)
        assert f"delta-{WORDS}" not in text_a or f"echo-{WORDS}" not in text_b
        _wait_text(a, f"delta-{WORDS}")
        _wait_text(b, f"echo-{WORDS}")
        assert "echo-" not in _chat_text(a) and "delta-" not in _chat_text(b)
    finally:
        ctx_a.close()
        ctx_b.close()
