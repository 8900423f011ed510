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


class EndedBeforeAction(Exception):
    """The reply ended by itself before the test acted on it (the engine's time stamps say so): a random
    model's end of sequence, or a starved browser. It says nothing about Stop, a closed tab or Clear."""

    def __init__(self, ended_at: float, acted_at: float, figures: str) -> None:
        super().__init__(f"vLLM let the request go {acted_at - ended_at:.2f} s before the test acted "
                         f"(figures: {figures})")
        self.figures = figures

    @property
    def end_of_sequence(self) -> bool:
        """The model ended the reply itself (finish ``stop``): try again; anything else is a starved run."""
        return "finish stop" in self.figures


class EngineWatch:
    """The engine's request count, polled every 50 ms from before a message is sent (a poll started after
    a slow click returns may begin after the reply ended), with the time of every change."""

    def __init__(self, studio) -> None:
        import threading

        self.studio, self.most, self.now = studio, 0, 0
        self.changes: list[tuple[float, int]] = []  # (time.monotonic(), count) each time the count changed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        import time

        from support import servers

        while not self._stop.is_set():
            count = servers.engine_requests(self.studio) or 0
            if not self.changes or count != self.changes[-1][1]:
                self.changes.append((time.monotonic(), count))
            self.now = count
            self.most = max(self.most, count)
            self._stop.wait(0.05)

    def reset(self) -> None:
        """Count from now (a new reply)."""
        self.most = 0
        self.changes = self.changes[-1:]

    def reached(self, page, count: int = 1, timeout: float = 60, before: str = "") -> float:
        """Wait until the engine has held ``count`` requests at once; when it first did. Raises
        :class:`EndedBeforeAction` when a new reply (figures other than ``before``) ran to its end unseen,
        else fails with what the page shows."""
        import time

        deadline = time.monotonic() + timeout
        while self.most < count:
            if time.monotonic() > deadline:
                shown = page.locator("#chat-figures").inner_text()
                if count == 1 and "finish" in shown and shown != before:
                    raise EndedBeforeAction(self.changes[-1][0], time.monotonic(), shown)
                raise AssertionError(f"the engine never held {count} request(s) within {timeout:.0f} s\n"
                                     f"{context(page, self.studio)}")
            time.sleep(0.05)
        return next(t for t, n in self.changes if n >= count)

    def released_after(self, held_at: float) -> float | None:
        """When the engine next held no request after ``held_at`` (None: it still holds one)."""
        return next((t for t, n in self.changes if t > held_at and n == 0), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
