"""``DIR/report.html`` of a batch evaluation: one self-contained page (no script, opens offline).

At the top the summary (items, passed, failed, errors, median TTFT and tokens/s) and, in preview mode, a
banner saying no model answered; then an overview table; then a row per item: the frames the model saw
with their timestamps (or the image), each media file's token plan, the answer with its folded reasoning,
tool calls and figures, the checks and the error. Every block is ``workbench.report_html``'s (escaped text,
``data:`` thumbnails, the no-script Content-Security-Policy).
"""

from __future__ import annotations

from dots3_demo.workbench import report_html as rh
from dots3_demo.workbench.batch import PREVIEW_NOTE, EvalResult, EvalRun, Row, plan_tokens


def _seconds(value: float | None) -> str:
    return f"{value:.3f} s" if value is not None else "—"


def _rate(value: float | None) -> str:
    return f"{value:.1f} tok/s" if value is not None else "—"


def status_of(result: EvalResult) -> str:
    """A word or two for an item: error, failed, passed, answered (no expect strings: counted as passed), or
    planned (preview)."""
    if result.error is not None:
        return "error"
    if result.answer is None:
        return "planned"
    if result.failed_checks:
        return "failed"
    return "passed" if result.checks else "answered (no checks)"


def summary_html(run: EvalRun) -> str:
    s = run.summary
    preview = s.preview
    rows: list[tuple[str, object]] = [
        ("set", str(run.settings.set_path)),
        ("engine", run.engine or "none (preview)"),
        ("profile", run.settings.profile.name),
        ("default video budget", f"seq {run.default_seq:,} (an item's own seq, output_reserve, max_new_tokens, "
                                 "audio_cap and k_mode win)"),
        ("items", f"{s.items:,}" + (f" ({s.not_run:,} not run: interrupted)" if s.not_run else "")),
        ("passed", "— (preview: nothing answered)" if preview
         else f"{s.passed:,} (every expect string found; an item without any counts as passed)"),
        ("failed", "— (preview: nothing answered)" if preview else f"{s.failed:,}"),
        ("errors", f"{s.errors:,}"),
        ("media tokens (inspector)", f"{s.media_tokens:,} over the items run"),
        ("median TTFT", _seconds(s.median_ttft_s)),
        ("median tokens/s", _rate(s.median_tokens_per_s)),
        ("results", str(run.results_path)),
    ]
    return rh.facts_html(rows)


def overview_html(rows: tuple[Row, ...]) -> str:
    table = []
    for row in rows:
        r = row.result
        stats = r.answer.stats if r.answer is not None else None
        prompt = stats.prompt.total if stats is not None and stats.prompt is not None else None
        checks = " ".join(("✓ " if c.found else "✗ " if c.found is False else "· ") + c.expect for c in r.checks)
        media = f"{plan_tokens(r):,}" if r.plan else "—"
        table.append((r.id or "—", r.line, status_of(r), media, "—" if prompt is None else f"{prompt:,}",
                      _seconds(stats.ttft_s if stats else None), _rate(stats.tokens_per_s if stats else None),
                      checks or "—"))
    header = ("id", "line", "status", "media tokens (inspector)", "prompt tokens (engine)", "TTFT", "tokens/s",
              "checks")
    return rh.table_html(header, table, numeric=(1, 3, 4, 5, 6))


def checks_html(result: EvalResult) -> str:
    if not result.checks:
        return ""
    rows = [(c.expect, "found" if c.found else "NOT found" if c.found is False else "not checked (no answer)")
            for c in result.checks]
    return rh.table_html(("expect (case-insensitive)", "in the answer"), rows)


def row_html(row: Row) -> str:
    r = row.result
    status = status_of(r)
    cls = {"passed": "d3r-ok", "answered (no checks)": "d3r-ok", "failed": "d3r-bad", "error": "d3r-bad"}.get(
        status, "d3r-note")
    head = (f'<h3>{rh.esc(r.id or "(no id)")} <span class="{cls}">{rh.esc(status)}</span> '
            f'<span class="d3r-note">line {r.line}{" · from an earlier run" if row.earlier else ""}</span></h3>')
    parts = [head]
    if row.prompt:
        parts.append(f'<div class="d3r-user">{rh.text_html(row.prompt)}</div>')
    for index, item in enumerate(r.plan):
        thumbs = row.thumbs[index] if index < len(row.thumbs) else ()
        parts.append(rh.media_html(str(item.get("file", f"media {index + 1}")), item, thumbs))
    parts.extend(rh.banner_html(f"how it was served: {notice}") for notice in r.notices)
    if r.answer is not None:
        parts.append(rh.answer_html(r.answer, title="answer"))
    parts.append(checks_html(r))
    if r.error is not None and (r.answer is None or r.answer.error != r.error):
        parts.append(f'<div class="d3r-error">⚠ {rh.esc(r.error)}</div>')
    return f'<div class="d3r-turn" id="item-{r.line}">{"".join(parts)}</div>'


def report_page(run: EvalRun) -> str:
    banners = []
    if run.summary.preview:
        banners.append(rh.banner_html(PREVIEW_NOTE))
    if run.interrupted:
        banners.append(rh.banner_html("interrupted (Ctrl-C): the items that finished are here; rerun the same "
                                      "command to run the rest"))
    body = "".join(banners) + rh.section_html("Summary", summary_html(run), anchor="summary")
    body += rh.section_html("Items", overview_html(run.rows), anchor="overview")
    body += rh.section_html("Each item", "".join(row_html(row) for row in run.rows), anchor="items")
    return rh.page_html("Batch evaluation", body, subtitle=f"{run.settings.set_path} · Dots3 NOTE Studio")
