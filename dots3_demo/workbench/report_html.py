"""Self-contained HTML building blocks for the workbench's reports: the session report
(``workbench.record``) and the batch-evaluation report (``app.py eval``).

A report is one file that opens offline and runs nothing:

* :func:`page_html` wraps a body in a document with inline CSS and a Content-Security-Policy ``<meta>``
  that forbids every script, every external load and every form (:data:`CSP`); no block here writes a
  URL other than a ``data:`` image;
* every text that reaches the page (model output, file names, notes, tool arguments, an imported
  session's JSON) goes through ``html.escape``, its control bytes shown visibly (``core.text.show_controls``);
  a block returns HTML and only blocks' output may be joined into a body.

The pictures are the inspector's: :func:`frame_thumbnails` shrinks the frames vLLM's video code produced
(``VideoReport.frames``, what the UI's Frames gallery shows) and captions them with the timestamp text
vLLM puts before each frame; :func:`image_thumbnail` shrinks the image as vLLM loaded it. Both take a
report already made, so a caller that inspected once never inspects again. The token plan
(:func:`plan_html`) is drawn from the inspector's JSON object for one file (``report_to_json``: what
``app.py inspect --json`` prints), errors included.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dots3_demo.core.records import Answer, Verdict
from dots3_demo.core.text import show_controls
from dots3_demo.engine.protocol import ToolCall, TurnStats
from dots3_demo.engine.stats import finish_words
from dots3_demo.workbench.prompt_html import prompt_view_html

if TYPE_CHECKING:
    from PIL import Image

    from dots3_demo.inspection import Report
    from dots3_demo.inspection.image import ImageReport
    from dots3_demo.inspection.video import VideoReport

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
THUMB_SIDE = 160  # px, the longer side of a thumbnail
JPEG_QUALITY = 70
VERDICT_SHOWN = {"up": "👍", "down": "👎"}

STYLE = """
:root { color-scheme: light; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa;
  --image: #4c78a8; --audio: #f58518; --text: #54a24b; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; }
* { box-sizing: border-box; }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); margin: 0;
  padding: 24px; max-width: 1200px; margin-inline: auto; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
.d3r-sub { color: var(--muted); margin-bottom: 16px; }
.d3r-banner { border: 1px solid var(--warn); background: #fff8c5; padding: 8px 12px; border-radius: 6px;
  margin: 12px 0; }
table.d3r-table { border-collapse: collapse; margin: 6px 0 10px; }
.d3r-table th, .d3r-table td { border: 1px solid var(--line); padding: 3px 8px; text-align: left;
  vertical-align: top; }
.d3r-table th { background: var(--soft); font-weight: 600; }
.d3r-table td.d3r-num, .d3r-table th.d3r-num { text-align: right; font-variant-numeric: tabular-nums; }
.d3r-strip { display: flex; flex-wrap: wrap; gap: 6px; margin: 6px 0 10px; }
.d3r-strip figure { margin: 0; text-align: center; }
.d3r-strip img { display: block; border: 1px solid var(--line); border-radius: 3px; }
.d3r-strip figcaption { font: 11px/1.3 ui-monospace, SFMono-Regular, Menlo, monospace; color: var(--muted); }
.d3r-media, .d3r-turn, .d3r-answer { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px;
  margin: 10px 0; }
.d3r-user { background: #ddf4ff; }
.d3r-tool { background: var(--soft); }
.d3r-text { white-space: pre-wrap; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: var(--soft); padding: 8px; border-radius: 6px;
  margin: 4px 0; font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
details > summary { cursor: pointer; color: var(--muted); }
details > .d3r-text { color: var(--muted); border-left: 3px solid var(--line); padding-left: 8px; margin: 4px 0 8px; }
.d3r-figures { color: var(--muted); font-size: 13px; margin-top: 6px; }
.d3r-rating { margin-top: 6px; }
.d3r-ok { color: var(--ok); font-weight: 600; }
.d3r-bad { color: var(--bad); font-weight: 600; }
.d3r-error { color: var(--bad); }
.d3r-note { color: var(--muted); }
.d3r-tag { display: inline-block; border: 1px solid var(--line); border-radius: 10px; padding: 0 8px;
  font-size: 12px; margin-right: 4px; }
.d3r-dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 5px; }
.d3r-cols { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.d3r-plot { max-width: 100%; display: block; margin: 4px 0; }
"""


def esc(value: object) -> str:
    """Any value as escaped HTML text (quotes too: safe inside an attribute), control bytes shown as their Control
    Pictures (``core.text.show_controls``: a NUL is ␀, never a raw byte in the page)."""
    return html.escape(show_controls(str(value)), quote=True)


# ---------------------------------------------------------------- the page
def page_html(title: str, body: str, *, subtitle: str = "") -> str:
    """A whole document: ``body`` (HTML made by this module's blocks) under an escaped ``title``."""
    sub = f'<div class="d3r-sub">{esc(subtitle)}</div>' if subtitle else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{esc(title)}</h1>{sub}\n{body}\n</body>\n</html>\n"
    )


def section_html(title: str, body: str, *, anchor: str = "") -> str:
    """An ``<h2>`` section (``anchor``: its id, escaped)."""
    ident = f' id="{esc(anchor)}"' if anchor else ""
    return f"<section{ident}><h2>{esc(title)}</h2>{body}</section>"


def banner_html(text: str) -> str:
    """A one-line notice at the top of a report (e.g. "preview: no engine, no answers")."""
    return f'<div class="d3r-banner" role="note">{esc(text)}</div>'


def text_html(text: str, *, cls: str = "d3r-text") -> str:
    """Free text (model output, a prompt) with its line breaks kept."""
    return f'<div class="{esc(cls)}">{esc(text)}</div>'


def facts_html(rows: Iterable[tuple[str, object]]) -> str:
    """A two-column table of labels and values (both escaped)."""
    body = "".join(f"<tr><th>{esc(label)}</th><td>{esc(value)}</td></tr>" for label, value in rows)
    return f'<table class="d3r-table">{body}</table>'


def table_html(header: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Sequence[int] = ()) -> str:
    """A table of escaped cells; the columns in ``numeric`` are right-aligned."""
    def cls(i: int) -> str:
        return ' class="d3r-num"' if i in numeric else ""

    head = "".join(f"<th{cls(i)}>{esc(h)}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{esc(c)}</td>" for i, c in enumerate(row)) + "</tr>"
                   for row in rows)
    return f'<table class="d3r-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# ---------------------------------------------------------------- thumbnails
@dataclass(frozen=True)
class Thumbnail:
    """A small JPEG as a ``data:`` URI, with its caption (a frame: vLLM's timestamp text) and a detail line."""

    uri: str
    caption: str
    width: int
    height: int
    detail: str = ""


def thumbnail(image: Image.Image, caption: str, *, detail: str = "", max_side: int = THUMB_SIDE,
              quality: int = JPEG_QUALITY) -> Thumbnail:
    """``image`` shrunk to ``max_side`` (never enlarged), as a JPEG ``data:`` URI."""
    from PIL import Image as PILImage

    picture = image.convert("RGB")
    scale = min(1.0, max_side / max(picture.size))
    if scale < 1.0:
        size = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
        picture = picture.resize(size, PILImage.Resampling.BICUBIC)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=quality)
    uri = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return Thumbnail(uri=uri, caption=caption, width=picture.width, height=picture.height, detail=detail)


def frame_thumbnails(report: VideoReport, *, max_side: int = THUMB_SIDE) -> tuple[Thumbnail, ...]:
    """One thumbnail per frame the vision tower gets (the frames vLLM's preprocessing produced, as the
    Frames gallery shows them), captioned with the timestamp text vLLM puts before it."""
    return tuple(
        thumbnail(f.image, f.timestamp, detail=f"{f.grid[1]}×{f.grid[2]} grid · {f.tokens} tok", max_side=max_side)
        for f in report.frames
    )


def image_thumbnail(report: ImageReport, caption: str, *, max_side: int = THUMB_SIDE) -> Thumbnail | None:
    """The image as vLLM loaded it (None when the report holds no picture)."""
    if report.image is None:
        return None
    return thumbnail(report.image, caption, detail=f"{report.tokens} tok", max_side=max_side)


def report_thumbnails(report: Report, caption: str = "", *, max_side: int = THUMB_SIDE) -> tuple[Thumbnail, ...]:
    """A video's frames, an image's picture (captioned ``caption``), nothing for audio."""
    from dots3_demo.inspection.image import ImageReport
    from dots3_demo.inspection.video import VideoReport

    if isinstance(report, VideoReport):
        return frame_thumbnails(report, max_side=max_side)
    if isinstance(report, ImageReport):
        thumb = image_thumbnail(report, caption, max_side=max_side)
        return (thumb,) if thumb is not None else ()
    return ()


def thumbnails_html(thumbs: Sequence[Thumbnail]) -> str:
    """A wrapping strip of thumbnails, each with its caption under it ("" when there are none)."""
    if not thumbs:
        return ""
    def figure(t: Thumbnail) -> str:
        title = f' title="{esc(t.detail)}"' if t.detail else ""
        return (f'<figure><img src="{esc(t.uri)}" width="{t.width}" height="{t.height}" alt="{esc(t.caption)}"'
                f"{title}><figcaption>{esc(t.caption)}</figcaption></figure>")

    figures = "".join(figure(t) for t in thumbs)
    return f'<div class="d3r-strip">{figures}</div>'


# ---------------------------------------------------------------- the token plan
def _n(value: object) -> str:
    """A number from the inspector's JSON as text (``1,234``; ``1.5``); anything else as it is."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def _get(data: object, *keys: str) -> object:
    """``data[k1][k2]…`` of a JSON object, or "—" where a key is missing (an imported file may lack it)."""
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return "—"
        data = data[key]
    return data


def _size(value: object) -> str:
    if isinstance(value, list) and len(value) == 2:
        return f"{_n(value[0])}×{_n(value[1])}"
    return _n(value)


def _plan_rows(kind: str, data: Mapping[str, Any]) -> list[tuple[str, str]]:
    if kind == "video":
        frames = data.get("frames")
        segments = data.get("audio_segments")
        frame_list = frames if isinstance(frames, list) else []
        first = frame_list[0] if frame_list and isinstance(frame_list[0], Mapping) else {}
        return [
            ("clip", f"{_n(_get(data, 'duration'))} s · {_n(_get(data, 'fps'))} fps · "
                     f"{_size(_get(data, 'resolution'))}"),
            ("frames the model sees", f"{len(frame_list)} · {_size(_get(first, 'decoded_size'))} each · "
                                      f"solver {_n(_get(data, 'solver', 'effective_fps'))} fps, patch cap "
                                      f"{_n(_get(data, 'solver', 'patch_cap'))}"),
            ("sound track", f"{'kept' if _get(data, 'audio', 'kept') is True else 'not in prompt'}: "
                            f"{_audio_reason(data)} · {len(segments) if isinstance(segments, list) else 0} "
                            "segment(s)"),
            ("k_mode · audio_cap", f"{_get(data, 'solver', 'k_mode')} · {_n(_get(data, 'solver', 'audio_cap'))}"),
            ("budget", f"seq {_n(_get(data, 'budget', 'seq'))} − reserve "
                       f"{_n(_get(data, 'budget', 'output_reserve'))} = input "
                       f"{_n(_get(data, 'budget', 'input_budget'))} · used {_n(_get(data, 'budget', 'used'))} · "
                       f"free {_n(_get(data, 'budget', 'free'))}"),
        ]
    if kind == "image":
        return [
            ("image", f"{_size(_get(data, 'original_size'))} {_get(data, 'original_mode')} → "
                      f"{_size(_get(data, 'resized_size'))}"),
            ("patch grid", f"{_get(data, 'grid')} ({_n(_get(data, 'patch_size'))} px patches, "
                           f"{_n(_get(data, 'merge_size'))}×{_n(_get(data, 'merge_size'))} per token)"),
        ]
    return [
        ("audio", f"{_n(_get(data, 'duration'))} s · {_n(_get(data, 'original_sample_rate'))} Hz × "
                  f"{_n(_get(data, 'original_channels'))} ch → {_n(_get(data, 'sample_rate'))} Hz mono"),
        ("encoder chunks", f"≤{_n(_get(data, 'chunk_seconds'))} s → {_get(data, 'chunk_tokens')}"),
    ]


def _token_rows(kind: str, data: Mapping[str, Any]) -> list[tuple[str, str, object]]:
    """(colour, modality, tokens) rows of the plan's tokens by modality."""
    if kind == "video":
        return [("image", "frames (image)", _get(data, "image_pad_tokens")),
                ("audio", "sound track (audio)", _get(data, "audio_pad_tokens")),
                ("text", "timestamps, tags (text)", _get(data, "text_tokens")),
                ("", "video span", _get(data, "prompt_tokens"))]
    if kind == "image":
        return [("image", "image", _get(data, "tokens"))]
    return [("audio", "audio", _get(data, "tokens"))]


def _texts(value: object) -> list[str]:
    """A JSON list of notes as texts (anything else, e.g. from a damaged file: none)."""
    return [str(v) for v in value] if isinstance(value, list) else []


def _dot(colour: str) -> str:
    """The modality's colour dot (the UI's colours: image blue, audio orange, text green)."""
    return f'<span class="d3r-dot" style="background:var(--{esc(colour)})"></span>' if colour else ""


def _audio_reason(data: Mapping[str, Any]) -> str:
    """The inspector's reason for the sound track, without the verdict it may start with (said before it)."""
    return str(_get(data, "audio", "reason")).removeprefix("kept: ").removeprefix("dropped: ")


def plan_html(plan: Mapping[str, Any]) -> str:
    """One media item's token plan from the inspector's JSON object for it (``report_to_json``'s
    ``{"file", "kind", <kind>: {...}}``, or ``{"file", "error"}``): what the model gets and its tokens
    by modality, the budget, the audio decision, the frames' timestamps and the inspector's notes."""
    name = _get(plan, "file")
    if "error" in plan:
        return (f'<div class="d3r-plan"><div class="d3r-error">⚠ {esc(name)}: could not be inspected — '
                f"{esc(plan['error'])}</div></div>")
    kind = str(_get(plan, "kind"))
    data = plan.get(kind)
    if kind not in ("video", "image", "audio") or not isinstance(data, Mapping):
        return f'<div class="d3r-plan"><div class="d3r-error">⚠ {esc(name)}: no plan recorded</div></div>'
    rows = "".join(f'<tr><td>{_dot(colour)}{esc(label)}</td><td class="d3r-num">{esc(_n(tokens))}</td></tr>'
                   for colour, label, tokens in _token_rows(kind, data))
    tokens = (f'<table class="d3r-table"><thead><tr><th>tokens by modality</th><th class="d3r-num">tokens</th>'
              f"</tr></thead><tbody>{rows}</tbody></table>")
    parts = [facts_html(_plan_rows(kind, data)), tokens]
    frames = data.get("frames") if kind == "video" else None
    if isinstance(frames, list) and frames:
        stamps = " ".join(esc(_get(f, "timestamp")) for f in frames)
        parts.append(f"<details><summary>frame timestamps ({len(frames)})</summary><pre>{stamps}</pre></details>")
    notes = [*_texts(data.get("notes")), *(f"approximate: {a}" for a in _texts(plan.get("approximate")))]
    if notes:
        parts.append("<ul>" + "".join(f'<li class="d3r-note">{esc(n)}</li>' for n in notes) + "</ul>")
    return f'<div class="d3r-plan">{"".join(parts)}</div>'


def media_html(title: str, plan: Mapping[str, Any] | None, thumbs: Sequence[Thumbnail] = ()) -> str:
    """One media item: its title, thumbnails (frames with their timestamps, or the image) and plan."""
    body = thumbnails_html(thumbs) + (plan_html(plan) if plan is not None else "")
    return f'<div class="d3r-media"><h3>{esc(title)}</h3>{body}</div>'


# ---------------------------------------------------------------- answers
def _pretty_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return text


def tool_calls_html(calls: Sequence[ToolCall]) -> str:
    """The tool calls of a reply: name, arguments (JSON, indented), status and the result sent back."""
    if not calls:
        return ""
    items = "".join(
        f'<div class="d3r-tool"><b>🛠 {esc(c.name)}</b> <span class="d3r-tag">{esc(c.status)}</span>'
        f"<pre>{esc(_pretty_json(c.arguments))}</pre>"
        + (f"<div>↩ result</div><pre>{esc(_pretty_json(c.result))}</pre>" if c.result else "")
        + "</div>"
        for c in calls
    )
    return f'<div class="d3r-tools">{items}</div>'


def _seconds(value: float | None) -> str:
    return f"{value:.2f} s" if value is not None else "—"


def stats_html(stats: TurnStats | None, finish_reason: str | None = None) -> str:
    """A reply's figures: TTFT, tokens/s, output tokens, prompt tokens by modality, how it finished."""
    parts: list[str] = []
    if stats is not None:
        parts.append(f"TTFT {_seconds(stats.ttft_s)}")
        parts.append(f"{stats.tokens_per_s:.1f} tok/s" if stats.tokens_per_s else "tok/s —")
        parts.append(f"output {stats.output_tokens:,} tok")
        p = stats.prompt
        if p is not None:
            if p.by_modality:
                by = [f"text {p.text:,}", f"image {p.image:,}", f"audio {p.audio:,}", f"video {p.video:,}"]
                if p.video:
                    by.append(f"video frames {p.video_frames:,}, video sound {p.video_audio:,}")
                split = " · ".join(by)
            else:
                split = "the server reports no split by modality"
            cached = f", {p.cached:,} cached" if p.cached else ""
            parts.append(f"prompt {p.total:,} ({split}{cached})")
        if stats.source:
            parts.append(f"from the {stats.source}")
    parts.append(f"finish {finish_words(finish_reason, stats)}" if finish_reason else "finish — (stopped or failed)")
    return f'<div class="d3r-figures">{esc(" · ".join(parts))}</div>'


def rating_html(verdict: Verdict | None, note: str = "") -> str:
    """👍/👎 and the researcher's note ("" when neither was given)."""
    if verdict is None and not note:
        return ""
    shown = VERDICT_SHOWN.get(verdict or "", "")
    cls = "d3r-ok" if verdict == "up" else "d3r-bad" if verdict == "down" else ""
    mark = f'<span class="{cls}">{esc(shown)}</span> ' if shown else ""
    text = f'<span class="d3r-note">{esc(note)}</span>' if note else ""
    return f'<div class="d3r-rating">rating: {mark}{text}</div>'


def answer_html(answer: Answer, *, title: str = "", verdict: Verdict | None = None, note: str = "",
                ran_with: Sequence[tuple[str, object]] = (), ran_with_note: str = "") -> str:
    """One reply: its reasoning folded in ``<details>``, its text, tool calls, figures, error and rating, and
    ``ran_with``: the rows of the settings it ran with (``ran_with_note``: a line saying why there are none)."""
    parts = [f"<h3>{esc(title)}</h3>" if title else ""]
    if answer.reasoning:
        parts.append(f"<details><summary>reasoning ({len(answer.reasoning):,} characters)</summary>"
                     f"{text_html(answer.reasoning)}</details>")
    if answer.text:
        parts.append(text_html(answer.text))
    parts.append(tool_calls_html(answer.tool_calls))
    if answer.error:
        parts.append(f'<div class="d3r-error">⚠ {esc(answer.error)}</div>')
    parts.append(stats_html(answer.stats, answer.finish_reason))
    parts.append(prompt_view_html(answer.stats.prompt_view if answer.stats else None))
    if ran_with:
        parts.append(f'<details class="d3r-ran-with" open><summary>ran with</summary>{facts_html(ran_with)}</details>')
    elif ran_with_note:
        parts.append(f'<div class="d3r-note">ran with: {esc(ran_with_note)}</div>')
    parts.append(rating_html(verdict, note))
    return f'<div class="d3r-answer">{"".join(parts)}</div>'
