"""Chromium helpers for the real-engine tier: waits that tolerate an element not rendered yet, and
recorders that see every update (a busy page may show a state for less time than a poll takes)."""

from __future__ import annotations

WAIT_MS = 120_000


def wait_text(page, selector: str, needle: str, timeout: float = WAIT_MS) -> str:
    """Wait until ``selector``'s text contains ``needle``; its text then."""
    page.wait_for_function("([s, n]) => { const e = document.querySelector(s); return e && e.innerText.includes(n); }",
                           arg=[selector, needle], timeout=timeout, polling=50)
    return page.locator(selector).inner_text()


def record(page, selector: str) -> None:
    """From now on, keep every text ``selector`` shows (read them with :func:`recorded`)."""
    page.evaluate("""(s) => { window.__seen = window.__seen || {}; const seen = window.__seen[s] = [];
        const e = document.querySelector(s);
        new MutationObserver(() => seen.push(e.innerText))
            .observe(e, {subtree: true, childList: true, characterData: true}); }""", selector)


def recorded(page, selector: str) -> list[str]:
    return page.evaluate("(s) => window.__seen[s]", selector)


def set_max_tokens(page, tokens: int) -> None:
    box = page.locator("#max-tokens input")
    if not box.is_visible():  # the Sampling accordion starts closed
        page.locator("#sampling-accordion").get_by_text("Sampling").click()
        box.wait_for(state="visible")
    box.fill(str(tokens))
    box.press("Tab")


def send(page, text: str) -> None:
    page.locator("#chat-input textarea").fill(text)
    page.locator("#chat-send").click()


def add_image(page, path) -> None:
    page.locator("#images-input input[type=file]").set_input_files(str(path))
    wait_text(page, "#status", "image(s)")
