"""Model output never runs in the page: script payloads streamed by the scripted engine, in real Chromium.

The engine double (an ``InProcessEngine`` over ``ScriptedAsyncLLM``, as in test_chat_browser.py)
streams classic payloads — ``<script>``, ``onerror``/``onload``/``ontoggle`` handlers,
``javascript:``/``data:`` links in HTML, Markdown links, images and autolinks, ``<iframe srcdoc>``,
a meta refresh, a KaTeX ``\\href`` — as answer text, as ``<think>`` reasoning, inside Dots tool-call
arguments (chat bubbles and the tool panel), as a tool result and as an engine error (chat bubble
and the figures line). Every payload would set ``window.__pwned`` or open an ``alert``.

After each turn (collapsed bubbles opened, so their content renders too) the page must have had no
dialog, no ``__pwned``, no navigation, and no element from a payload that can run script: no
``<script>``/``<iframe>``/``<object>``/``<embed>``/``<meta>``/``<base>``/``<form>``, no ``on*``
attribute, no ``javascript:``/``vbscript:``/``data:text/html`` URL anywhere in the page. The reply
around the payloads stays readable, and where the UI shows code (tool-call JSON, the tool panel,
the figures line) the payload text itself is visible, escaped.

What Gradio's Chatbot does with raw HTML in model text (``sanitize_html=True``, the default):
DOMPurify drops script-capable tags and attributes (``<script>`` vanishes, ``<img onerror>``
becomes a bare ``<img src="x">``, links lose ``javascript:`` hrefs); custom tags such as
``<dots_function_call>`` are shown as text (``allow_tags=True``).
"""

from __future__ import annotations

import time

import pytest

from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import serve

pytestmark = pytest.mark.browser

DELAY_S = 0.01  # per delta
CHUNK = 7  # characters per delta: payloads arrive split mid-tag, so partial HTML is rendered too

# marker → payload; each would set window.__pwned (or alert) if it ever ran
PAYLOADS: dict[str, str] = {
    "P01": "<script>window.__pwned='P01';alert('P01')</script>",
    "P02": "<img src=x onerror=\"window.__pwned='P02';alert('P02')\">",
    "P03": "[click-P03](javascript:window.__pwned='P03')",
    "P04": "<a href=\"javascript:window.__pwned='P04'\">link-P04</a>",
    "P05": "<iframe srcdoc=\"<script>parent.__pwned='P05'</script>\"></iframe>",
    "P06": "<svg onload=\"window.__pwned='P06'\"><circle r=5></circle></svg>",
    "P07": "[data-P07](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "P08": "<javascript:window.__pwned='P08'>",
    "P09": "$$\\href{javascript:window.__pwned='P09'}{katex-P09}$$",
    "P10": "<details open ontoggle=\"window.__pwned='P10'\">details-P10</details>",
    "P11": "![img-P11](x\" onerror=\"window.__pwned='P11')",
    "P12": "<a href=\"&#106;avascript:window.__pwned='P12'\">entity-P12</a>",
    "P13": "[case-P13](JaVaScRiPt:window.__pwned='P13')",
    "P14": "<input autofocus onfocus=\"window.__pwned='P14'\">",
    "P15": "<object data=\"data:text/html,<script>parent.__pwned='P15'</script>\"></object>",
    "P16": "<meta http-equiv=\"refresh\" content=\"0;url=javascript:window.__pwned='P16'\">",
    "P17": "<math><a xlink:href=\"javascript:window.__pwned='P17'\">math-P17</a></math>",
    "P18": "<form action=\"javascript:window.__pwned='P18'\"><button>form-P18</button></form>",
    "P19": "<video><source onerror=\"window.__pwned='P19'\"></video>",
    "P20": "<a href=\"data:text/html,<script>alert('P20')</script>\">data-P20</a>",
    "P21": "<style>#chat-input{display:none !important} body{background:red !important}</style>style-P21",
    # not script, but UI redress: Gradio's sanitizer keeps inline styles (see test_overlays_stay_in_their_bubble)
    "P22": "<div style=\"position:fixed;top:0;left:0;width:100vw;height:100vh;z-index:9999;background:#33f\">"
           "overlay-P22</div>",
}
BODY = "\n\n".join(f"{marker}: {payload}" for marker, payload in PAYLOADS.items())
IMG = "<img src=x onerror=__pwned='T1'>"  # short enough to survive the tool panel's 48-character cells
FENCE_BREAK = "\n```\n" + PAYLOADS["P02"] + "\n```\n" + PAYLOADS["P01"]  # tries to close the JSON code block
TOOL_CALL = ("<dots_function_call>\n<invoke name=\"get_weather\">\n"
             f"<parameter name=\"city\">{IMG}</parameter>\n</invoke>\n"
             "<invoke name=\"search\">\n"
             f"<parameter name=\"query\">{PAYLOADS['P03']} {PAYLOADS['P06']}{FENCE_BREAK}</parameter>\n"
             "</invoke>\n</dots_function_call>")

# Elements and URLs that can run script; searched in the whole page after every turn.
SCAN_JS = """() => {
  const bad = [];
  const urlAttrs = ['href', 'src', 'action', 'formaction', 'xlink:href', 'data', 'srcdoc', 'content', 'poster'];
  const dangerous = /^(javascript|vbscript|data:text\\/html)/;
  for (const root of ['#chatbot', '#tool-panel', '#chat-figures']) {
    for (const el of document.querySelectorAll(root + ' *')) {
      const tag = el.tagName.toLowerCase();
      if (['script', 'iframe', 'frame', 'object', 'embed', 'meta', 'base', 'link'].includes(tag))
        bad.push(`${root} <${tag}>`);
    }
  }
  for (const el of document.body.querySelectorAll('*')) {
    for (const a of el.attributes) {
      const name = a.name.toLowerCase();
      const value = a.value.replace(/[\\s\\u0000-\\u001f]/g, '').toLowerCase();
      if (name.startsWith('on')) bad.push(`<${el.tagName.toLowerCase()} ${name}=${a.value}>`);
      if (urlAttrs.includes(name) && dangerous.test(value))
        bad.push(`<${el.tagName.toLowerCase()} ${name}=${a.value}>`);
    }
  }
  return bad;
}"""


def _last_user_text(conversation) -> str:
    content = conversation[-1]["content"]
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def _chunks(text: str) -> list[str]:
    return [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)]


def script(engine_input) -> list[str]:
    """``xss text`` / ``xss think`` / ``xss tool`` / ``xss error``; a tool result gets the payloads back."""
    conversation = engine_input["conversation"]
    if conversation[-1]["role"] == "tool":
        return _chunks("Tool said:\n\n" + BODY + "\n\nend-of-tool-turn")
    message = _last_user_text(conversation)
    if "xss think" in message:
        return _chunks("<think>" + BODY + "</think>end-of-thinking-turn")
    if "xss tool" in message:
        return _chunks("Calling the tools. " + TOOL_CALL + " end-of-tool-call-turn")
    if "xss error" in message:
        raise RuntimeError("engine-failure " + PAYLOADS["P02"] + " " + PAYLOADS["P01"])
    return _chunks("Reply:\n\n" + BODY + "\n\nend-of-text-turn")



@pytest.fixture(scope="module")
def xss_url(profile):
    with serve(profile, scripted_engine(ScriptedAsyncLLM(script, delay_s=DELAY_S))) as url:
        yield url


class Watched:
    """A page with every dialog recorded (and dismissed)."""

    def __init__(self, page, url: str) -> None:
        self.page, self.url, self.dialogs = page, url, []
        page.on("dialog", self._on_dialog)

    def _on_dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def send(self, text: str) -> None:
        self.page.locator("#chat-input textarea").fill(text)
        self.page.locator("#chat-send").click()

    def wait_figures(self, needle: str) -> None:
        self.page.wait_for_function(
            "(needle) => document.querySelector('#chat-figures').innerText.includes(needle)", arg=needle,
            polling=50)

    def open_collapsed(self) -> int:
        """Open every collapsed bubble (tool calls, tool results, errors) so its content renders."""
        closed = self.page.locator("#chatbot .thought-group .title:not(.expanded)")
        opened = 0
        while closed.count() and opened < 20:
            closed.first.click()
            opened += 1
            self.page.wait_for_timeout(100)
        return opened

    def chat_text(self) -> str:
        return self.page.locator("#chatbot").inner_text()

    def assert_nothing_ran(self) -> None:
        time.sleep(0.6)  # let failed image loads, autofocus and toggles fire
        page = self.page
        assert self.dialogs == []
        assert page.evaluate("() => window.__pwned") is None
        assert page.url.rstrip("/") == self.url, page.url  # no meta refresh / navigation
        assert page.evaluate(SCAN_JS) == []
        # the payloads did reach the renderer (the raw text is in the bubbles' aria-labels)
        labels = page.locator("#chatbot [data-testid=bot]").evaluate_all("els => els.map(e => e.ariaLabel).join(' ')")
        assert "__pwned" in labels or "__pwned" in page.locator("#tool-panel").inner_text()


@pytest.fixture
def watched(chromium, xss_url):
    context = chromium.new_context(viewport={"width": 1440, "height": 1100})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(xss_url)
    page.wait_for_selector("#chat-input textarea")
    try:
        yield Watched(page, xss_url)
    finally:
        context.close()


def _assert_reply_readable(text: str, end: str) -> None:
    assert end in text
    for marker in PAYLOADS:
        assert f"{marker}:" in text, marker
    for visible in ("click-P03", "link-P04", "data-P07", "details-P10", "entity-P12", "case-P13", "data-P20"):
        assert visible in text, visible


def test_payloads_in_the_answer_text_never_run(watched):
    watched.send("xss text " + PAYLOADS["P02"])  # the user's own bubble gets one too
    watched.wait_figures("finish stop")
    watched.assert_nothing_ran()
    _assert_reply_readable(watched.chat_text(), "end-of-text-turn")
    # links keep their text but lose the script URL
    hrefs = watched.page.locator("#chatbot a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert not any(h and h.strip().lower().startswith(("javascript", "data")) for h in hrefs), hrefs


def test_payloads_in_the_reasoning_never_run(watched):
    watched.send("xss think")
    watched.wait_figures("finish stop")
    watched.open_collapsed()
    watched.assert_nothing_ran()
    text = watched.chat_text()
    assert "Thinking" in text
    _assert_reply_readable(text, "end-of-thinking-turn")


def test_payloads_in_tool_calls_and_results_never_run(watched):
    page = watched.page
    page.locator("#tool-examples input").click()
    page.get_by_role("option", name="all three", exact=True).click()
    page.wait_for_function("() => document.querySelector('#tools-status').innerText.includes('3 tool(s)')")
    watched.send("xss tool")
    watched.wait_figures("tool_calls")
    assert watched.open_collapsed() == 2  # the two tool-call bubbles
    watched.assert_nothing_ran()
    text = watched.chat_text()
    assert "end-of-tool-call-turn" in text and "🛠 get_weather" in text and "🛠 search" in text
    # inside the JSON code block the arguments are shown as text, escaped — the fence break included
    assert IMG in text and PAYLOADS["P02"].replace('"', '\\"') in text
    panel = page.locator("#tool-panel").inner_text()
    assert IMG in panel and "get_weather" in panel
    assert page.locator("#tool-panel img").count() == 0

    page.locator("#tool-run").click()  # the example tools echo the arguments back as their result
    page.wait_for_function("() => document.querySelector('#tool-panel').innerText.includes('answered')")
    watched.wait_figures("finish stop")
    watched.open_collapsed()
    watched.assert_nothing_ran()
    _assert_reply_readable(watched.chat_text(), "end-of-tool-turn")
    assert "result (sent to the model)" in watched.chat_text()


def test_payloads_in_an_engine_error_never_run(watched):
    watched.send("xss error")
    watched.page.wait_for_function(
        "() => document.querySelector('#chat-figures').innerText.includes('engine error')", polling=50)
    watched.open_collapsed()
    watched.assert_nothing_ran()
    figures = watched.page.locator("#chat-figures").inner_text()
    assert "engine-failure " + PAYLOADS["P02"] in figures  # escaped by the figures line: shown as text
    assert "The engine failed during this reply" in watched.chat_text()
    assert "engine-failure" in watched.chat_text()


def test_overlays_stay_in_their_bubble(watched):
    """A ``position:fixed`` full-page overlay from the model is clipped to its chat bubble (style.CSS),
    and a ``<style>`` element does not restyle the page."""
    watched.send("xss text")
    watched.wait_figures("finish stop")
    page = watched.page
    covered = page.evaluate("""() => {
        const overlay = [...document.querySelectorAll('#chatbot div')].find(d => d.textContent === 'overlay-P22');
        const bubble = overlay.closest('.message-content').getBoundingClientRect();
        const points = [[5, 5], [innerWidth - 5, 5], [innerWidth - 5, innerHeight - 5], [5, innerHeight - 5],
                        [innerWidth / 2, innerHeight / 2]];
        return points.filter(([x, y]) => x < bubble.left || x > bubble.right || y < bubble.top || y > bubble.bottom)
                     .filter(([x, y]) => overlay.contains(document.elementFromPoint(x, y)));
    }""")
    assert covered == []  # outside its bubble the overlay neither paints nor takes clicks
    assert page.locator("#chat-input textarea").is_visible()
    assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") != "rgb(255, 0, 0)"


def test_the_detectors_catch_a_payload_that_runs(watched):
    """Control: the same checks fail when a payload does run (so the tests above can fail)."""
    page = watched.page
    page.evaluate("""() => {
        const bubble = document.querySelector('#chatbot');
        const div = document.createElement('div');
        div.innerHTML = `<img src=x onerror="window.__pwned='control';alert('control')">`;
        bubble.appendChild(div);
    }""")
    page.wait_for_function("() => window.__pwned === 'control'")
    time.sleep(0.3)
    assert watched.dialogs == ["control"]
    assert any("onerror" in item for item in page.evaluate(SCAN_JS))
    with pytest.raises(AssertionError):
        watched.assert_nothing_ran()
