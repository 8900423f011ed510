"""Issue 19, against vLLM's real ``AsyncLLM`` (CPU build) in ``app.py --engine inprocess``:

- stopping the studio stops vLLM: SIGTERM and SIGINT to the studio's process end every process it started
  (vLLM's engine core among them) within seconds, nothing reparented to PID 1 left behind;
- a hung engine is noticed: vLLM's engine-core process frozen (SIGSTOP) mid-reply, the session says the
  engine stopped producing tokens, ``/readyz`` fails and ``/healthz`` names it; with
  ``--exit-on-engine-stall`` the studio then exits with status 3, the frozen engine's processes ended too
  (whether the page showed the message in the 5 s before is the first test's business: a page on this busy
  2-core machine may take longer).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

from dots3_demo.serving.stopping import EXIT_ENGINE_STALLED, Proc, alive, descendants
from support import servers
from tests.browser.conftest import open_studio
from tests.real_engine.pages import send, set_max_tokens, wait_text

pytestmark = pytest.mark.real_engine

GONE_WITHIN_S = 15


def _tree(child: servers.Process) -> list[Proc]:
    """The studio's processes below it, from /proc (vLLM's engine core among them)."""
    tree = descendants(child.process.pid)
    assert tree, "the studio started no process"
    return tree


def _left(tree: list[Proc], within: float) -> list[Proc]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [p for p in tree if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in tree if alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_ends_every_engine_process(cpu_python, tiny_model, logs, sig):
    with servers.studio(cpu_python, tiny_model, logs / f"stop-{sig.name}.log") as child:
        servers.ready(child)
        tree = _tree(child)
        servers.engine_core(child)  # vLLM's engine core is one of them
        os.kill(child.process.pid, sig)  # to the studio's process only, as a supervisor's stop or `kill` sends it
        left = _left(tree, GONE_WITHIN_S)
        assert not left, f"still running {GONE_WITHIN_S} s after {sig.name}: {left}\n{child.log_text()[-3000:]}"
        assert child.process.wait(GONE_WITHIN_S) == 0, child.log_text()[-3000:]
        assert f"studio: {sig.name}: stopping vLLM's processes" in child.log_text()


def _frozen_mid_reply(chromium, child: servers.Process):
    """A browser session whose reply is streaming when vLLM's engine core is frozen (SIGSTOP).

    vLLM's processes are pinned to one core first (``servers.pin_engine``): unpinned, on a 2-core box, the
    CPU engine decoded the whole reply (3,000 tokens in ~8 s) while the test's polls of /healthz went
    unanswered (seen in CI: the count never seen at 1)."""
    servers.ready(child)
    servers.pin_engine(child)
    context, page = open_studio(chromium, child.url)
    set_max_tokens(page, 3000)  # many seconds of streaming
    send(page, "A long reply, please.")
    servers.wait_requests(child, 1)
    core = servers.engine_core(child)
    core.suspend()  # SIGSTOP: the engine holds the request and yields nothing, as a hung GPU does
    return context, page, core


def test_a_frozen_engine_is_noticed_and_every_session_told(chromium, cpu_python, tiny_model, logs, shots_dir):
    with servers.studio(cpu_python, tiny_model, logs / "stall.log", "--engine-stall-timeout", "8",
                        max_model_len=4096) as child:
        context, page, core = _frozen_mid_reply(chromium, child)
        try:
            wait_text(page, "#chatbot", "The engine stopped", timeout=60_000, studio=child)
            said = page.locator("#chat-figures").inner_text()
            assert "stopped producing tokens" in said and "Restart the studio" in said, said
            status, ready = servers.get_json(child.url + "/readyz")
            assert (status, ready["engine"]) == (503, "failed"), ready
            status, health = servers.get_json(child.url + "/healthz")
            assert status == 200 and "stopped producing tokens" in health["message"], health
            page.locator("#chat-panel").screenshot(path=str(shots_dir / "real_engine_stalled.png"))
            page.wait_for_function("() => document.querySelector('#chat-send') && "
                                   "!document.querySelector('#chat-send').disabled")
            send(page, "Still there?")  # a later message is told the same, at once
            wait_text(page, "#chat-figures", "stopped producing tokens", timeout=30_000, studio=child)
            assert child.process.poll() is None  # no --exit-on-engine-stall: the studio stays up
        finally:
            with contextlib.suppress(Exception):
                core.resume()  # SIGCONT, so that the studio's own stop can end it
            context.close()


def test_exit_on_engine_stall_exits_3_and_ends_the_frozen_engine(chromium, cpu_python, tiny_model, logs):
    with servers.studio(cpu_python, tiny_model, logs / "stall-exit.log", "--engine-stall-timeout", "8",
                        "--exit-on-engine-stall", max_model_len=4096) as child:
        context, page, core = _frozen_mid_reply(chromium, child)
        tree = _tree(child)
        try:
            assert child.process.wait(90) == EXIT_ENGINE_STALLED, child.log_text()[-3000:]
            log = child.log_text()
            assert "the engine stopped producing tokens" in log and "studio: SIGTERM: stopping vLLM's processes" in log
            left = _left(tree, GONE_WITHIN_S)  # the frozen core ignores SIGTERM: it is killed
            assert not left, f"still running after the exit: {left}\n{child.log_text()[-3000:]}"
        finally:
            with contextlib.suppress(Exception):
                core.resume()
            context.close()
