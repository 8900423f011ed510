"""The researcher's workbench in real Chromium (issue 12): the work layout at 1440×900 with an engine attached,
rating replies and regenerating from one.

The engine is the product's ``InProcessEngine`` over the scripted vLLM double, with vLLM's *real* renderer and
Dots processor for the bundled preview profile (``tests/engine/real_renderer.py``, CPU preprocessing only): the
prompt tokens under each reply are vLLM's own count for the media sent, so the figures line in the pictures is
what a GPU engine would say; only the words of the replies are scripted.

``UPDATE_DOCS=1`` also copies the layout's pictures to ``docs/work-engine.png`` and ``docs/work-preview.png``.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.ui.examples import ELEM_ID, EXAMPLES_DIR, studio_examples
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import SEQ, serve

pytestmark = pytest.mark.browser

WINDOW = {"width": 1440, "height": 900}
DOCS = Path(__file__).resolve().parents[2] / "docs"
DELAY_S = 0.05  # per delta: the browser sees the reply stream
# What the visitor sees without scrolling, with an engine attached (issue 12 §5).
IN_VIEW = ("#video-input", "#images-input", "#audio-tabs", "#frame-strip", "#summary", "#glance-links",
           "#chatbot", "#chat-input", "#chat-send", "#chat-stop", "#chat-figures")
ANSWER = ("The door says ROOM 3, and the voice in the sound track says the password is blue falcon. "
          "Both are in what the model was given: the sign in every frame, the voice in segments 2 and 3.")


def replies(tokenizer):
    """The script, reading the prompt vLLM rendered: the last ``say X`` → ``X-1 … X-6``; else (the clip's
    question) a thought, then the answer word by word."""

    def script(engine_input) -> list[str]:
        said = re.findall(r"\bsay (\w+)", tokenizer.decode(engine_input["prompt_token_ids"]))
        if said:
            return [f"{said[-1]}-{i} " for i in range(1, 7)]
        return ["<think>The frames show a door with a sign;", " the sound track has a voice.</think>",
                *[f"{w} " for w in ANSWER.split()]]

    return script


@pytest.fixture(scope="module")
def double():
    from tests.engine.real_renderer import build_preview_renderer

    renderer = build_preview_renderer()  # vLLM's own prompt for the media: its token counts are real
    scripted = ScriptedAsyncLLM(replies(renderer.get_tokenizer()), delay_s=DELAY_S)
    scripted.renderer = renderer
    return scripted


@pytest.fixture(scope="module")
def engine_url(profile, double):
    with serve(profile, scripted_engine(double)) as url:
        yield url


def _open(chromium, url):
    context = chromium.new_context(viewport=WINDOW)
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(url)
    page.wait_for_selector(f"#{ELEM_ID} button")
    return context, page


@pytest.fixture
def page(chromium, engine_url):
    context, page = _open(chromium, engine_url)
    try:
        yield page
    finally:
        context.close()


def _inside_window(page, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not shown"
    assert box["width"] > 0 and box["height"] > 0, selector
    assert box["x"] >= 0 and box["x"] + box["width"] <= WINDOW["width"], (selector, box)
    assert box["y"] >= 0 and box["y"] + box["height"] <= WINDOW["height"], (selector, box)
    return box


def _load_example_clip(page) -> tuple:
    example = next(e for e in studio_examples() if e.video)
    page.locator(f"#{ELEM_ID}").get_by_text(example.label, exact=True).click()
    return example


def _send(page, text: str) -> None:
    page.locator("#chat-input textarea").fill(text)
    page.locator("#chat-send").click()


def _wait_chat(page, needle: str, *, absent: str | None = None) -> None:
    page.wait_for_function(
        "([needle, absent]) => { const t = document.querySelector('#chatbot').innerText;"
        " return t.includes(needle) && (!absent || !t.includes(absent)); }", arg=[needle, absent], polling=10)


def _wait_finished(page) -> None:
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('finish')"
                           " && !document.querySelector('#chat-send').disabled")


def _shot(page, name: str, shots_dir: Path) -> Path:
    shot = shots_dir / name
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 50_000  # a real picture, not a blank page
    if os.environ.get("UPDATE_DOCS"):
        shutil.copyfile(shot, DOCS / name)
    return shot


# ---------------------------------------------------------------- the work layout (§5)
def test_work_layout_shows_uploads_what_the_model_sees_and_the_streaming_reply_in_one_window(page, profile,
                                                                                            shots_dir):
    example = _load_example_clip(page)
    report = inspect_file(EXAMPLES_DIR / Path(example.video).name, profile, VideoSettings(seq=SEQ), expected="video")
    page.wait_for_function("n => document.querySelectorAll('#frame-strip figure img').length === n",
                           arg=len(report.frames))
    page.wait_for_function("() => document.querySelector('#summary').innerText.includes('Sound track kept')")
    # the strip says what the Frames tab and the inspector say: each frame's timestamp text and tokens
    captions = page.locator("#frame-strip figcaption").all_inner_texts()
    assert [" ".join(c.split()) for c in captions] == [f"{f.timestamp} ≈{f.tokens} tok" for f in report.frames]
    head = page.locator("#frame-strip .d3-strip-head").inner_text()
    assert f"{len(report.frames)} frames" in head and f"{report.image_pad_tokens:,} image tok" in head
    assert f"{report.solver.effective_fps:.2f} fps" in head and f"patch cap {report.solver.patch_cap}" in head
    summary = page.locator("#summary").inner_text()
    assert f"{report.image_pad_tokens:,}" in summary and f"{report.audio_pad_tokens:,}" in summary

    page.locator("#chat-send").click()  # the example put its question in the box
    _wait_chat(page, "ROOM 3", absent="segments 2 and 3")  # mid-stream
    for selector in IN_VIEW:
        _inside_window(page, selector)
    chat = _inside_window(page, "#chatbot")
    latest = page.locator("#chatbot [data-testid=bot]").last.bounding_box()
    assert latest is not None and latest["y"] < chat["y"] + chat["height"]  # the streaming reply is in view
    assert latest["y"] + latest["height"] > chat["y"]
    assert page.evaluate("() => window.scrollY") == 0
    _wait_chat(page, "segments 2 and 3")
    _wait_finished(page)
    figures = page.locator("#chat-figures").inner_text()
    # vLLM's own prompt for the clip: the engine's counts equal the inspector's (the double only writes the words)
    assert f"engine: video frames {report.image_pad_tokens:,} · inspector: {report.image_pad_tokens:,} ✓" in figures
    for selector in IN_VIEW:
        _inside_window(page, selector)
    page.wait_for_function("() => [...document.querySelectorAll('#frame-strip img, #video-input video')]"
                           ".every(i => i.tagName === 'VIDEO' || (i.complete && i.naturalWidth > 0))")
    time.sleep(0.5)  # the video element's poster frame
    _shot(page, "work-engine.png", shots_dir)

    # the detail tabs are one click away: a link of the glance selects its tab and scrolls to it
    page.locator("#goto-budget").click()
    page.wait_for_function("() => document.querySelector('#views [role=tab][aria-selected=true]')"
                           ".innerText.trim() === 'Budget'")
    page.wait_for_function("() => { const r = document.querySelector('#views').getBoundingClientRect();"
                           " return r.top >= -1 && r.top < innerHeight / 2; }")
    page.locator("#goto-mel").click()
    page.wait_for_function("() => document.querySelector('#views [role=tab][aria-selected=true]')"
                           ".innerText.trim() === 'Audio mel'")


def test_preview_keeps_the_inspector_first(chromium, profile, shots_dir):
    with serve(profile) as url:
        context, page = _open(chromium, url)
        try:
            _load_example_clip(page)
            page.wait_for_function("() => document.querySelectorAll('#frames-gallery .thumbnail-item img').length > 0")
            page.wait_for_function("() => document.querySelector('#summary').innerText.includes('Sound track kept')")
            assert page.locator("#glance").count() == 0 and not page.locator("#frame-strip").is_visible()
            # measured once the pictures have loaded: the gallery's tiles take their height from them (CI, slower,
            # measured the tiles still loading at 83 px taller)
            page.wait_for_function("() => [...document.querySelectorAll('#frames-gallery img')]"
                                   ".every(i => i.complete && i.naturalWidth > 0)")
            time.sleep(0.5)
            views = _inside_window(page, "#views")
            chat = page.locator("#chatbot").bounding_box()
            assert chat is not None and chat["y"] > views["y"] + views["height"]  # the chat comes after the inspector
            _shot(page, "work-preview.png", shots_dir)
        finally:
            context.close()


# ---------------------------------------------------------------- rating and regenerating from a reply (§2, §3)
def _status(page) -> str:
    return page.locator("#rate-status").inner_text()


def _pick_reply(page, label_start: str) -> None:
    page.locator("#rate-reply input").click()
    page.get_by_role("option").filter(has_text=label_start).first.click()


def test_rate_a_reply_and_regenerate_from_an_earlier_one(page):
    _send(page, "say alpha")
    _wait_chat(page, "alpha-6")
    _wait_finished(page)
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('reply 1')")
    page.locator("#rate-up").click()
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('👍')")
    page.locator("#rate-note :is(input, textarea)").fill("counts every word")
    page.locator("#rate-note :is(input, textarea)").press("Enter")
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('counts every word')")
    assert "reply 1 · 👍 ✎" in page.locator("#rate-reply input").input_value()

    _send(page, "say bravo")
    _wait_chat(page, "bravo-6")
    _wait_finished(page)
    page.wait_for_function("() => document.querySelector('#rate-reply input').value.startsWith('reply 2')")
    page.wait_for_function("() => document.querySelector('#rate-note :is(input, textarea)').value === ''")  # its own
    page.locator("#rate-down").click()
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('👎')")
    _pick_reply(page, "reply 1")  # the first reply's note comes back
    page.wait_for_function("() => document.querySelector('#rate-note :is(input, textarea)').value"
                           " === 'counts every word'")
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('reply 1 of 2 · 👍')")
    assert "**" not in _status(page)  # Markdown, shown as such

    _pick_reply(page, "reply 1")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.locator("#regen-from").click()  # reply 1 again: bravo's turn and both ratings go (asked first, yes)
    _wait_chat(page, "alpha-6", absent="bravo")
    _wait_finished(page)
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('not rated')")
    assert asked and "reply 1: 👍 note “counts every word”; reply 2: 👎" in asked[0]
    assert page.locator("#rate-reply input").input_value().startswith("reply 1 · alpha-1")
    page.locator("#rate-reply input").click()
    assert page.get_by_role("option").count() == 1


# ---------------------------------------------------------------- export and import (§3)
def _import(page, path: Path) -> None:
    with page.expect_file_chooser() as chooser:
        page.locator("#import-session").click()
    chooser.value.set_files(str(path))


def test_export_then_import_into_another_session_restores_it(chromium, engine_url, tmp_path, shots_dir):
    (ctx_a, a), (ctx_b, b) = _open(chromium, engine_url), _open(chromium, engine_url)
    try:
        _load_example_clip(a)
        a.wait_for_function("() => document.querySelectorAll('#frame-strip figure img').length > 0")
        a.locator("#chat-send").click()
        _wait_chat(a, "segments 2 and 3")
        _wait_finished(a)
        a.locator("#rate-up").click()
        a.locator("#rate-note :is(input, textarea)").fill("names both")
        a.locator("#rate-save").click()
        a.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('names both')")
        a.locator("#export-session").click()
        a.wait_for_selector("#export-zip", state="visible")
        with a.expect_download() as download:
            a.locator("#export-zip").click()
        exported = tmp_path / download.value.suggested_filename
        download.value.save_as(exported)
        assert exported.suffix == ".zip"
        assert "Exported 1 reply and 1 media file" in a.locator("#record-status").inner_text()

        _import(b, exported)
        b.wait_for_function("() => document.querySelector('#record-status').innerText.includes('Imported')")
        _wait_chat(b, "segments 2 and 3")
        assert "reply 1 · 👍 ✎" in b.locator("#rate-reply input").input_value()
        assert "names both" in b.locator("#rate-status").inner_text()
        assert b.locator("#rate-note :is(input, textarea)").input_value() == "names both"
        # the panels hold the clip again, inspected again: the strip and the summary are back
        b.wait_for_function("() => document.querySelectorAll('#frame-strip figure img').length === 8")
        b.wait_for_function("() => document.querySelector('#summary').innerText.includes('Sound track kept')")
        b.wait_for_function("() => !document.querySelector('#status').innerText.includes('⏳')")
        b.screenshot(path=str(shots_dir / "work-imported.png"))
        # the chat goes on from the imported conversation (the panel's clip is not sent a second time: vLLM
        # would refuse a second video) and regenerates from its reply
        _send(b, "say again")
        _wait_chat(b, "again-6")
        _wait_finished(b)
        assert "Not sent to the model" not in b.locator("#chatbot").inner_text()
        _pick_reply(b, "reply 1")
        b.once("dialog", lambda dialog: dialog.accept())  # its imported 👍 and note go: asked first
        b.locator("#regen-from").click()
        _wait_chat(b, "segments 2 and 3", absent="again-6")
        _wait_finished(b)
        # a bad file: one line, the conversation stays
        junk = tmp_path / "junk.zip"
        junk.write_text("not a session")
        _import(b, junk)
        b.wait_for_function("() => document.querySelector('#record-status').innerText.includes('Not imported')")
        assert "junk.zip is not a zip file" in b.locator("#record-status").inner_text()
        assert "segments 2 and 3" in b.locator("#chatbot").inner_text()
        # the exporting session is as it was
        assert "again" not in a.locator("#chatbot").inner_text() and "Imported" not in a.locator(
            "#record-status").inner_text()
        assert a.locator("#rate-reply input").input_value().startswith("reply 1 · 👍 ✎")
    finally:
        ctx_a.close()
        ctx_b.close()
