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


def _systems(page, words: tuple[str, str] = ("alpha", "beta")) -> None:
    """A's system prompt ends in "alpha", B's in "beta" (or ``words``): typed again until the box keeps it (a value
    typed while an accordion's content mounts was seen replaced by its first value on a loaded box)."""
    for side, word in zip("ab", words, strict=True):
        box = page.locator(f"#compare-{side}-system textarea")
        if not box.is_visible():
            page.locator(f"#compare-{side}-more > button").first.click()
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


def test_the_b_reserve_box_shows_the_reserve_its_plan_uses(chromium, studio_url):
    """Auto reserve at seq 2,048 and max new tokens 1,024: the plan reserves 1,024 (vLLM's seq ÷ 4 = 512 is less
    than max new tokens), and so does the greyed box."""
    context, page = _open(chromium, studio_url)
    try:
        page.locator("#video-input input[type=file]").set_input_files(str(CLIP))
        page.wait_for_selector("#frames-gallery img")
        page.locator("#compare-accordion > button").first.click()
        _number(page, "compare-b-seq", 2048)
        _number(page, "compare-b-max-new", 1024)
        reserve = page.locator("#compare-b-reserve input")
        page.wait_for_function("() => document.querySelector('#compare-b-reserve input').value === '1024'")
        assert reserve.is_disabled()  # auto: greyed
        page.locator("#compare-preview").click()
        page.wait_for_function("() => document.querySelector('#compare-plan-b').innerText.includes('seq 2,048')")
        assert "reserve 1,024 (auto)" in page.locator("#compare-plan-b").inner_text()
        assert reserve.input_value() == "1024"
        _number(page, "compare-b-max-new", 256)  # below seq ÷ 4: vLLM's default reserve again
        page.wait_for_function("() => document.querySelector('#compare-b-reserve input').value === '512'")
    finally:
        context.close()


def _run_round(page, number: int, word: str) -> None:
    """Run round ``number``; wait until A's answer (its system prompt ends in ``word``) is whole and the round has
    settled (Run unlocked). The round before also said 'Both answered': its own words tell the rounds apart."""
    page.locator("#compare-run").click()
    _wait(page, f"() => document.querySelector('#compare-rounds').innerText.includes('{number} round(s)') && "
          f"document.querySelector('#compare-answer-a').innerText.includes('{word}-12') && "
          "document.querySelector('#compare-status').innerText.includes('Both answered') && "
          "!document.querySelector('#compare-run').disabled", f"round {number} answered")


def _pick_round(page, label: str) -> None:
    page.locator("#compare-round-pick input").click()
    page.get_by_role("option", name=label).click()


def _checked(page, elem_id: str) -> str:
    """The label of a radio's checked choice ("" = none)."""
    return page.evaluate("id => { const i = document.querySelector(`#${id} input:checked`); "
                         "return i ? i.closest('label').innerText.trim() : ''; }", elem_id)


def _round_one_shown(page) -> None:
    """Round 1 in the columns again: its question, settings, plans, answers, figures, ratings and verdict."""
    _wait(page, "() => document.querySelector('#compare-status').innerText.includes('Round 1 of 2')",
          "round 1 shown again")
    _wait(page, "() => document.querySelector('#compare-answer-a').innerText.includes('alpha-12')", "A's answer")
    assert page.locator("#compare-question textarea").input_value() == "What is in the room?"
    assert "beta-12" in page.locator("#compare-answer-b").inner_text()
    assert "gamma" not in page.locator("#compare-answer-a").inner_text()
    assert page.locator("#compare-b-seq input").input_value() == str(SEQ_A // 2)
    system = page.locator("#compare-b-system textarea")
    if not system.is_visible():
        page.locator("#compare-b-more > button").first.click()
    assert system.input_value() == "Answer as beta"
    assert f"seq {SEQ_A // 2:,}" in page.locator("#compare-plan-b").inner_text()
    assert "frames" in page.locator("#compare-plan-a").inner_text() and "B − A" in page.locator(
        "#compare-diff").inner_text()
    assert "finish stop" in page.locator("#compare-figures-a").inner_text()
    assert _checked(page, "compare-verdict-a") == "👍" and _checked(page, "compare-verdict-b") == ""
    assert page.locator("#compare-note-a textarea").input_value() == "names the room"
    assert _checked(page, "compare-preference") == "A better"


def test_every_round_reads_again_in_the_session_and_after_import(chromium, engine_url, double, tmp_path, shots_dir):
    context, page = _open(chromium, engine_url, height=1300)
    other = None
    try:
        _start(page, "What is in the room?")
        _systems(page)
        _run_round(page, 1, "alpha")
        page.locator("#compare-verdict-a").get_by_text("👍").click()
        page.locator("#compare-note-a textarea").fill("names the room")
        page.locator("#compare-note-a textarea").press("Tab")
        page.locator("#compare-preference").get_by_text("A better").click()
        page.wait_for_function("() => document.querySelector('#compare-rounds').innerText.includes('1 rated')")
        # round 2: another question, B at seq 3,072, other system prompts
        page.locator("#compare-question textarea").fill("And what do you hear?")
        _number(page, "compare-b-seq", 3072)
        _systems(page, ("gamma", "delta"))
        _run_round(page, 2, "gamma")
        assert _checked(page, "compare-verdict-a") == "" and _checked(page, "compare-preference") == ""
        page.locator("#compare-preference").get_by_text("B better").click()
        page.wait_for_function("() => document.querySelector('#compare-rounds').innerText.includes('2 rated')")
        # round 1 reads again, all of it
        _pick_round(page, "round 1 · What is in the room? · A better")
        _round_one_shown(page)
        page.evaluate("document.querySelector('#compare-diff').scrollIntoView()")
        time.sleep(0.5)
        page.screenshot(path=str(shots_dir / "compare-round-1-again.png"), full_page=False)
        # a rating given now goes to the round shown (round 1), not to the last
        page.locator("#compare-note-b textarea").fill("misses the sound")
        page.locator("#compare-note-b textarea").press("Tab")
        _pick_round(page, "round 2 · And what do you hear? · B better")
        _wait(page, "() => document.querySelector('#compare-answer-a').innerText.includes('gamma-12')", "round 2")
        assert page.locator("#compare-note-b textarea").input_value() == ""
        assert page.locator("#compare-b-seq input").input_value() == "3072"
        page.locator("#export-session").click()
        page.wait_for_selector("#export-zip", state="visible")
        with page.expect_download() as download:
            page.locator("#export-zip").click()
        exported = tmp_path / download.value.suggested_filename
        download.value.save_as(exported)

        # another browser session imports it: the columns show the last round, every round reads again
        other, imported = _open(chromium, engine_url, height=1300)
        imported.locator("#compare-accordion > button").first.click()
        with imported.expect_file_chooser() as chooser:
            imported.locator("#import-session").click()
        chooser.value.set_files(str(exported))
        _wait(imported, "() => document.querySelector('#compare-answer-a').innerText.includes('gamma-12')",
              "the imported last round")
        assert imported.locator("#compare-question textarea").input_value() == "And what do you hear?"
        assert imported.locator("#compare-b-seq input").input_value() == "3072"
        assert imported.locator("#compare-a-seq input").input_value() == str(SEQ_A)
        assert _checked(imported, "compare-preference") == "B better"
        assert "2 round(s) in this session · 2 rated" in imported.locator("#compare-rounds").inner_text()
        _pick_round(imported, "round 1 · What is in the room? · A better")
        _round_one_shown(imported)
        assert imported.locator("#compare-note-b textarea").input_value() == "misses the sound"
        imported.evaluate("document.querySelector('#compare-diff').scrollIntoView()")
        time.sleep(0.5)
        imported.screenshot(path=str(shots_dir / "compare-imported-round-1.png"))
    finally:
        context.close()
        if other is not None:
            other.close()
