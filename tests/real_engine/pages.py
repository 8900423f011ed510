"""Chromium helpers for the real-engine tier: waits that tolerate an element not rendered yet, and
recorders that see every update (a busy page may show a state for less time than a poll takes)."""

from __future__ import annotations

WAIT_MS = 120_000


def wait_text(page, selector: str, needle: str, timeout: float = WAIT_MS, studio=None) -> str:
    """Wait until ``selector``'s text contains ``needle``; its text then. On a timeout, the failure says
    what the chat shows and, given the ``studio``, what its engine holds and its log's last lines."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("([s, n]) => { const e = document.querySelector(s); "
                               "return e && e.innerText.includes(n); }",
                               arg=[selector, needle], timeout=timeout, polling=50)
    except PlaywrightTimeout:
        raise AssertionError(f"{selector} never showed {needle!r} within {timeout / 1000:.0f} s\n"
                             f"{context(page, studio)}") from None
    return page.locator(selector).inner_text()


def context(page, studio) -> str:
    said = f"--- the page:\n{page_state(page)}"
    if studio is not None:
        from support import servers

        said += (f"\n--- the engine holds {servers.engine_requests(studio)} request(s); the studio's log ends:\n"
                 f"{studio.log_text()[-3000:]}")
    return said


def record(page, selector: str) -> None:
    """From now on, keep every text ``selector`` shows (read them with :func:`recorded`)."""
    page.evaluate("""(s) => { window.__seen = window.__seen || {}; const seen = window.__seen[s] = [];
        const e = document.querySelector(s);
        new MutationObserver(() => seen.push(e.innerText))
            .observe(e, {subtree: true, childList: true, characterData: true}); }""", selector)


def recorded(page, selector: str) -> list[str]:
    return page.evaluate("(s) => window.__seen[s]", selector)


def set_max_tokens(page, tokens: int) -> None:
    """Type ``tokens`` into Sampling's max tokens, again until the box keeps it (a value typed while the
    accordion's content mounts was seen replaced by the default on a loaded box)."""
    box = page.locator("#max-tokens input")
    if not box.is_visible():  # the Sampling accordion starts closed
        page.locator("#sampling-accordion").get_by_text("Sampling").click()
        box.wait_for(state="visible")
    for _ in range(10):
        box.fill(str(tokens))
        box.press("Tab")
        page.wait_for_timeout(300)
        if box.input_value() == str(tokens):
            return
    raise AssertionError(f"max tokens stays {box.input_value()!r}, not {tokens}")


def send(page, text: str) -> None:
    page.locator("#chat-input textarea").fill(text)
    page.locator("#chat-send").click()


def add_image(page, path) -> None:
    page.locator("#images-input input[type=file]").set_input_files(str(path))
    wait_text(page, "#status", "image(s)")


def page_state(page) -> str:
    """What the chat shows now (for a failure message): figures, Send's state, the last bubbles."""
    return page.evaluate("""() => {
        const text = s => { const e = document.querySelector(s); return e ? e.innerText : '(none)'; };
        const send = document.querySelector('#chat-send');
        return `figures: ${text('#chat-figures')}\\nsend disabled: ${send ? send.disabled : '(none)'}` +
               `\\nmax tokens: ${(document.querySelector('#max-tokens input') || {}).value}` +
               `\\nchat (end): ${text('#chatbot').slice(-600)}`; }""")


# A reply the test could not act on while it streamed: Chromium (no cores of its own on a 2-core box) may
# hand control back to the test only after the whole reply was rendered. Such a run says nothing about
# Stop or a closed tab, and is reported as an expected failure with this reason, not as a pass.
STARVED = ("the reply ended before the test could act on it: on this 2-core box vLLM's CPU engine starved the "
           "browser (a click handled after the reply) or the studio (no answer to /healthz while it streamed)")


class EngineWatch:
    """The engine's request count, polled every 50 ms from before a message is sent (a poll started after
    a slow click returns may begin after the reply ended)."""

    def __init__(self, studio) -> None:
        import threading

        self.studio, self.most, self.now = studio, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        from support import servers

        while not self._stop.is_set():
            self.now = servers.engine_requests(self.studio) or 0
            self.most = max(self.most, self.now)
            self._stop.wait(0.05)

    def reached(self, page, count: int = 1, timeout: float = 60, before: str = "") -> None:
        """Wait until the engine has held ``count`` requests at once; else fail with what the page shows,
        unless a new reply (figures other than ``before``) ran to its end unseen: then ``STARVED``."""
        import time

        import pytest

        deadline = time.monotonic() + timeout
        while self.most < count:
            if time.monotonic() > deadline:
                shown = page.locator("#chat-figures").inner_text()
                if count == 1 and "finish" in shown and shown != before:  # it ran, unseen: nothing to test
                    pytest.xfail(f"{STARVED}: {shown}")
                raise AssertionError(f"the engine never held {count} request(s) within {timeout:.0f} s\n"
                                     f"{context(page, self.studio)}")
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
