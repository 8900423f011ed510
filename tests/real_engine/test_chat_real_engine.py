"""The studio's chat against vLLM's real ``AsyncLLM`` (CPU build, tiny random-weight model), in Chromium.

One studio (``app.py --engine inprocess``, as an operator starts it) serves every test here:
``--max-model-len 4096 --max-num-seqs 4``. Random weights make the words meaningless, so the tests
check lifecycles, figures, vLLM's own request count (``/healthz`` ``requests``) and parsed tool calls.
"""

from __future__ import annotations

import pytest

from support import servers
from tests.browser.conftest import open_studio
from tests.engine.media import png_bytes
from tests.real_engine.pages import WAIT_MS, add_image, record, recorded, send, set_max_tokens, wait_text

pytestmark = [pytest.mark.real_engine, pytest.mark.browser]

MAX_NUM_SEQS = 4
MAX_MODEL_LEN = 4096
LONG = 3000  # max tokens of a reply that streams for many seconds (a random model rarely stops early)


@pytest.fixture(scope="module")
def studio(cpu_python, tiny_model, logs):
    with servers.studio(cpu_python, tiny_model, logs / "studio.log", max_model_len=MAX_MODEL_LEN,
                        max_num_seqs=MAX_NUM_SEQS) as child:
        servers.ready(child)
        yield child


@pytest.fixture
def page(chromium, studio):
    context, page = open_studio(chromium, studio.url)
    try:
        yield page
    finally:
        context.close()


def chat_controls(**changes) -> tuple:
    """The /chat API's inputs after the message, by name (``ChatControls`` gives the order)."""
    from dots3_demo.ui.layout import ChatControls

    values = {"system_prompt": "", "tools_json": "", "temperature": 0.8, "top_p": 0.95, "top_k": -1,
              "max_tokens": 256, "seed": -1, "repetition_penalty": 1.0, "tool_choice": "auto"}
    return ChatControls.ordered({**values, **changes})


def figures(page) -> str:
    return page.locator("#chat-figures").inner_text()


def wait_figures(page, needle: str, timeout: float = WAIT_MS) -> str:
    return wait_text(page, "#chat-figures", needle, timeout)


# The two Gradio-client tests run first: after a Chromium test in this module their jobs were seen not
# to reach the engine within 60 s on this box (not understood yet; run first, and alone, they pass).
def test_stop_aborts_the_engine_request(studio):
    """Stop cancels the chat event (what the button does, through Gradio's queue; a gradio_client job here,
    because a browser re-rendering a 3,000-token random reply may handle a click seconds late)."""
    from gradio_client import Client

    client = Client(studio.url, verbose=False)
    try:
        job = client.submit("Tell me a long story.", *chat_controls(max_tokens=LONG), api_name="/chat")
        servers.wait_requests(studio, 1)  # vLLM holds the request: the reply is streaming
        job.cancel()
        assert servers.wait_no_requests(studio, timeout=10) == 0  # far sooner than 3,000 tokens take
        outputs = job.outputs()
        assert not outputs or "finish" not in outputs[-1][3], outputs[-1][3] if outputs else None
    finally:
        client.close()


def test_sessions_stream_at_once_up_to_max_num_seqs(studio):
    """Four sessions (Gradio clients: no browser rendering in the way) reach the engine together."""
    from gradio_client import Client

    clients = [Client(studio.url, verbose=False) for _ in range(MAX_NUM_SEQS)]
    # LONG tokens each: the first reply still streams when the last job starts on a loaded 2-core box
    jobs = [client.submit(f"Session {i} says hello.", *chat_controls(max_tokens=LONG), api_name="/chat")
            for i, client in enumerate(clients)]
    try:
        for job in jobs:  # a job that failed at once (bad inputs) would never reach the engine
            assert not job.done() or job.exception() is None, job.exception()
        try:
            servers.wait_requests(studio, MAX_NUM_SEQS, timeout=120)  # every session's request is in the engine at once
        except TimeoutError as exc:
            raise AssertionError(f"jobs: {[(job.status().code, job.done()) for job in jobs]}\n{exc}") from None
        results = [job.result(timeout=300) for job in jobs]
    finally:
        for client in clients:
            client.close()
    for index, (chatbot, _box, _panel, figures, _engine_line) in enumerate(results):  # gr.State outputs are not sent
        said = str(chatbot)
        assert f"Session {index} says" in said
        assert not any(f"Session {other} says" in said for other in range(MAX_NUM_SEQS) if other != index)
        assert "finish `length`" in figures or "finish `stop`" in figures, figures  # the Markdown as sent
    assert servers.wait_no_requests(studio) == 0


def test_a_text_turn_streams_with_the_engines_figures(page, studio, shots_dir):
    wait_text(page, "#engine-status", "engine ready")  # the page load's update of the line built at start-up
    set_max_tokens(page, 200)
    record(page, "#chat-figures")
    send(page, "Hello, who are you?")
    done = wait_figures(page, "finish")
    streamed = [text for text in recorded(page, "#chat-figures") if "streaming…" in text]
    assert len(streamed) >= 2, streamed  # partial replies, each with the figures so far
    outputs = [int(t.split("output ")[1].split(" tok")[0].replace(",", "")) for t in streamed]
    assert outputs == sorted(outputs) and outputs[0] < outputs[-1]  # it grew while it streamed
    assert "TTFT" in done and "tok/s" in done and "prompt" in done and "(text " in done
    output = int(done.split("output ")[1].split(" tok")[0].replace(",", ""))
    assert ("finish length" in done and output == 200) or ("finish stop" in done and 0 < output <= 200)
    assert servers.wait_no_requests(studio) == 0
    page.locator("#chat-accordion").screenshot(path=str(shots_dir / "real_engine_text_turn.png"))


def test_the_stop_button_aborts_a_long_reply_at_once(page, studio):
    """Clicked in Chromium once the reply is over a thousand tokens long: the engine lets the request go
    within seconds, the partial reply stays, and the session goes on."""
    set_max_tokens(page, LONG)
    send(page, "Tell me a very long story.")
    page.wait_for_function("() => { const m = document.querySelector('#chat-figures').innerText"
                           ".match(/output ([\\d,]+) tok/); return m && parseInt(m[1].replace(/,/g, '')) > 1000; }",
                           timeout=WAIT_MS)
    page.locator("#chat-stop").click()
    assert servers.wait_no_requests(studio, timeout=10) == 0
    partial = page.locator("#chatbot").inner_text()
    assert "Tell me a very long story." in partial
    set_max_tokens(page, 32)
    send(page, "Short one now.")  # the session goes on after a stop
    assert "finish" in wait_figures(page, "finish")
    assert servers.wait_no_requests(studio) == 0


def test_closing_the_tab_aborts_the_engine_request(chromium, studio):
    context, page = open_studio(chromium, studio.url)
    set_max_tokens(page, LONG)
    send(page, "Another long story, please.")
    servers.wait_requests(studio, 1)  # vLLM holds the request: the reply is streaming
    context.close()
    assert servers.wait_no_requests(studio) == 0


def test_regenerate_and_clear_leave_no_request(page, studio):
    set_max_tokens(page, 48)
    send(page, "Count to three.")
    first = wait_figures(page, "finish")
    page.locator("#chat-regen").click()
    page.wait_for_function("(f) => { const t = document.querySelector('#chat-figures').innerText;"
                           " return t.includes('finish') && t !== f; }", arg=first, timeout=120_000)
    assert servers.wait_no_requests(studio) == 0
    set_max_tokens(page, LONG)
    send(page, "And now a very long answer.")
    servers.wait_requests(studio, 1)  # vLLM holds the request: the reply is streaming
    page.locator("#chat-clear").click()
    assert servers.wait_no_requests(studio) == 0
    page.wait_for_function("() => !document.querySelector('#chatbot').innerText.includes('very long answer')")


def test_a_prompt_over_max_model_len_is_refused_and_the_chat_goes_on(page, studio):
    set_max_tokens(page, 32)
    send(page, " ".join(f"word{i}" for i in range(MAX_MODEL_LEN)))  # ≥ 2 tokens a word: far over the context
    said = wait_figures(page, "The engine refused this request")  # the bubble below says it too, folded
    assert "maximum context length" in said and "Clear the chat" in said
    assert "Refused — not an engine failure" in wait_text(page, "#chatbot", "Refused")
    assert "engine failed" not in page.locator("#chatbot").inner_text().lower()
    assert "engine ready" in page.locator("#engine-status").inner_text()
    send(page, "A short question now.")
    assert "finish" in wait_figures(page, "finish")
    assert servers.wait_no_requests(studio) == 0


def test_media_on_a_text_only_engine_is_refused_in_plain_words(page, studio, tmp_path):
    image = tmp_path / "square.png"
    image.write_bytes(png_bytes())
    add_image(page, image)
    send(page, "What is in the picture?")
    said = wait_figures(page, "This engine takes no image input")
    assert "clear them and start a new chat" in said
    assert "Not sent to the model" in page.locator("#chatbot").inner_text()
    assert servers.engine_requests(studio) == 0


def test_a_forced_tool_call_fills_the_panel_and_the_round_trip_continues(page, studio, shots_dir):
    set_max_tokens(page, 160)
    page.locator("#tool-examples input").click()
    page.get_by_role("option", name="weather", exact=True).click()
    page.wait_for_function("() => document.querySelector('#tools-status').innerText.includes('1 tool(s)')")
    page.locator("#tool-choice").get_by_label("required", exact=True).check()
    record(page, "#tool-panel")  # what the panel shows while the call streams
    send(page, "What is the weather in Paris?")
    done = wait_figures(page, "finish")
    assert "finish tool_calls" in done
    seen = recorded(page, "#tool-panel")
    assert any("writing" in text for text in seen), seen  # the panel filled while the call streamed
    panel = page.locator("#tool-panel").inner_text()
    assert "get_weather" in panel and "waiting for result" in panel
    assert "🛠 get_weather" in page.locator("#chatbot").inner_text()
    page.locator("#chat-accordion").screenshot(path=str(shots_dir / "real_engine_tool_call.png"))
    page.locator("#tool-choice").get_by_label("auto", exact=True).check()
    page.locator("#tool-run").click()  # the example executor answers; the model continues the turn
    page.wait_for_function("() => document.querySelector('#tool-panel').innerText.includes('answered')")
    continued = page.wait_for_function(
        "() => { const t = document.querySelector('#chat-figures').innerText;"
        " return t.includes('finish') && !t.includes('tool_calls') ? t : false; }", timeout=120_000).json_value()
    assert "finish length" in continued or "finish stop" in continued
    assert "get_weather result" in page.locator("#chatbot").inner_text()
    assert servers.wait_no_requests(studio) == 0
