"""The one-click examples in real Chromium: each fills its panels, the inspector runs, and Send carries the files.

Runs against the live app with an ``InProcessEngine`` over the scripted vLLM double (so the chat box
is enabled and the request the engine receives can be checked), plus one click in preview mode.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.ui.examples import ELEM_ID, EXAMPLES_DIR, StudioExample, studio_examples
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import SEQ, serve

pytestmark = pytest.mark.browser

TAB_NAMES = {"frames": "Frames", "budget": "Budget", "interleave": "Interleave", "images": "Image grid",
             "mel": "Audio mel"}
SUMMARY_ROWS_JS = "() => [...document.querySelectorAll('#summary td:first-child')].map(td => td.innerText.trim())"



@pytest.fixture(scope="module")
def double():
    return ScriptedAsyncLLM(lambda engine_input: ["Noted ", "the ", "example."], delay_s=0.01)


@pytest.fixture(scope="module")
def engine_url(profile, double):
    with serve(profile, scripted_engine(double)) as url:
        yield url


@pytest.fixture
def engine_page(chromium, engine_url):
    context = chromium.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(engine_url)
    page.wait_for_selector(f"#{ELEM_ID} button")
    try:
        yield page
    finally:
        context.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _click(page, example: StudioExample) -> None:
    page.locator(f"#{ELEM_ID}").get_by_text(example.label, exact=True).click()


def _wait_chat_box(page, text: str) -> None:
    page.wait_for_function("t => document.querySelector('#chat-input textarea').value === t", arg=text)


def _expected_rows(example: StudioExample) -> list[str]:
    return (["video frames", "video sound"] if example.video else []) + (["images"] if example.images else []) \
        + (["audio clip"] if example.audio else [])


def _wait_summary(page, example: StudioExample) -> None:
    """Until the summary lists exactly the example's media (so every panel's event has run)."""
    media_rows = ["video frames", "video sound", "images", "audio clip"]
    want = _expected_rows(example)
    page.wait_for_function(
        f"([want, all]) => {{ const rows = ({SUMMARY_ROWS_JS})();"
        " return all.every(r => rows.includes(r) === want.includes(r)); }",
        arg=[want, media_rows],
    )
    if not want:
        page.wait_for_function("() => document.querySelector('#summary').innerText.includes('Nothing uploaded')")


def _selected_tab(page) -> str:
    return page.locator("#views [role=tab][aria-selected=true]").inner_text().strip()


def _wait_idle(page) -> None:
    """No upload still inspected (the status line shows ⏳ for a busy panel) and no event still running
    or queued (Gradio's progress in the status markdown)."""
    page.wait_for_function(
        "() => !document.querySelector('#status').innerText.match(/⏳|queue:|processing|\\d+\\.\\ds/)")


def test_every_example_fills_its_panels_and_runs_the_inspector(engine_page, profile, shots_dir):
    page = engine_page
    video_report = inspect_file(EXAMPLES_DIR / "room_clip.mp4", profile, VideoSettings(seq=SEQ), expected="video")
    for example in studio_examples():
        _click(page, example)
        _wait_chat_box(page, example.prompt)
        _wait_summary(page, example)
        if example.video:
            page.wait_for_function("n => document.querySelectorAll('#frames-gallery .thumbnail-item').length === n",
                                   arg=len(video_report.frames))
            page.wait_for_selector('#video-input video[src*="/gradio_api/file="]', state="attached")
            assert "Sound track kept" in page.locator("#summary").inner_text()
            _wait_idle(page)
            time.sleep(0.7)  # let the frames decode before the screenshot
            page.screenshot(path=str(shots_dir / "examples.png"), full_page=True)
        if example.images:
            page.wait_for_function("n => document.querySelectorAll('#grid-gallery img').length === n",
                                   arg=len(example.images))
            names = "".join(page.locator("#images-input").inner_text().split())  # the name is split in spans
            assert all(name in names for name in example.images), names
        if example.audio:
            page.wait_for_function("n => document.querySelector('#mel-info').innerText.includes(n)",
                                   arg=example.audio)
        if example.tools:
            page.wait_for_function("() => document.querySelector('#tools-status').innerText.includes('✓ 3 tool(s)')")
            assert "get_weather" in page.locator("#tools-json").inner_text()
        else:
            page.wait_for_function("() => document.querySelector('#tools-status').innerText.includes('No tools')")
        if example.tab:
            assert _selected_tab(page) == TAB_NAMES[example.tab]
        _wait_idle(page)
        if example.images and example.audio:
            time.sleep(0.7)
            page.screenshot(path=str(shots_dir / "examples_mixed.png"), full_page=False)
    toasts = " ".join(t.inner_text() for t in page.locator(".toast-body").all())
    assert "rejected" not in toasts.lower(), toasts


def _send_and_capture(page, double) -> dict:
    """Press Send; return the renderer call the engine double recorded for it."""
    before = len(double.renderer.calls)
    page.locator("#chat-send").click()
    deadline = time.monotonic() + 60
    while len(double.renderer.calls) == before:
        assert time.monotonic() < deadline, "the engine got no request"
        time.sleep(0.05)
    page.wait_for_function("() => document.querySelector('#chatbot').innerText.includes('the example.')")
    page.wait_for_function("() => !document.querySelector('#chat-send').disabled")
    return double.renderer.calls[-1]


def _user_text(call: dict) -> str:
    content = call["conversations"][0][-1]["content"]
    return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def test_example_media_and_tools_reach_the_engine(engine_page, double):
    """After a click, Send carries exactly the example's files (by content hash), prompt and tools."""
    page = engine_page
    by_label = {e.label: e for e in studio_examples()}
    video = next(e for e in by_label.values() if e.video)
    mixed = next(e for e in by_label.values() if e.images and e.audio)
    tools = next(e for e in by_label.values() if e.tools)

    _click(page, video)
    _wait_chat_box(page, video.prompt)
    _wait_summary(page, video)
    _wait_idle(page)
    call = _send_and_capture(page, double)
    uuids = call["prompt_extras"]["multi_modal_uuids"]
    assert uuids == {"video": [_sha(EXAMPLES_DIR / video.video)]}
    assert _user_text(call) == video.prompt
    assert call["prompt_extras"]["mm_processor_kwargs"]["seq"] == SEQ

    page.locator("#chat-clear").click()  # a new chat: the next media would not mix with the video
    _click(page, mixed)
    _wait_chat_box(page, mixed.prompt)
    _wait_summary(page, mixed)
    _wait_idle(page)
    call = _send_and_capture(page, double)
    uuids = call["prompt_extras"]["multi_modal_uuids"]
    assert set(uuids) == {"image", "audio"} and len(uuids["image"]) == len(mixed.images)
    assert uuids["audio"] == [_sha(EXAMPLES_DIR / mixed.audio)]
    assert _user_text(call) == mixed.prompt

    page.locator("#chat-clear").click()
    _click(page, tools)
    _wait_chat_box(page, tools.prompt)
    _wait_summary(page, tools)
    page.wait_for_function("() => document.querySelector('#tools-status').innerText.includes('✓ 3 tool(s)')")
    _wait_idle(page)
    call = _send_and_capture(page, double)
    sent_tools = call["chat_params"].chat_template_kwargs["tools"]
    assert [t["function"]["name"] for t in sent_tools] == ["get_weather", "search", "calculator"]
    assert "multi_modal_uuids" not in call["prompt_extras"]
    assert _user_text(call) == tools.prompt


def test_examples_in_preview_mode_fill_the_panels_and_show_the_prompt(page):
    """No engine: the inspector still runs; the (disabled) chat box shows the suggested prompt."""
    chart = next(e for e in studio_examples() if e.images and not e.audio)
    _click(page, chart)
    _wait_chat_box(page, chart.prompt)
    _wait_summary(page, chart)
    page.wait_for_function("() => document.querySelectorAll('#grid-gallery img').length === 1")
    assert _selected_tab(page) == "Image grid"
    assert not page.locator("#chat-input textarea").is_enabled()
