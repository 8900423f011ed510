"""Stop, a closed tab and Clear free vLLM's request (real ``AsyncLLM``, CPU build, in ``app.py --engine
inprocess``), and each test fails when its feature breaks.

Each reply asks for :data:`LONG` tokens, minutes of decoding on this box (the tiny model's context is
32,768 here), and the test asserts that vLLM lets the request go within :data:`LET_GO_S` of the action
(the engine's own request count, polled every 50 ms with time stamps). A run counts as one that could not
act on its reply only on evidence: vLLM let the request go *before* the action began. If the model ended
the reply itself (finish ``stop``: random weights emit an end of sequence now and then), the test tries
again; any other such run is a starved one, an expected failure once in a session and a failure the
second time (``starved``). vLLM's processes are pinned to one core (``servers.pin_engine``), which keeps
Chromium and the studio answering while it decodes: a Stop then takes effect in about 0.2 s.

How they were checked (README, "The real-engine tier"): with ``/cancel`` made to cancel nothing, the
Stop tests fail; with Clear's ``cancels`` removed, the Clear test fails; with the engine's stream
detached from its caller and no abort sent, the closed-tab test fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from support import servers
from tests.browser.conftest import open_studio
from tests.real_engine.pages import EndedBeforeAction, EngineWatch, send, set_max_tokens, wait_text

pytestmark = [pytest.mark.real_engine, pytest.mark.browser]

MAX_MODEL_LEN = 32768
LONG = 30000  # max tokens of a reply: minutes of decoding, against the seconds LET_GO_S allows
LET_GO_S = 5.0  # vLLM lets a request go within this many seconds of Stop, Clear or a closed tab
ATTEMPTS = 3  # replies the model may end itself before the test acts (end of sequence): then try again


@pytest.fixture(scope="module")
def studio(cpu_python, tmp_path_factory, logs):
    model = servers.build_tiny_model(tmp_path_factory.mktemp("tiny-model-32k"), max_position_embeddings=MAX_MODEL_LEN)
    with servers.studio(cpu_python, model, logs / "abort-studio.log", max_model_len=MAX_MODEL_LEN,
                        max_num_seqs=4) as child:
        servers.ready(child)
        servers.pin_engine(child)
        yield child


@pytest.fixture
def watch(studio):
    """The engine's request count with time stamps; it starts from an engine that holds nothing (a request
    an earlier test left running would end in the middle of this one and read as let go)."""
    left = servers.wait_no_requests(studio, timeout=60)
    assert left == 0, f"an earlier test left {left} request(s) running in the engine"
    watcher = EngineWatch(studio)
    yield watcher
    watcher.close()


def starved(runs: list[str], evidence: str) -> None:
    """A run that could not act on its reply: an expected failure the first time in a session, a failure after."""
    runs.append(evidence)
    if len(runs) > 1:
        pytest.fail(f"{len(runs)} runs in this session could not act on their reply: {runs}")
    pytest.xfail(f"the reply ended before the test acted on it: {evidence}")


def let_go(watch: EngineWatch, held_at: float, act: Callable[[], None], studio,
           figures: Callable[[], str]) -> float:
    """Do ``act`` while vLLM holds the reply's request; seconds from the action's end to vLLM letting it go
    (negative: during the action). Fails when vLLM still holds it :data:`LET_GO_S` later; raises
    :class:`EndedBeforeAction` (with ``figures()``, the reply's figures line) when vLLM let it go before
    the action began."""
    if (released := watch.released_after(held_at)) is not None:
        raise EndedBeforeAction(released, time.monotonic(), figures())
    began = time.monotonic()
    act()
    ended = time.monotonic()
    while (released := watch.released_after(held_at)) is None and time.monotonic() < ended + LET_GO_S:
        time.sleep(0.05)
    if released is None:
        raise AssertionError(f"vLLM still holds the request {LET_GO_S:.0f} s after the action (which took "
                             f"{ended - began:.2f} s); its figures: {figures()}\n{studio.log_text()[-2000:]}")
    if released < began:
        raise EndedBeforeAction(released, began, figures())
    return released - ended


def until_acted(runs: list[str], once: Callable[[], float]) -> float:
    """``once()`` (send a long message, act on it: :func:`let_go`), again when the model ended the reply itself
    before the action (end of sequence), up to :data:`ATTEMPTS` times; another early end is a starved run."""
    for _ in range(ATTEMPTS):
        try:
            return once()
        except EndedBeforeAction as ended:
            if not ended.end_of_sequence:
                starved(runs, str(ended))
    pytest.fail(f"the model ended {ATTEMPTS} replies itself before the test could act")


def page_figures(page) -> Callable[[], str]:
    """The page's figures line once it shows how the reply ended (up to 10 s), else as it is."""
    def read() -> str:
        try:
            return wait_text(page, "#chat-figures", "finish", timeout=10_000)
        except Exception:  # noqa: BLE001 - closed, or not finished yet: say what it shows
            try:
                return page.locator("#chat-figures").inner_text(timeout=2_000)
            except Exception:  # noqa: BLE001
                return "(the page is closed)"
    return read


def _long_reply(page, watch: EngineWatch, text: str) -> float:
    set_max_tokens(page, LONG)
    shown = page.locator("#chat-figures").inner_text()
    watch.reset()
    send(page, text)
    return watch.reached(page, before=shown, timeout=120)


# The Gradio-client test runs first: after a Chromium test, a gradio_client job was seen not to reach the
# engine within 60 s on this box (not understood yet; run first, it passes).
def test_a_cancelled_chat_job_lets_the_request_go(studio, watch, starved_runs):
    """Stop's mechanism without a browser: the chat event cancelled through Gradio's queue (a gradio_client
    job cancels as the page's Stop does: ``/cancel``); its last figures show no finish."""
    from gradio_client import Client

    from tests.real_engine.test_chat_real_engine import chat_controls

    client = Client(studio.url, verbose=False)
    jobs = []

    def once() -> float:
        watch.reset()
        jobs.append(client.submit("Tell me a long story.", *chat_controls(max_tokens=LONG), api_name="/chat"))
        held_at = watch.reached(_NoPage(), timeout=120)
        last = lambda: str((jobs[-1].outputs() or [[None] * 3])[-1][2])  # noqa: E731 - the figures output
        return let_go(watch, held_at, jobs[-1].cancel, studio, last)

    try:
        assert until_acted(starved_runs, once) < LET_GO_S
        outputs = jobs[-1].outputs()
        assert not outputs or "finish" not in outputs[-1][2], outputs[-1][2] if outputs else None
    finally:
        client.close()


class _NoPage:
    """``EngineWatch.reached`` reads a page's figures; a gradio_client job has none."""

    def locator(self, _selector):
        return self

    def inner_text(self) -> str:
        return ""

    def evaluate(self, *_args) -> str:
        return "(a gradio_client job: no page)"


def test_the_stop_button_lets_the_request_go(chromium, studio, watch, starved_runs):
    """Stop, clicked in Chromium while vLLM holds the request: vLLM lets it go within seconds, the figures
    say ``⏹ stopped`` with fewer tokens than asked, the partial reply stays, the session goes on."""
    context_, page = open_studio(chromium, studio.url)

    def once() -> float:
        held_at = _long_reply(page, watch, "Tell me a very long story.")
        return let_go(watch, held_at, page.locator("#chat-stop").click, studio, page_figures(page))

    try:
        until_acted(starved_runs, once)
        stopped = wait_text(page, "#chat-figures", "⏹ stopped", studio=studio)
        assert "streaming" not in stopped and "finish" not in stopped, stopped
        assert int(stopped.split("output ")[1].split(" tok")[0].replace(",", "")) < LONG, stopped
        assert "Tell me a very long story." in page.locator("#chatbot").inner_text()
        set_max_tokens(page, 32)
        send(page, "Short one now.")  # the session goes on after a stop
        done = wait_text(page, "#chat-figures", "finish", studio=studio)
        assert "finish length" in done or "finish stop" in done, done
        assert servers.wait_no_requests(studio) == 0
    finally:
        context_.close()


def test_closing_the_tab_lets_the_request_go(chromium, studio, watch, starved_runs):
    def once() -> float:
        context_, page = open_studio(chromium, studio.url)
        try:
            held_at = _long_reply(page, watch, "Another long story, please.")
            # no renderer needed to close: the browser drops the page and its connections
            return let_go(watch, held_at, context_.close, studio, page_figures(page))
        finally:
            context_.close()

    until_acted(starved_runs, once)
    assert servers.engine_requests(studio) == 0


def test_clear_lets_the_request_go_and_empties_the_chat(chromium, studio, watch, starved_runs):
    context_, page = open_studio(chromium, studio.url)

    def once() -> float:
        held_at = _long_reply(page, watch, "And now a very long answer.")
        return let_go(watch, held_at, page.locator("#chat-clear").click, studio, page_figures(page))

    try:
        until_acted(starved_runs, once)
        page.wait_for_function("() => !document.querySelector('#chatbot').innerText.includes('very long answer')")
        set_max_tokens(page, 32)
        send(page, "A new chat.")
        assert "finish" in wait_text(page, "#chat-figures", "finish", studio=studio)
        assert servers.wait_no_requests(studio) == 0
    finally:
        context_.close()
