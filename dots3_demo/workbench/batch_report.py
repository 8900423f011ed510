"""``DIR/report.html`` of a batch evaluation: one self-contained page (no script, opens offline).

At the top the summary (items, passed, answered without checks, failed, errors, median TTFT and tokens/s,
the run's engine, vLLM version and duration, what a rerun kept and replaced) and, in preview mode, a
banner saying no model answered; then an overview table; then a row per item: the frames the model saw
with their timestamps (or the image), each media file's token plan, the answer with its folded reasoning,
tool calls and figures, the checks and the error. Every block is ``workbench.report_html``'s (escaped text,
``data:`` thumbnails, the no-script Content-Security-Policy).
"""

from __future__ import annotations

import base64

from dots3_demo.workbench import report_html as rh
from dots3_demo.workbench.accuracy import Accuracy, plot_png
from dots3_demo.workbench.eval_results import PREVIEW_NOTE, EvalResult, EvalRun, Row, plan_tokens, status_word


def _seconds(value: float | None) -> str:
    return f"{value:.3f} s" if value is not None else "—"


def _rate(value: float | None) -> str:
    return f"{value:.1f} tok/s" if value is not None else "—"


def summary_html(run: EvalRun) -> str:
    s = run.summary
    preview = s.preview
    record = run.record
    engine = record.engine if record is not None else None
    rows: list[tuple[str, object]] = [
        ("set", str(run.settings.set_path)),
        ("engine", run.engine or "none (preview)"),
    ]
    if engine is not None and engine.kind != "preview":
        rows.append(("model · vLLM", f"{engine.model or 'not reported'} · "
                                     f"{engine.vllm_version or 'version not reported'}"))
    if record is not None:
        rows.append(("run", f"{record.run}, started {record.started}, {record.duration_s:.1f} s "
                            "(settings in run.json)"))
    rows += [
        ("profile", run.settings.profile.name),
        ("default video budget", f"seq {run.default_seq:,} (an item's own seq, output_reserve, max_new_tokens, "
                                 "audio_cap and k_mode win)"),
        ("items", f"{s.items:,}" + (f" ({s.not_run:,} not run: interrupted)" if s.not_run else "")),
        ("passed", "— (preview: nothing answered)" if preview else f"{s.passed:,} (every expect string found)"),
        ("answered without checks", "— (preview: nothing answered)" if preview
         else f"{s.unchecked:,} (no expect strings: answered, not counted as passed)"),
        ("failed", "— (preview: nothing answered)" if preview else f"{s.failed:,}"),
        ("errors", f"{s.errors:,}"),
        ("accuracy", "— (preview: nothing answered)" if preview else accuracy_line(s.accuracy, s.scored, s.unparsed)),
        *((("would be refused", f"{s.would_refuse:,} (a real engine would refuse them: over the context or the "
                                "per-prompt media limits; see each item)"),) if preview else ()),
        ("media tokens (inspector)", f"{s.media_tokens:,} over the items run"),
        ("median TTFT", _seconds(s.median_ttft_s)),
        ("median tokens/s", _rate(s.median_tokens_per_s)),
        ("results", str(run.results_path)),
    ]
    if s.earlier:
        rows.append(("from earlier runs", f"{s.earlier:,} row(s)"))
    kept = [c for c in run.changes if c.kept]
    replaced = [c for c in run.changes if not c.kept]
    if kept:
        rows.append(("kept over this run's errors", "; ".join(f"{c.key} (line {c.line}): the earlier answer stays, "
                                                              f"this run's error: {c.error}" for c in kept)))
    if replaced:
        rows.append(("replaced", "; ".join(f"{c.key}: {c.before} → {c.after}" for c in replaced)))
    return rh.facts_html(rows)


def accuracy_line(acc: Accuracy | None, scored: int, unparsed: int) -> str:
    """The overall accuracy in one line (the report's summary and the terminal's)."""
    if acc is None:
        return "— (no item was scored: give items a score or expect strings)"
    clustered = f", clustered by {acc.cluster_key}" if acc.cluster_key else ""
    unread = f"; {unparsed} repl(ies) could not be read (counted wrong)" if unparsed else ""
    return f"{acc.overall.line()} over {scored} scored item(s){clustered}{unread}"


def _interval(low: float | None, high: float | None) -> str:
    return f"{low:.1%} – {high:.1%}" if low is not None and high is not None else "— (one item)"


def accuracy_html(acc: Accuracy | None) -> str:
    """A table and a plot (bars with 95 % intervals, a ``data:`` PNG) per breakdown."""
    if acc is None:
        return rh.banner_html("no item was scored (no answers, or no item has a score or expect strings)")
    how = (f"clustered by {acc.cluster_key} (the set's cluster key): items sharing it are not independent"
           if acc.cluster_key else "each item independent (the set's header names no cluster key)")
    parts = [rh.facts_html([("overall", acc.overall.line()), ("intervals", f"95 %, mean ± 1.96 SE, {how}")])]
    for breakdown in acc.breakdowns:
        rows = [(g.name, g.estimate.n, f"{g.estimate.mean:.1%}", _interval(g.estimate.low, g.estimate.high),
                 "—" if g.estimate.se is None else f"{g.estimate.se:.3f}",
                 "—" if g.estimate.clusters is None else g.estimate.clusters) for g in breakdown.groups]
        png = base64.b64encode(plot_png(breakdown, acc.overall)).decode("ascii")
        parts.append(f"<h3>by {rh.esc(breakdown.by)}</h3>")
        parts.append(f'<img class="d3r-plot" alt="{rh.esc("accuracy by " + breakdown.by)}" '
                     f'src="data:image/png;base64,{png}">')
        parts.append(rh.table_html((breakdown.by, "items", "accuracy", "95 % interval", "SE", "clusters"), rows,
                                   numeric=(1, 2, 4, 5)))
    return "".join(parts)


def overview_html(rows: tuple[Row, ...]) -> str:
    table = []
    for row in rows:
        r = row.result
        stats = r.answer.stats if r.answer is not None else None
        prompt = stats.prompt.total if stats is not None and stats.prompt is not None else None
        checks = " ".join(("✓ " if c.found else "✗ " if c.found is False else "· ") + c.expect for c in r.checks)
        media = f"{plan_tokens(r):,}" if r.plan else "—"
        table.append((r.key, r.line, status_word(r), ", ".join(r.tags) or "—", media,
                      "—" if prompt is None else f"{prompt:,}", _seconds(stats.ttft_s if stats else None),
                      _rate(stats.tokens_per_s if stats else None), checks or "—",
                      "—" if r.score is None else f"{r.score.value:g} ({r.score.scorer})"))
    header = ("id", "line", "status", "tags", "media tokens (inspector)", "prompt tokens (engine)", "TTFT",
              "tokens/s", "checks", "score")
    return rh.table_html(header, table, numeric=(1, 4, 5, 6, 7))


def score_html(result: EvalResult) -> str:
    """The item's score, its reason, and a judge's prompt and verdict."""
    score = result.score
    if score is None:
        return ""
    rows: list[tuple[str, object]] = [("score", f"{score.value:g} ({score.scorer})"), ("reason", score.reason)]
    if score.extracted is not None:
        rows.append(("read from the reply", score.extracted))
    if score.unparsed:
        rows.append(("unparsed", "the reply could not be read: counted wrong"))
    if result.metadata:
        rows.append(("metadata", ", ".join(f"{k}: {v}" for k, v in result.metadata)))
    if result.cluster is not None:
        rows.append(("cluster", result.cluster))
    html = rh.facts_html(rows)
    if score.judge is not None:
        j = score.judge
        html += (f"<details><summary>the judge ({rh.esc(j.model)} at {rh.esc(j.endpoint)}): "
                 f"{rh.esc(j.verdict)}</summary>{rh.text_html(j.prompt)}"
                 f"<div>its reply:</div>{rh.text_html(j.reply)}</details>")
    return html


def checks_html(result: EvalResult) -> str:
    if not result.checks:
        return ""
    unchecked = "not checked (an error)" if result.error is not None else "not checked (no answer)"
    rows = [(c.expect, "found" if c.found else "NOT found" if c.found is False else unchecked)
            for c in result.checks]
    return rh.table_html(("expect (case-insensitive)", "in the answer"), rows)


def row_html(row: Row) -> str:
    r = row.result
    status = status_word(r)
    cls = {"passed": "d3r-ok", "answered (no checks)": "d3r-ok", "failed": "d3r-bad", "error": "d3r-bad",
           "would be refused": "d3r-bad"}.get(status, "d3r-note")
    tags = f" · tags: {', '.join(r.tags)}" if r.tags else ""
    head = (f'<h3>{rh.esc(r.key)} <span class="{cls}">{rh.esc(status)}</span> '
            f'<span class="d3r-note">line {r.line}{" · from an earlier run" if row.earlier else ""}'
            f'{rh.esc(tags)}</span></h3>')
    parts = [head]
    if r.kept_over is not None:
        parts.append(rh.banner_html(f"this run gave an error for this id, and the earlier answer was kept (rerun "
                                    f"with --replace-answers to replace it): {r.kept_over}"))
    if row.prompt:
        parts.append(f'<div class="d3r-user">{rh.text_html(row.prompt)}</div>')
    for index, item in enumerate(r.plan):
        thumbs = row.thumbs[index] if index < len(row.thumbs) else ()
        parts.append(rh.media_html(str(item.get("file", f"media {index + 1}")), item, thumbs))
    if r.context is not None:
        parts.append(f'<div class="d3r-note">context: {rh.esc(r.context.message())}</div>')
    if r.would_refuse is not None:
        parts.append(f'<div class="d3r-error">⚠ a real engine would refuse this item: {rh.esc(r.would_refuse)}</div>')
    parts.extend(rh.banner_html(f"how it was served: {notice}") for notice in r.notices)
    if r.answer is not None:
        parts.append(rh.answer_html(r.answer, title="answer"))
    parts.append(checks_html(r))
    parts.append(score_html(r))
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
    if not run.summary.preview:
        body += rh.section_html("Accuracy", accuracy_html(run.summary.accuracy), anchor="accuracy")
    body += rh.section_html("Items", overview_html(run.rows), anchor="overview")
    body += rh.section_html("Each item", "".join(row_html(row) for row in run.rows), anchor="items")
    return rh.page_html("Batch evaluation", body, subtitle=f"{run.settings.set_path} · Dots3 NOTE Studio")
