"""The prompt view in real Chromium (issue 21 §1): under a reply's figures, a fold with the prompt as the engine
got it — the chat template's tokens, each frame's timestamp text, each run of pad tokens one chip, coloured by
kind, token ids in each chip's tooltip.

The engine is the product's ``InProcessEngine`` over the scripted vLLM double with vLLM's *real* renderer and
Dots processor for the preview profile: the prompt ids are vLLM's own for the example clip; only the words of the
reply are scripted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.ui.examples import ELEM_ID, EXAMPLES_DIR, studio_examples
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import SEQ, serve

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def engine_url(profile):
    from tests.engine.real_renderer import build_preview_renderer

    double = ScriptedAsyncLLM(lambda _: ["It is ", "room 3."], delay_s=0.02)
    double.renderer = build_preview_renderer()
    with serve(profile, scripted_engine(double)) as url:
        yield url


def test_the_prompt_view_shows_under_the_reply(chromium, engine_url, profile, shots_dir):
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(90_000)
    try:
        page.goto(engine_url)
        page.wait_for_selector(f"#{ELEM_ID} button")
        example = next(e for e in studio_examples() if e.video)
        page.locator(f"#{ELEM_ID}").get_by_text(example.label, exact=True).click()
        report = inspect_file(EXAMPLES_DIR / Path(example.video).name, profile, VideoSettings(seq=SEQ),
                              expected="video")
        page.wait_for_function("() => document.querySelector('#summary').innerText.includes('Sound track kept')")
        page.locator("#chat-send").click()
        page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('finish')"
                               " && !document.querySelector('#chat-send').disabled")
        fold = page.locator("#chat-figures details.d3-prompt")
        assert "the prompt as the engine got it" in fold.locator("summary").first.inner_text()
        assert "the engine's own ids" in fold.locator("summary").first.inner_text()
        fold.locator("summary").first.click()
        frames = fold.locator(".d3-tok-video-frame")
        texts = frames.all_inner_texts()
        assert texts, fold.inner_html()[:2000]
        stamps = [t for t in texts if t.startswith("<00:")]
        pads = [t for t in texts if t.startswith("<image pad>")]
        assert stamps == [f"<{f.timestamp}>" for f in report.frames]
        assert pads == [f"<image pad> × {f.tokens:,}" for f in report.frames]
        sound = fold.locator(".d3-tok-video-sound").all_inner_texts()
        assert sum(int(t.split("× ")[1].replace(",", "")) for t in sound if t.startswith("<audio pad>")) == \
            report.audio_pad_tokens
        assert fold.locator(".d3-tok-special").first.inner_text() == "<|system|>"
        title = frames.nth(texts.index(pads[0])).get_attribute("title") or ""
        assert title == f"video frame · {report.frames[0].tokens:,} token(s) · id 8 × {report.frames[0].tokens:,}"
        colours = {fold.locator(f".d3-tok-{kind}").first.evaluate("e => getComputedStyle(e).backgroundColor")
                   for kind in ("special", "video-frame", "video-sound", "text")}
        assert len(colours) == 4  # coloured by kind
        fold.scroll_into_view_if_needed()
        shot = shots_dir / "prompt-view.png"
        page.locator("#chat-figures").screenshot(path=str(shot))
        assert shot.stat().st_size > 20_000
    finally:
        context.close()
