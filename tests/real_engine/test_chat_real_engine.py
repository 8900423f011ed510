"""The studio's chat against vLLM's real ``AsyncLLM`` (CPU build, tiny random-weight model), in Chromium.

One studio (``app.py --engine inprocess``, as an operator starts it) serves every test here:
``--max-model-len 4096 --max-num-seqs 4``. Random weights make the words meaningless, so the tests
check lifecycles, figures, vLLM's own request count (``/healthz`` ``requests``) and parsed tool calls.
"""

from __future__ import annotations

import json
import time

import pytest

from support import servers
from tests.browser.conftest import open_studio
from tests.engine.media import png_bytes
from tests.real_engine import pages
from tests.real_engine.pages import (
    WAIT_MS,
    add_image,
    record,
    recorded,
    send,
    set_max_tokens,
    wait_text,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.browser]

MAX_NUM_SEQS = 4
MAX_MODEL_LEN = 4096
LONG = 3000  # max tokens of a reply that streams for many seconds (a random model rarely stops early)


@pytest.fixture(scope="module")
def studio(cpu_python, tiny_model, logs):
    with servers.studio(cpu_python, tiny_model, logs / "studio.log", max_model_len=MAX_MODEL_LEN,
                        max_num_seqs=MAX_NUM_SEQS) as child:
        servers.ready(child)
        servers.pin_engine(child)  # the tests act during replies: unpinned, on 2 cores, /healthz and Chromium starved
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


def wait_figures(page, needle: str, timeout: float = WAIT_MS, studio=None) -> str:
    return wait_text(page, "#chat-figures", needle, timeout, studio)


def output_tokens(figures_line: str) -> int:
    return int(figures_line.split("output ")[1].split(" tok")[0].replace(",", ""))


def wait_new_figures(page, before: str, studio) -> str:
    """The figures line of the next reply to finish: one with "finish" that is not ``before``."""
    try:
        page.wait_for_function("(f) => { const t = document.querySelector('#chat-figures').innerText;"
                               " return t.includes('finish') && t !== f; }", arg=before, timeout=WAIT_MS)
    except Exception as exc:  # noqa: BLE001 - playwright's timeout: say what the page and the engine show
        raise AssertionError(f"no new reply finished ({type(exc).__name__})\n{pages.context(page, studio)}") from None
    return figures(page)


# The Gradio-client test runs first: after a Chromium test in this module its jobs were seen not to reach the
# engine within 60 s on this box (not understood yet; run first, and alone, it passes).
def _four_sessions(studio) -> tuple[int, list]:
    """Four sessions (Gradio clients) each send a long message at once: the most requests the engine held
    at one moment, and each session's final outputs (``ChatStream`` order, the State left out)."""
    from gradio_client import Client

    clients = [Client(studio.url, verbose=False) for _ in range(MAX_NUM_SEQS)]
    try:
        # LONG tokens each: the first reply still streams when the last job starts on a loaded 2-core box
        jobs = [client.submit(f"Session {i} says hello.", *chat_controls(max_tokens=LONG), api_name="/chat")
                for i, client in enumerate(clients)]
        most, deadline = 0, time.monotonic() + 120
        while most < MAX_NUM_SEQS and time.monotonic() < deadline and not all(job.done() for job in jobs):
            most = max(most, servers.engine_requests(studio) or 0)
            time.sleep(0.05)
        for job in jobs:  # a job that failed (bad inputs, a refusal) never reaches the engine
            assert job.exception(timeout=300) is None, job.exception()
        return most, [job.result(timeout=300) for job in jobs]
    finally:
        for client in clients:
            client.close()


def test_sessions_stream_at_once_up_to_max_num_seqs(studio):
    """Four sessions (Gradio clients: no browser rendering in the way) reach the engine together. A random
    model sometimes ends a reply at once (end of sequence); a round where that kept the four from
    overlapping is run again, once."""
    for attempt in (1, 2):
        most, results = _four_sessions(studio)
        ended_early = [f for *_, f, _line in results if "finish `stop`" in f]
        if most == MAX_NUM_SEQS or not ended_early or attempt == 2:
            break
    assert most == MAX_NUM_SEQS, f"at most {most} requests at once; figures: {[r[2] for r in results]}"
    for index, (chatbot, _panel, figures, _engine_line) in enumerate(results):  # gr.State outputs are not sent
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
    done = wait_figures(page, "finish", studio=studio)
    streamed = [text for text in recorded(page, "#chat-figures") if "streaming…" in text]
    assert len(streamed) >= 2, streamed  # partial replies, each with the figures so far
    outputs = [output_tokens(t) for t in streamed]
    assert outputs == sorted(outputs) and outputs[0] < outputs[-1]  # it grew while it streamed
    assert "TTFT" in done and "tok/s" in done and "prompt" in done and "(text " in done
    output = output_tokens(done)
    assert ("finish length" in done and output == 200) or ("finish stop" in done and 0 < output <= 200)
    assert servers.wait_no_requests(studio) == 0
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "real_engine_text_turn.png"))


def test_the_request_as_sent_copies_from_the_reply(page, studio, tiny_model, shots_dir):
    """The fold under a finished reply holds the request as sent; its JSON block's copy button puts on the clipboard
    what the engine was given: the model, the system prompt, this turn's words and max tokens. (That a real server
    builds the engine's prompt from each copied form is test_request_as_sent_real.py's.)"""
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=studio.url)
    set_max_tokens(page, 24)
    page.locator("#system-prompt textarea").fill("Answer in 'one' line.")
    send(page, "Copy me: what is ```2+2```?")
    wait_figures(page, "finish", studio=studio)
    fold = page.locator("#chat-figures details.d3-request")
    fold.locator("summary").click()
    blocks = fold.locator(".code_wrap")  # Gradio's Markdown: a code block with its copy button
    assert blocks.count() == 3  # curl, Python, JSON
    blocks.nth(2).hover()
    blocks.nth(2).locator(".copy_code_button").click()
    copied = page.wait_for_function("() => navigator.clipboard.readText().then(t => t.startsWith('{') ? t : false)",
                                    timeout=10_000).json_value()
    body = json.loads(copied)
    assert copied == json.dumps(body, indent=2, ensure_ascii=False)  # the JSON form itself, line for line
    assert body["model"] == str(tiny_model) and body["max_tokens"] == 24
    assert body["messages"][0] == {"role": "system", "content": "Answer in 'one' line."}
    assert body["messages"][-1]["content"][-1] == {"type": "text", "text": "Copy me: what is ```2+2```?"}
    assert body["return_token_ids"] is True
    blocks.nth(0).hover()
    blocks.nth(0).locator(".copy_code_button").click()  # curl: its here-document must keep its lines to run
    curl = page.wait_for_function("() => navigator.clipboard.readText().then(t => t.includes('curl') ? t : false)",
                                  timeout=10_000).json_value()
    assert curl.splitlines()[-1] == "REQUEST_JSON" and copied in curl
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "real_engine_request_as_sent.png"))


def test_regenerate_leaves_no_request(page, studio):
    """Regenerate replaces the reply and vLLM holds nothing after it (Stop, Clear and a closed tab during a
    reply: ``test_abort_real_engine.py``)."""
    set_max_tokens(page, 48)
    send(page, "Count to three.")
    first = wait_figures(page, "finish", studio=studio)
    page.locator("#chat-regen").click()
    wait_new_figures(page, first, studio)
    assert servers.wait_no_requests(studio) == 0


def prompt_tokens(figures_line: str) -> int:
    return int(figures_line.split("prompt ")[1].split(" ")[0].replace(",", ""))


def settled_reply(page, number: int, studio) -> str:
    """The figures line once reply ``number`` of ``number`` ended and its event settled (the rating line names
    it, and the figures line no longer carries the event's progress timer)."""
    wait_text(page, "#rate-status", f"reply {number} of {number}", studio=studio)
    try:
        page.wait_for_function("() => { const t = document.querySelector('#chat-figures').innerText.trim();"
                               " return t.includes('finish') && !/^[0-9.]+s/.test(t)"
                               " && !document.querySelector('#chat-send').disabled; }", timeout=WAIT_MS)
    except Exception as exc:  # noqa: BLE001 - playwright's timeout: say what the page and the engine show
        raise AssertionError(f"reply {number} never settled ({type(exc).__name__})\n"
                             f"{pages.context(page, studio)}") from None
    return figures(page).strip()


def test_the_chat_icon_clears_what_the_engine_gets(page, studio):
    """The Chatbot's own trash icon (issue 18 §1): the same question after it costs vLLM the same prompt as the
    first time (before the fix the engine got the whole old conversation, and the old bubbles came back)."""
    set_max_tokens(page, 24)
    send(page, "What is two plus two?")
    first = settled_reply(page, 1, studio)
    send(page, "And three plus three?")
    second = settled_reply(page, 2, studio)
    assert prompt_tokens(second) > prompt_tokens(first)  # the second turn carries the first
    page.locator("#chatbot button[aria-label='Clear']").click()
    wait_text(page, "#rate-status", "No reply to rate yet", studio=studio)
    send(page, "What is two plus two?")
    again = settled_reply(page, 1, studio)
    assert prompt_tokens(again) == prompt_tokens(first), (first, again)
    assert page.locator("#chatbot").inner_text().count("What is two plus two?") == 1
    assert "three plus three" not in page.locator("#chatbot").inner_text()
    assert servers.wait_no_requests(studio) == 0


def test_a_reply_cut_by_the_context_says_so(page, studio, shots_dir):
    """A ~3,850-token prompt in the 4,096 context with max tokens 1,024 (issue 18 §6): vLLM ends the reply with
    ``length`` when prompt + output reach max model len, long before max tokens; the figures line says the
    context was full, not just ``finish length``. (A random model ends a reply early now and then: once more.)"""
    set_max_tokens(page, 1024)
    question = "hello " * 1280  # 3 tokens a word in the preview tokenizer
    done = ""
    for _attempt in (1, 2):
        send(page, question)
        done = settled_reply(page, 1, studio)
        if "finish length" in done:
            break
        page.locator("#chat-clear").click()
        wait_text(page, "#rate-status", "No reply to rate yet", studio=studio)
    assert f"finish length · context full ({MAX_MODEL_LEN:,})" in done, done
    assert prompt_tokens(done) + output_tokens(done) == MAX_MODEL_LEN and output_tokens(done) < 1024, done
    assert "context full" in page.locator("#rate-status").inner_text()
    assert servers.wait_no_requests(studio) == 0
    page.locator("#chat-figures").screenshot(path=str(shots_dir / "real_engine_context_full.png"))


def test_a_prompt_over_max_model_len_is_refused_and_the_chat_goes_on(page, studio):
    """The meter counts the turn with vLLM's renderer and refuses it before the engine sees it; the words stay in
    the box. (The engine's own refusal, for a count the meter cannot make, is tested through vLLM's server in
    test_remote_real_server.py and in tests/workbench/test_compare.py.)"""
    set_max_tokens(page, 32)
    long = " ".join(f"word{i}" for i in range(MAX_MODEL_LEN))  # ≥ 2 tokens a word: far over the context
    send(page, long)
    said = wait_figures(page, "This turn will not fit", studio=studio)
    assert f"the context holds {MAX_MODEL_LEN:,} (max_model_len)" in said and "Clear the chat" in said
    assert "Not sent; your message is still in the box" in said
    # Send emptied the box at once; the step after the refused turn puts its words back
    page.wait_for_function("n => document.querySelector('#chat-input textarea').value.length === n",
                           arg=len(long), timeout=10_000)
    assert page.locator("#chat-input textarea").input_value() == long
    wait_text(page, "#context-meter", "will not fit", studio=studio)  # recounted once the words are back in the box
    chat_text = page.locator("#chatbot").inner_text()
    assert f"word{MAX_MODEL_LEN - 1}" not in chat_text and "engine failed" not in chat_text.lower()  # never sent
    assert "engine ready" in page.locator("#engine-status").inner_text()
    send(page, "A short question now.")
    assert "finish" in wait_figures(page, "finish", studio=studio)
    assert servers.wait_no_requests(studio) == 0


def test_media_on_a_text_only_engine_is_refused_in_plain_words(page, studio, tmp_path):
    image = tmp_path / "square.png"
    image.write_bytes(png_bytes())
    add_image(page, image)
    send(page, "What is in the picture?")
    said = wait_figures(page, "This engine takes no image input", studio=studio)
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
    done = wait_figures(page, "finish", studio=studio)
    assert "finish tool_calls" in done
    seen = recorded(page, "#tool-panel")
    assert any("writing" in text for text in seen), seen  # the panel filled while the call streamed
    panel = page.locator("#tool-panel").inner_text()
    assert "get_weather" in panel and "waiting for result" in panel
    assert "🛠 get_weather" in page.locator("#chatbot").inner_text()
    page.locator("#chat-panel").screenshot(path=str(shots_dir / "real_engine_tool_call.png"))
    page.locator("#tool-choice").get_by_label("auto", exact=True).check()
    page.locator("#tool-run").click()  # the example executor answers; the model continues the turn
    page.wait_for_function("() => document.querySelector('#tool-panel').innerText.includes('answered')")
    continued = page.wait_for_function(
        "() => { const t = document.querySelector('#chat-figures').innerText;"
        " return t.includes('finish') && !t.includes('tool_calls') ? t : false; }", timeout=120_000).json_value()
    assert "finish length" in continued or "finish stop" in continued
    assert "get_weather result" in page.locator("#chatbot").inner_text()
    assert servers.wait_no_requests(studio) == 0
