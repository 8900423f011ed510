"""Compare against vLLM's real ``AsyncLLM`` (CPU build, tiny random-weight model), in Chromium: one studio
(``app.py --engine inprocess``) answers A and B at once, twice, with "temperature 0 vs 0.8"; round 1 then reads
again.

Random weights make the words meaningless, so the test checks that both columns finish with the engine's own
figures, that greedy A gives the same answer twice, and that the engine holds no request afterwards.
"""

from __future__ import annotations

import time

import pytest

from support import servers
from tests.browser.conftest import open_studio
from tests.real_engine.pages import wait_text

pytestmark = [pytest.mark.real_engine, pytest.mark.browser]

MAX_NEW = 24


@pytest.fixture(scope="module")
def studio(cpu_python, tiny_model, logs):
    with servers.studio(cpu_python, tiny_model, logs / "compare-studio.log", max_model_len=4096,
                        max_num_seqs=4) as child:
        servers.ready(child)
        yield child


def _round(page, studio, number: int) -> tuple[str, str]:
    page.locator("#compare-run").click()
    wait_text(page, "#compare-rounds", f"{number} round(s)", studio=studio)  # Run is locked from the click
    page.wait_for_function("() => !document.querySelector('#compare-run').disabled")  # unlocked once it settled
    wait_text(page, "#compare-status", "Both answered", studio=studio)
    return (page.locator("#compare-answer-a").inner_text(), page.locator("#compare-answer-b").inner_text())


def test_a_compare_round_against_the_real_engine(chromium, studio):
    context, page = open_studio(chromium, studio.url)
    try:
        page.locator("#compare-accordion > button").first.click()
        page.locator("#compare-question textarea").fill("Say something about the weather.")
        page.locator("#compare-preset input").click()
        page.get_by_role("option", name="temperature 0 (A) vs 0.8 (B)").click()
        wait_text(page, "#compare-status", "Preset")
        for side in "ab":
            box = page.locator(f"#compare-{side}-max-new input")
            box.fill(str(MAX_NEW))
            box.press("Tab")
        first = _round(page, studio, 1)
        for side in "ab":
            line = page.locator(f"#compare-figures-{side}").inner_text()
            assert "finish" in line and "TTFT" in line and "prompt" in line, line
        assert all(text.strip() for text in first)
        second = _round(page, studio, 2)
        assert second[0] == first[0]  # temperature 0: greedy, the same words again
        for _ in range(100):
            if servers.engine_requests(studio) == 0:
                break
            time.sleep(0.1)
        assert servers.engine_requests(studio) == 0
        # round 1 reads again: its answers and the engine's figures, as they were
        page.locator("#compare-round-pick input").click()
        page.get_by_role("option", name="round 1 · Say something about the weather. · not judged").click()
        wait_text(page, "#compare-status", "Round 1 of 2", studio=studio)
        shown = (page.locator("#compare-answer-a").inner_text(), page.locator("#compare-answer-b").inner_text())
        assert shown == first
        for side in "ab":
            line = page.locator(f"#compare-figures-{side}").inner_text()
            assert "finish" in line and "TTFT" in line and "prompt" in line, line
    finally:
        context.close()
