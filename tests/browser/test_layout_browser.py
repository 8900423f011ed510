"""The work layout in real Chromium at 1440×900, 1280×720 and 390×844 (issue 18 §10), and the rating row:
what is in the first screen, what must not overflow or overlap, the picked reply pressed, marked and scrolled
to, and "↻ from this reply" asking before it drops a rating.

The engine is the product's ``InProcessEngine`` over the scripted vLLM double with vLLM's real renderer (as in
``test_workbench_browser``): only the words of the replies are scripted, the long ones twelve lines long.
Each test saves its picture in the browser tests' shots folder (``layout-*.png``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError

from dots3_demo.ui.examples import ELEM_ID, studio_examples
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import serve

pytestmark = pytest.mark.browser

LINE = "the door says ROOM 3, the voice says blue falcon"
SIZES = {"1440x900": {"width": 1440, "height": 900}, "1280x720": {"width": 1280, "height": 720},
         "390x844": {"width": 390, "height": 844}}


def replies(tokenizer):
    """The last ``say X`` → ``X-1 … X-6``; ``twelve X`` → twelve lines on ``X``; else a short answer."""

    def script(engine_input) -> list[str]:
        prompt = tokenizer.decode(engine_input["prompt_token_ids"])
        asked = re.findall(r"\b(say|twelve) (\w+)", prompt)
        if asked and asked[-1][0] == "say":
            return [f"{asked[-1][1]}-{i} " for i in range(1, 7)]
        if asked:
            return [f"{asked[-1][1]} line {i}: {LINE}.  \n" for i in range(1, 13)]
        return ["The door says ROOM 3; ", "the password is blue falcon."]

    return script


@pytest.fixture(scope="module")
def engine_url(profile):
    from tests.engine.real_renderer import build_preview_renderer

    renderer = build_preview_renderer()
    double = ScriptedAsyncLLM(replies(renderer.get_tokenizer()), delay_s=0.01)
    double.renderer = renderer
    with serve(profile, scripted_engine(double)) as url:
        yield url


def _open(chromium, url: str, size: str):
    context = chromium.new_context(viewport=SIZES[size])
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(url)
    page.wait_for_selector(f"#{ELEM_ID} button")
    return context, page


@pytest.fixture
def opened(chromium, engine_url):
    contexts = []

    def open_at(size: str):
        context, page = _open(chromium, engine_url, size)
        contexts.append(context)
        return page

    yield open_at
    for context in contexts:
        context.close()


def _box(page, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box(timeout=5_000)
    assert box is not None and box["width"] > 0 and box["height"] > 0, f"{selector} is not shown"
    return box


def _in_view(page, selector: str) -> dict[str, float]:
    """``selector``'s box, asserted inside the window (at the page's top: nothing scrolled)."""
    box, window = _box(page, selector), page.viewport_size
    assert box["x"] >= 0 and box["x"] + box["width"] <= window["width"] + 0.5, (selector, box)
    assert box["y"] >= 0 and box["y"] + box["height"] <= window["height"] + 0.5, (selector, box)
    return box


def _apart(a: dict[str, float], b: dict[str, float]) -> bool:
    return (a["x"] + a["width"] <= b["x"] + 0.5 or b["x"] + b["width"] <= a["x"] + 0.5
            or a["y"] + a["height"] <= b["y"] + 0.5 or b["y"] + b["height"] <= a["y"] + 0.5)


def _none_overlap(page, selector: str) -> list[dict[str, float]]:
    """The boxes of every element ``selector`` matches, asserted pairwise apart, each with its text fitting."""
    boxes = [b for b in (e.bounding_box() for e in page.locator(selector).all()) if b]
    assert boxes, selector
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert _apart(a, b), (selector, a, b)
    cut = page.evaluate("s => [...document.querySelectorAll(s)].filter(e => e.scrollWidth > e.clientWidth + 1)"
                        ".map(e => e.innerText)", selector)
    assert cut == [], f"{selector}: text cut off in {cut}"
    return boxes


def _send(page, text: str, *, done: str) -> None:
    page.locator("#chat-input textarea").fill(text)
    page.locator("#chat-send").click()
    page.wait_for_function("t => document.querySelector('#chatbot').innerText.includes(t)", arg=done, polling=20)
    page.wait_for_function("() => document.querySelector('#chat-figures').innerText.includes('finish')"
                           " && !document.querySelector('#chat-send').disabled"
                           " && document.querySelector('#rate-status').innerText.includes('reply')")
    page.wait_for_timeout(300)  # the page's script fits the chat to what is under it


def _load_clip(page) -> None:
    example = next(e for e in studio_examples() if e.video)
    page.locator(f"#{ELEM_ID}").get_by_text(example.label, exact=True).click()
    page.wait_for_function("() => document.querySelectorAll('#frame-strip figure img').length > 0")
    page.wait_for_function("() => document.querySelector('#summary').innerText.includes('Sound track kept')")


def _shot(page, name: str, shots_dir: Path) -> None:
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(shots_dir / name))


# ---------------------------------------------------------------- the first screen
FIRST_SCREEN = ("#video-input", "#audio-tabs", "#temperature", "#max-tokens", "#seed", "#chatbot", "#chat-input",
                "#chat-send", "#chat-stop", "#chat-figures", "#rating-row", "#rate-reply", "#rate-up", "#rate-down",
                "#rate-note", "#regen-from")
GLANCE = ("#frame-strip", "#summary", "#glance-links")  # what the model sees, whole (1440×900; 1280×720 scrolls it)


def _picker_text_end(page) -> None:
    """The reply picker's text ends before its arrow."""
    ends = page.evaluate("""() => { const input = document.querySelector('#rate-reply input');
        const arrow = document.querySelector('#rate-reply .icon-wrap').getBoundingClientRect();
        const r = input.getBoundingClientRect(), pad = parseFloat(getComputedStyle(input).paddingRight);
        return [r.right - pad, arrow.left]; }""")
    assert ends[0] <= ends[1] + 0.5, f"the picker's text runs under its arrow: {ends}"


def _chat_fills_the_window(page) -> None:
    column, window = _box(page, "#chat-panel"), page.viewport_size
    assert window["height"] - (column["y"] + column["height"]) < 24, f"the chat column ends early: {column}"


def _question_above_the_reply(page) -> None:
    chat = _box(page, "#chatbot")
    question = _box(page, "#chatbot [data-testid=user] >> nth=-1")
    reply = _box(page, "#chatbot [data-testid=bot] >> nth=-1")
    assert question["y"] >= chat["y"] and reply["y"] + reply["height"] <= chat["y"] + chat["height"], \
        f"the question scrolled away: chat {chat}, question {question}, reply {reply}"


@pytest.mark.parametrize("size", ["1440x900", "1280x720"])
def test_the_first_screen_holds_sampling_the_chat_and_the_rating_row(opened, size, shots_dir):
    page = opened(size)
    _load_clip(page)
    _send(page, "What does the door say?", done="blue falcon")
    _send(page, "Now in twelve lines: twelve door", done="door line 12")
    checks = [(_in_view, selector) for selector in FIRST_SCREEN + (GLANCE if size == "1440x900" else ())]
    checks += [(_none_overlap, "#glance-links button"), (_none_overlap, "#rating-row > *"), (_picker_text_end,),
               (_chat_fills_the_window,)]
    if size == "1440x900":
        checks.append((_question_above_the_reply,))  # the question stays in view above a twelve-line reply
    problems = []
    for check, *args in checks:  # every one, so that a failure lists all that is wrong
        try:
            check(page, *args)
        except (AssertionError, PlaywrightError) as exc:
            problems.append(f"{check.__name__}{tuple(args)}: {str(exc).splitlines()[0]}")
    assert problems == []
    assert page.evaluate("() => window.scrollY") == 0
    assert len(page.locator("#glance-links button").all()) == 5
    _shot(page, f"layout-engine-{size}.png", shots_dir)


def test_with_nothing_uploaded_what_the_model_sees_says_what_appears_there_and_offers_the_examples(opened, shots_dir):
    page = opened("1440x900")
    hint = page.locator("#glance-hint")
    assert hint.is_visible()
    assert "What the model sees appears here" in hint.inner_text()
    _in_view(page, "#glance-hint")
    offered = page.locator("#glance-column").locator(f"#{ELEM_ID}").get_by_text("Video + sound track", exact=True)
    _in_view(page, "#glance-column #examples")
    _shot(page, "layout-engine-empty-1440x900.png", shots_dir)
    offered.click()  # the examples' clip: the hint gives way to its frames and tokens
    page.wait_for_function("() => document.querySelectorAll('#frame-strip figure img').length > 0")
    page.wait_for_function("() => document.querySelector('#summary').innerText.includes('Sound track kept')")
    assert page.locator("#summary").is_visible() and page.locator("#glance-hint").count() == 0


def test_a_narrow_window_keeps_the_header_and_the_tools_editor_in_shape(opened, shots_dir):
    page = opened("390x844")
    header = _box(page, "#d3-header")
    for badge in page.locator("#d3-header .d3-badge").all():
        box = badge.bounding_box()
        assert box is not None
        assert box["x"] >= header["x"] and box["x"] + box["width"] <= header["x"] + header["width"] + 0.5, box
        assert badge.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), badge.inner_text()  # nothing cut
    _none_overlap(page, "#glance-links button")
    label = _box(page, "#tools-json [data-testid=block-label]")
    for button in page.locator("#tools-json button").all():
        box = button.bounding_box()
        if box:
            assert _apart(label, box), (label, box)
    for part in _none_overlap(page, "#rating-row > *"):
        assert part["x"] >= 0 and part["x"] + part["width"] <= page.viewport_size["width"] + 0.5, part
    _shot(page, "layout-engine-390x844.png", shots_dir)


# ---------------------------------------------------------------- the rating row
def _pick(page, reply: int) -> None:
    page.locator("#rate-reply input").click()
    page.get_by_role("option").filter(has_text=f"reply {reply} ·").first.click()
    page.wait_for_function("n => document.querySelector('#rate-status').innerText.startsWith(`reply ${n} of`)",
                           arg=reply)


def _pressed(page) -> dict[str, str]:
    return {side: page.locator(f"#rate-{side}").get_attribute("aria-pressed") or "" for side in ("up", "down")}


def _marked(page) -> list[str]:
    return page.evaluate("() => [...document.querySelectorAll('#chatbot .d3-picked-reply')].map(e => e.innerText)")


def test_the_picked_reply_is_marked_scrolled_to_and_its_verdict_pressed(opened):
    page = opened("1440x900")
    for word in ("alpha", "bravo", "charlie"):
        _send(page, f"twelve {word}", done=f"{word} line 12")
    assert _pressed(page) == {"up": "false", "down": "false"}
    page.locator("#rate-up").click()
    page.wait_for_function("() => document.querySelector('#rate-up').getAttribute('aria-pressed') === 'true'")
    # drawn pressed: 👍's background differs from 👎's once Gradio's button transition has run (read at once,
    # both were still white in CI)
    page.wait_for_function("""() => {
        const bg = id => getComputedStyle(document.getElementById(id)).backgroundColor;
        return bg('rate-up') !== bg('rate-down'); }""", timeout=5_000)
    assert [m.split(":")[0] for m in _marked(page)] == ["charlie line 1"]

    _pick(page, 1)  # not rated, far above: the chat scrolls to it and marks it
    page.wait_for_function("() => document.querySelector('#chatbot .d3-picked-reply')?.innerText"
                           ".startsWith('alpha line 1')")
    assert _pressed(page) == {"up": "false", "down": "false"}
    page.wait_for_function("""() => {
        const m = document.querySelector('#chatbot .d3-picked-reply').getBoundingClientRect();
        const c = document.querySelector('#chatbot .bubble-wrap').getBoundingClientRect();
        return m.top >= c.top - 1 && m.top < c.top + 40; }""")
    page.locator("#rate-down").click()
    page.wait_for_function("() => document.querySelector('#rate-down').getAttribute('aria-pressed') === 'true'")
    assert _pressed(page)["up"] == "false"
    _pick(page, 3)
    page.wait_for_function("() => document.querySelector('#rate-up').getAttribute('aria-pressed') === 'true'")


def test_regenerating_from_a_reply_asks_before_it_drops_a_rating_or_a_note(opened):
    page = opened("1440x900")
    for word in ("alpha", "bravo"):
        _send(page, f"say {word}", done=f"{word}-6")
    asked: list[str] = []
    answers: list[bool] = []  # what the researcher answers to the next question (none planned: "no")

    def on_dialog(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept() if answers and answers.pop(0) else dialog.dismiss()

    page.on("dialog", on_dialog)
    # nothing rated: no question, bravo's reply is generated again
    page.locator("#regen-from").click()
    page.wait_for_function("() => document.querySelector('#chat-send').disabled")
    page.wait_for_function("() => !document.querySelector('#chat-send').disabled")
    assert asked == []
    # a note on reply 2 and 👍 on reply 1, then ↻ from reply 1: asked; "no" keeps everything
    page.locator("#rate-note :is(input, textarea)").fill("six words")
    page.locator("#rate-save").click()
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('six words')")
    _pick(page, 1)
    page.locator("#rate-up").click()
    page.wait_for_function("() => document.querySelector('#rate-status').innerText.includes('👍')")
    page.locator("#regen-from").click()
    page.wait_for_timeout(800)
    assert len(asked) == 1 and "reply 1: 👍" in asked[0] and "reply 2: note “six words”" in asked[0], asked
    assert "bravo-6" in page.locator("#chatbot").inner_text()
    assert not page.locator("#chat-send").is_disabled()
    assert "reply 1 of 2 · 👍" in page.locator("#rate-status").inner_text()
    # "yes": reply 1 again, the ratings go
    answers.append(True)
    page.locator("#regen-from").click()
    page.wait_for_function("() => !document.querySelector('#chatbot').innerText.includes('bravo')")
    page.wait_for_function("() => document.querySelector('#rate-status').innerText"
                           ".includes('reply 1 of 1 · not rated')")
    assert len(asked) == 2
