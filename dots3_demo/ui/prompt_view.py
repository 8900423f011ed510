"""The prompt view's hook in the page (issue 21 §1-2): the fold under a reply's figures line (chat and compare)
and the flags the view carries (another model, another template), as Markdown lines; and the request as sent
(§3), a fold beside it with the request as ``curl``, Python and JSON (``workbench.request_fold``). The prompt
view's HTML is ``workbench.prompt_html``'s, shared with the reports."""

from __future__ import annotations

from dots3_demo.engine.promptview import PromptView
from dots3_demo.ui import views
from dots3_demo.workbench.prompt_html import prompt_view_html
from dots3_demo.workbench.request_fold import request_md as request_md


def fold_md(view: PromptView | None) -> str:
    """The fold with the prompt token by token, as a block of its own after the figures ("" without a view)."""
    html = prompt_view_html(view)
    return f"\n\n{html}\n" if html else ""


def flags_md(view: PromptView | None) -> str:
    """The view's flags as ``⚠`` lines of the figures (they also show inside the fold)."""
    if view is None:
        return ""
    return "".join(f"  \n⚠ {views.esc(flag)}" for flag in view.flags)
