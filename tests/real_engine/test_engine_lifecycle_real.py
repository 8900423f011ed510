"""The engine's start, failed start and death, against vLLM's real ``AsyncLLM`` (CPU build), in Chromium.

- While the engine loads, the page, ``/healthz`` and the inspector answer; the chat shows the load
  stage and the time, and a message sent meanwhile waits, then streams.
- The engine-core process killed mid-stream: a clear message, ``/readyz`` says ``failed``, the page
  stays usable.
- A start that fails (no weights to load): why, in plain words (no exception class names), vLLM's own
  last lines in a fold; the header and ``/readyz`` say ``failed``.
"""

from __future__ import annotations

import re
import time

import pytest

from support import servers
from tests.browser.conftest import open_studio
from tests.engine.media import png_bytes
from tests.real_engine.pages import add_image, send, set_max_tokens, wait_text

pytestmark = [pytest.mark.real_engine, pytest.mark.browser]

CLASS_NAME = re.compile(r"\b\w+(Error|Exception)\b")


def test_loading_never_freezes_the_server_and_a_killed_engine_says_so(chromium, cpu_python, tiny_model, logs,
                                                                       tmp_path, shots_dir):
    with servers.studio(cpu_python, tiny_model, logs / "lifecycle.log", max_model_len=4096) as child:
        report = servers.up(child)
        assert report["engine"] in ("idle", "loading")  # the server answers before the engine is up
        image = tmp_path / "dot.png"
        image.write_bytes(png_bytes())
        context, page = open_studio(chromium, child.url)
        try:
            # ---- while it loads: probes, the page, the inspector, a waiting message
            status = page.locator("#engine-status")
            page.wait_for_function("() => { const e = document.querySelector('#engine-status');"
                                   " return e && /engine loading — .* · \\d+ s/.test(e.innerText); }", timeout=60_000)
            assert "a message you send now waits until the model is ready" in status.inner_text()
            started = time.monotonic()
            probe = servers.get_json(child.url + "/healthz")
            assert time.monotonic() - started < 2 and probe[1]["engine"] == "loading"
            assert servers.get_json(child.url + "/readyz")[0] == 503
            first = status.inner_text()
            page.wait_for_function("(f) => document.querySelector('#engine-status').innerText !== f", arg=first)
            page.screenshot(path=str(shots_dir / "real_engine_loading.png"))
            page.locator("#chat-panel").screenshot(path=str(shots_dir / "real_engine_loading_chat.png"))
            add_image(page, image)  # the inspector answers while vLLM loads
            page.locator("#images-input button[aria-label='Clear']").first.click()
            wait_text(page, "#status", "cleared")
            if servers.get_json(child.url + "/healthz")[1]["engine"] == "loading":
                send(page, "Are you there yet?")
                wait_text(page, "#chat-figures", "waiting for the engine to load", timeout=60_000)
            else:  # loaded already on a fast machine: the message goes straight through
                send(page, "Are you there yet?")
            wait_text(page, "#chat-figures", "finish", timeout=300_000)
            assert servers.get_json(child.url + "/readyz")[0] == 200
            assert "engine ready" in status.inner_text()

            # ---- the engine-core process dies mid-stream
            servers.pin_engine(child)  # on 2 cores, unpinned, the reply ran to its end before the kill
            set_max_tokens(page, 3000)  # many seconds of streaming
            send(page, "One more long reply, please.")
            servers.wait_requests(child, 1)
            servers.engine_core(child).kill()  # mid-reply: vLLM still holds the request
            wait_text(page, "#chatbot", "The engine stopped", timeout=60_000)
            said = page.locator("#chat-figures").inner_text()  # the bubble's text is folded; the line is not
            assert "core process ended unexpectedly" in said and "Restart the studio" in said
            assert not CLASS_NAME.search(said), said
            status_code, body = servers.get_json(child.url + "/readyz")
            assert (status_code, body["engine"]) == (503, "failed")
            page.wait_for_function("() => document.querySelector('#chat-send') && "
                                   "!document.querySelector('#chat-send').disabled")
            send(page, "Still there?")  # the page stays usable and says why nothing answers
            wait_text(page, "#chat-figures", "The engine is not available", timeout=30_000)
            add_image(page, image)  # and the inspector still works
            page.locator("#chat-panel").screenshot(path=str(shots_dir / "real_engine_died.png"))
        finally:
            context.close()


def test_a_failed_start_says_why_in_plain_words(chromium, cpu_python, tiny_model, logs, shots_dir):
    # No weights in the folder and a real load format: vLLM's engine core fails to start.
    with servers.studio(cpu_python, tiny_model, logs / "failed.log", "--load-format", "safetensors") as child:
        servers.up(child)
        body = child.wait_until(lambda: (lambda s, b: b if b.get("engine") == "failed" else None)(
            *servers.get_json(child.url + "/readyz")), "a failed start")
        assert servers.get_json(child.url + "/readyz")[0] == 503
        assert body["message"].startswith("the engine could not start: ")
        assert "weights" in body["message"] and not CLASS_NAME.search(body["message"]), body["message"]
        context, page = open_studio(chromium, child.url)
        try:
            status = page.locator("#engine-status")
            wait_text(page, "#engine-status", "engine failed")
            assert "could not start" in status.inner_text()
            fold = page.locator("#engine-status details")
            assert fold.count() == 1 and "vLLM's last lines" in fold.inner_text()
            fold.locator("summary").click()
            assert "weights" in fold.inner_text()
            assert "failed" in page.locator("#d3-header").inner_text()
            page.locator("#chat-panel").screenshot(path=str(shots_dir / "real_engine_failed_start.png"))
            send(page, "Hello?")
            wait_text(page, "#chat-figures", "the engine could not start", timeout=30_000)
        finally:
            context.close()
