"""Compare in real Chromium: a round in preview (no engine: every number is the inspector's), and rounds with
the scripted engine double (both answers stream, the ratings, Stop aborting both requests).

The preview round on the bundled example clip is also the README's compare screenshot (1440×900): it always goes
to the browser tests' shots folder; with ``UPDATE_DOCS=1`` it also replaces ``docs/compare.png``::

    UPDATE_DOCS=1 python -m pytest -q tests/browser/test_compare_browser.py -k preview
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.ui.examples import EXAMPLES_DIR
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import serve

pytestmark = pytest.mark.browser

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "compare.png"
CLIP = EXAMPLES_DIR / "room_clip.mp4"
SEQ_A, MAX_NEW = 4096, 256  # the example clip keeps its sound track at 4,096; half of it drops it


def _open(chromium, url: str, height: int = 900):
    context = chromium.new_context(viewport={"width": 1440, "height": height})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(url)
    page.wait_for_selector("#video-input input[type=file]", state="attached")
    return context, page


def _number(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input")
    box.fill(str(value))
    box.press("Tab")


def _start(page, question: str) -> None:
    """The example clip in the video panel, compare opened, "half the budget" from A = seq 4,096."""
    page.locator("#video-input input[type=file]").set_input_files(str(CLIP))
    page.wait_for_selector("#frames-gallery img")
    page.locator("#compare-accordion > button").first.click()
    page.locator("#compare-question textarea").fill(question)
    page.locator("#compare-preset input").click()
    page.get_by_role("option", name="half the budget (B: seq ÷ 2)").click()
    page.wait_for_function("() => document.querySelector('#compare-status').innerText.includes('Preset')")
    for side in "ab":
        _number(page, f"compare-{side}-max-new", MAX_NEW)
    _number(page, "compare-a-seq", SEQ_A)
    _number(page, "compare-b-seq", SEQ_A // 2)
    page.wait_for_function("() => document.querySelector('#compare-b-reserve input').value === '512'")


def test_a_preview_round_shows_each_sides_plan_from_the_inspector(chromium, studio_url, profile, shots_dir):
    context, page = _open(chromium, studio_url)
    try:
        _start(page, "What is in the room, and what do you hear?")
        page.locator("#compare-preview").click()
        page.wait_for_selector("#compare-diff table")
        for side, seq in (("a", SEQ_A), ("b", SEQ_A // 2)):
            report = inspect_file(CLIP, profile, VideoSettings(seq=seq, max_new_tokens=MAX_NEW), expected="video")
            plan = page.locator(f"#compare-plan-{side}")
            assert plan.locator("img").count() == len(report.frames)
            page.wait_for_function("id => [...document.querySelectorAll(`#${id} img`)].every(i => i.complete && "
                                   "i.naturalWidth > 0)", arg=f"compare-plan-{side}")
            text = plan.inner_text()
            assert f"{len(report.frames)} frames" in text and f"patch cap {report.solver.patch_cap}" in text
            for frame in report.frames:
                assert frame.timestamp.removeprefix("00:") in text
            assert f"image ≈{report.image_pad_tokens:,}" in text and f"audio {report.audio_pad_tokens:,}" in text
            assert f"Sound track {report.audio.reason}" in text and report.audio.reason.startswith(
                "kept" if side == "a" else "dropped")
        diff = page.locator("#compare-diff").inner_text()
        assert "B − A" in diff and "dropped" in diff  # half the budget costs this clip its sound track
        assert "Preview: ✓ Plans of A and B" in page.locator("#compare-status").inner_text()
        page.evaluate("document.querySelector('#compare-accordion').scrollIntoView()")
        time.sleep(0.5)
        shot = shots_dir / "compare.png"
        page.screenshot(path=str(shot))
        if os.environ.get("UPDATE_DOCS"):
            shutil.copyfile(shot, DOCS_SHOT)
    finally:
        context.close()


def script(engine_input) -> list[str]:
    """A's system prompt ends in "alpha", B's in "beta" (set below); "long" answers keep streaming."""
    conversation = engine_input["conversation"]
    word = conversation[0]["content"].split()[-1]
    question = " ".join(p.get("text", "") for p in conversation[-1]["content"] if p.get("type") == "text")
    count = 400 if question.startswith("long") else 12
    return [f"{word}-{i} " for i in range(1, count + 1)]


@pytest.fixture(scope="module")
def double():
    return ScriptedAsyncLLM(script, delay_s=0.04)


@pytest.fixture(scope="module")
def engine_url(profile, double):
    with serve(profile, scripted_engine(double)) as url:
        yield url


def _systems(page) -> None:
    """A's system prompt ends in "alpha", B's in "beta": typed again until the box keeps it (a value typed while an
    accordion's content mounts was seen replaced by its first value on a loaded box)."""
    for side, word in (("a", "alpha"), ("b", "beta")):
        page.locator(f"#compare-{side}-more > button").first.click()
        box = page.locator(f"#compare-{side}-system textarea")
        box.wait_for(state="visible")
        for _ in range(10):
            box.fill(f"Answer as {word}")
            box.press("Tab")
            page.wait_for_timeout(300)
            if box.input_value() == f"Answer as {word}":
                break
        assert box.input_value() == f"Answer as {word}"


def _wait(page, script: str, what: str) -> None:
    """Wait for ``script`` to hold; on a timeout, say what the round shows."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(script, polling=50)
    except PlaywrightTimeout:
        shown = {s: page.locator(s).inner_text() for s in ("#compare-status", "#compare-answer-a",
                                                            "#compare-answer-b", "#compare-rounds")}
        raise AssertionError(f"never {what}; the page shows {shown}") from None


def test_a_round_with_the_engine_streams_both_and_takes_ratings(chromium, engine_url, double):
    context, page = _open(chromium, engine_url, height=1100)
    try:
        _start(page, "What is in the room?")
        _systems(page)
        before = len(double.generated)
        page.locator("#compare-run").click()
        _wait(page, "() => document.querySelector('#compare-status').innerText.includes('Both answered')",
              "both answered")
        assert "alpha-12" in page.locator("#compare-answer-a").inner_text()
        assert "beta-12" in page.locator("#compare-answer-b").inner_text()
        assert "alpha" not in page.locator("#compare-answer-b").inner_text()
        assert "finish stop" in page.locator("#compare-figures-a").inner_text()
        assert len(double.generated) == before + 2
        page.locator("#compare-verdict-a").get_by_text("👍").click()
        page.locator("#compare-note-b textarea").fill("misses the sound")
        page.locator("#compare-note-b textarea").press("Tab")
        page.locator("#compare-preference").get_by_text("A better").click()
        page.wait_for_function("() => document.querySelector('#compare-rounds').innerText.includes('1 rated')")
    finally:
        context.close()


def test_stop_stops_both_answers(chromium, engine_url, double):
    context, page = _open(chromium, engine_url, height=1100)
    try:
        _start(page, "long story about the room")
        _systems(page)
        before = len(double.generated)
        double.hold_at = 6  # both replies wait in the engine after six words, however late the page handles Stop
        page.locator("#compare-run").click()
        _wait(page, "() => ['a', 'b'].every(s => document.querySelector(`#compare-answer-${s}`)"
              ".innerText.includes('-3 '))", "both streamed three words")
        page.locator("#compare-stop").click()
        _wait(page, "() => document.querySelector('#compare-status').innerText.includes('Stopped')", "stopped")
        started = [request_id for _, _, request_id in double.generated[before:]]
        assert len(started) == 2
        for _ in range(100):
            if set(started) <= set(double.aborted):
                break
            time.sleep(0.05)
        assert set(started) <= set(double.aborted)
        assert "-7 " not in page.locator("#compare-answer-a").inner_text()
        assert page.locator("#compare-run").is_enabled()  # unlocked for the next round
    finally:
        double.hold_at = None
        context.close()
