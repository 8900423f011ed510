"""The prompt view as HTML (issue 21 §1): the rendered prompt token by token, each run of media pad tokens one
labelled chip, coloured by kind, each chip's token ids in its tooltip and all ids in a fold. Used under each chat
reply, on each compare side and in the HTML reports; one line of HTML (no blank line, no raw line feed), so it sits
inside Markdown as one block. Text is escaped, control bytes shown as their Control Pictures."""

from __future__ import annotations

import html

from dots3_demo.core.text import show_controls
from dots3_demo.engine.promptview import PromptSpan, PromptView

KIND_COLOURS = {"text": "#f3f4f6", "special": "#c7d2fe", "image": "#fde68a", "audio": "#bbf7d0",
                "video frame": "#fecaca", "video sound": "#a5f3fc", "tools": "#e9d5ff"}
# where a view's ids came from: (the summary's words, kept to one line under a reply; what exactly, inside the fold)
SOURCES = {"engine": ("the engine's own ids", "vLLM's RequestOutput.prompt_token_ids"),
           "server": ("the server's own ids", "the prompt_token_ids it returned"),
           "renderer": ("vLLM's renderer, run here", "vLLM's chat template and tokenizer, as the engine renders")}


def _esc(text: str) -> str:
    return html.escape(show_controls(text), quote=True)


def _text_html(text: str) -> str:
    """Escaped text whose line feeds show (↵) and break the line without a raw line feed in the HTML."""
    return "↵<br>".join(_esc(line) for line in text.split("\n"))


def _ids(span: PromptSpan) -> str:
    if span.pad:
        return f"id {span.token_ids[0]} × {span.repeat:,}"
    return "ids " + " ".join(str(i) for i in span.token_ids)


def kind_class(kind: str) -> str:
    """A chip's class for its kind: ``d3-tok-video-frame``."""
    return "d3-tok-" + kind.replace(" ", "-")


def span_html(span: PromptSpan) -> str:
    style = f"background:{KIND_COLOURS[span.kind]};border-radius:3px;white-space:pre-wrap"
    if span.kind != "text":
        style += ";padding:0 2px;font-weight:600"
    label = _esc(span.label) if span.kind != "text" else _text_html(span.text)
    # the kind is in the class (Gradio's Markdown sanitizer keeps class, title and style, not data-* attributes)
    return (f'<span class="d3-tok {kind_class(span.kind)}" title="{_esc(span.kind)} · {span.count:,} token(s) · '
            f'{_ids(span)}" style="{style}">{label}</span>')


def legend_html(view: PromptView) -> str:
    present = {s.kind for s in view.spans}
    return " ".join(f'<span style="background:{colour};border-radius:3px;padding:0 4px">{kind}</span>'
                    for kind, colour in KIND_COLOURS.items() if kind in present)


def prompt_view_html(view: PromptView | None, *, open_: bool = False) -> str:
    """The fold: a summary line (tokens, source, flags), the legend, the prompt's chips and a fold of every id."""
    if view is None:
        return ""
    flags = "".join(f'<div class="d3-prompt-flag">⚠ {_esc(flag)}</div>' for flag in view.flags)
    note = f" · {_esc(view.note)}" if view.note else ""
    body = "".join(span_html(s) for s in view.spans)
    ids = " ".join(f"{s.token_ids[0]}×{s.repeat}" if s.pad else " ".join(map(str, s.token_ids)) for s in view.spans)
    short, detail = SOURCES[view.source]
    return (f'<details class="d3-prompt"{" open" if open_ else ""}><summary>the prompt as the engine got it: '
            f'{view.total:,} tokens ({_esc(short)})</summary>'
            f'<div class="d3-prompt-source">from {_esc(short)} ({_esc(detail)}){note}</div>{flags}'
            f'<div class="d3-prompt-legend" style="margin:4px 0">{legend_html(view)}</div>'
            f'<div class="d3-prompt-body" style="font-family:monospace;font-size:.8rem;line-height:1.7">{body}</div>'
            f'<details class="d3-prompt-ids"><summary>token ids ({view.total:,}; a pad run as id×n)</summary>'
            f'<div style="font-family:monospace;font-size:.75rem;word-break:break-all">{ids}</div></details>'
            '</details>')
