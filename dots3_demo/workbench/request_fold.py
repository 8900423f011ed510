"""The request as sent, as a fold of Markdown under a reply's figures line (issue 21 §3): where it went, then the
request as ``curl``, as Python and as JSON (``engine.wire``), each a code block that Gradio's Markdown gives a copy
button. The fold is drawn under the reply, never recorded: :func:`without_request` takes it out of a figures line
before the session record keeps the line (its local media paths stay on this machine; the record's transcript holds
the conversation)."""

from __future__ import annotations

import re

from dots3_demo.engine import wire
from dots3_demo.engine.protocol import ChatRequest
from dots3_demo.workbench.report_html import esc

FORMS = (("curl", "bash", wire.as_curl), ("Python (openai client)", "python", wire.as_python),
         ("JSON body", "json", wire.as_json))
_OPEN = '\n\n<details class="d3-request">'
_CLOSE = "\n\n</details>\n"
# the fold, from its opening to its closing line: the forms hold no blank line followed by </details> (JSON and
# Python escape the line feeds inside strings)
_FOLD = re.compile(re.escape(_OPEN) + ".*?" + re.escape(_CLOSE), re.S)


def request_md(request: ChatRequest | None) -> str:
    """The fold ("" without a request)."""
    if request is None:
        return ""
    where = (f"sent to `{esc(request.endpoint)}`" if request.endpoint else
             f"made in-process: a `vllm serve` of `{esc(request.model)}` gets the same prompt")
    blocks = "\n\n".join(f"**{label}**\n\n{wire.fence(form(request), language)}" for label, language, form in FORMS)
    return (f'{_OPEN}<summary title="curl · Python · JSON, each with a copy button">the request as sent</summary>'
            f"\n\n{where}\n\n{blocks}{_CLOSE}")


def without_request(figures: str) -> str:
    """A figures line without its request fold (as the session record keeps it)."""
    return _FOLD.sub("", figures)
