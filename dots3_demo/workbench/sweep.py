"""A sweep (``python app.py eval SET.jsonl --out DIR --sweep NAME=V1,V2,...``): one set run under several values of one
budget or sampling setting, and the curve of accuracy against media tokens per item that the degrade solver trades.

Each value is an ordinary run (``workbench.batch.evaluate``) into ``DIR/NAME=VALUE/`` (results.jsonl, run.json,
report.html; a rerun skips the items done there), every item taking the value in place of its own setting
(``evalset.Forced``: the swept setting is the one that varies). The engine is started once for all values; the
inspector's plans are made once where they can be (``batch.PlanMemo``: a file planned again under the same budget,
an image or audio file under any). Then ``DIR/sweep.json`` and ``DIR/sweep.html``: per value the accuracy with its
95 % interval (``workbench.accuracy``, clustered by the set's key), the media tokens per item (the plans:
``eval_results.plan_tokens``), the frames per video, the engine's prompt tokens per item and the median TTFT,
overall and per modality, tag and metadata value. In preview (no engine) only the cost side: the plans.
"""

from __future__ import annotations

import base64
import json
import math
import os
import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dots3_demo.budget import K_MODES
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.workbench import codec
from dots3_demo.workbench import report_html as rh
from dots3_demo.workbench.accuracy import Accuracy, Estimate
from dots3_demo.workbench.batch import PlanMemo, Progress, evaluate
from dots3_demo.workbench.eval_results import (
    PREVIEW_NOTE,
    BatchSettings,
    EvalResult,
    EvalRun,
    plan_tokens,
    result_groups,
    run_accuracy,
)
from dots3_demo.workbench.evalset import Forced, forced_problem

SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"
SWEEP_FORMAT = 1
# what may be swept, and the type of its values: the video budget (an item's own keys) and vLLM sampling parameters
BUDGET_SETTINGS: tuple[tuple[str, type], ...] = (
    ("seq", int), ("output_reserve", int), ("max_new_tokens", int), ("audio_cap", float), ("k_mode", str))
SAMPLING_SETTINGS: tuple[tuple[str, type], ...] = (
    ("temperature", float), ("top_p", float), ("top_k", int), ("seed", int), ("repetition_penalty", float))
COMMAND_LINE_BUDGET = ("seq", "output_reserve", "audio_cap", "k_mode")  # also the run's default (BatchSettings)


class SweepProblem(ValueError):
    """A ``--sweep`` the command cannot run, in one line."""


def value_text(value: int | float | str) -> str:
    """A value as its folder and the report name it: ``4096``, ``0.5``, ``1`` (a float that is whole), ``eval_ek``."""
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


@dataclass(frozen=True)
class Sweep:
    """One setting and its values, in the order given."""

    name: str
    values: tuple[Forced, ...]

    @property
    def budget(self) -> bool:
        """A video-budget setting (the plans change with it), not a sampling one."""
        return self.name in dict(BUDGET_SETTINGS)

    def folder(self, forced: Forced) -> str:
        """The run folder of one value, under ``--out``: ``seq=4096``."""
        return f"{self.name}={value_text(forced.value)}"

    def settings_for(self, settings: BatchSettings, forced: Forced) -> BatchSettings:
        """The command line's settings for one value's run: its folder, the value forced on every item (and the
        run's default where the command line has the flag: --seq, --output-reserve, --audio-cap, --k-mode)."""
        own: dict[str, Any] = {self.name: forced.value} if self.name in COMMAND_LINE_BUDGET else {}
        return replace(settings, out_dir=settings.out_dir / self.folder(forced), forced=forced, **own)


def _known() -> str:
    return (f"budget: {', '.join(n for n, _ in BUDGET_SETTINGS)}; "
            f"sampling: {', '.join(n for n, _ in SAMPLING_SETTINGS)}")


def parse_sweep(text: str) -> Sweep:
    """``NAME=V1,V2,...`` as a sweep; each value is checked on its own (the budget's checks, vLLM's
    ``SamplingParams``). Raises :class:`SweepProblem`."""
    name, equals, given = text.partition("=")
    name = name.strip()
    if not equals or not name:
        raise SweepProblem(f"want NAME=V1,V2,... (e.g. seq=4096,8192,16384), got {text!r}")
    kinds = dict(BUDGET_SETTINGS + SAMPLING_SETTINGS)
    if name not in kinds:
        alias = "; max_tokens is max_new_tokens here" if name == "max_tokens" else ""
        raise SweepProblem(f"cannot sweep {name!r} (known: {_known()}{alias})")
    texts = [t.strip() for t in given.split(",")]
    if not given.strip() or any(not t for t in texts):
        raise SweepProblem(f"{name}: give the values separated by commas, none empty (e.g. {name}=1,2), got {given!r}")
    values: list[Forced] = []
    for raw in texts:
        forced = Forced(name, _value(name, kinds[name], raw))
        if any(value_text(v.value) == value_text(forced.value) for v in values):
            raise SweepProblem(f"{name}={raw} is given twice")
        problem = forced_problem(forced)
        if problem is not None:
            raise SweepProblem(f"{name}={raw}: {problem}")
        values.append(forced)
    return Sweep(name, tuple(values))


def _value(name: str, kind: type, raw: str) -> int | float | str:
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise SweepProblem(f"{name}={raw}: not a whole number") from None
    if kind is float:
        try:
            number = float(raw)
        except ValueError:
            raise SweepProblem(f"{name}={raw}: not a number") from None
        if not math.isfinite(number):
            raise SweepProblem(f"{name}={raw}: not a finite number")
        return number
    if raw not in K_MODES:
        raise SweepProblem(f"{name}={raw}: must be one of {', '.join(K_MODES)}")
    return raw


# ---------------------------------------------------------------- the report's rows
@dataclass(frozen=True)
class SweepGroup:
    """One group (a modality, a tag, a metadata field's value) at one value: its items that ran without error, their
    media tokens per item, and their accuracy (None: nothing scored, or preview)."""

    by: str
    name: str
    items: int
    media_tokens_per_item: float
    accuracy: Estimate | None = None


@dataclass(frozen=True)
class SweepRow:
    """One value of the sweep: its run folder and figures. The means are over the items that ran without error
    (``planned``); ``accuracy`` over those scored (None: nothing scored, or preview); ``frames_per_video`` over the
    videos planned, ``prompt_tokens_per_item`` over the answers whose prompt the engine counted (None: none)."""

    value: str
    folder: str
    items: int  # entries of the set
    ran: int  # with a result
    planned: int  # ran without error
    errors: int
    would_refuse: int  # preview: items a real engine would refuse
    scored: int
    unparsed: int
    media_tokens: int  # the plans' tokens over the items planned
    media_tokens_per_item: float | None
    frames_per_video: float | None
    prompt_tokens_per_item: float | None
    median_ttft_s: float | None
    accuracy: Estimate | None
    groups: tuple[SweepGroup, ...] = ()


@dataclass(frozen=True)
class SweepReport:
    """``sweep.json``: the setting swept, the set, whether it was a preview, the cluster key, a row per value."""

    name: str
    values: tuple[str, ...]
    set: str
    preview: bool
    cluster: str | None
    rows: tuple[SweepRow, ...]


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _frames(result: EvalResult) -> list[int]:
    """The frames of each video the result planned."""
    counts = []
    for item in result.plan:
        video = item.get("video") if item.get("kind") == "video" else None
        if isinstance(video, dict) and isinstance(video.get("frames"), list):
            counts.append(len(video["frames"]))
    return counts


def sweep_row(value: str, folder: str, results: Sequence[EvalResult], items: int,
              cluster_key: str | None = None) -> SweepRow:
    """One value's figures from its run's results (the set's rows, earlier runs' included)."""
    planned = [r for r in results if r.error is None]
    scored = [r for r in planned if r.score is not None]
    acc: Accuracy | None = run_accuracy(results, cluster_key)
    estimates = {(b.by, g.name): g.estimate for b in (acc.breakdowns if acc is not None else ()) for g in b.groups}
    members: dict[tuple[str, str], list[EvalResult]] = {}
    for result in planned:
        for key in dict.fromkeys(result_groups(result)):
            members.setdefault(key, []).append(result)
    order = sorted(members, key=lambda k: (k[0] != "modality", k[0] != "tag", k[0], k[1]))
    groups = tuple(SweepGroup(by, name, len(members[by, name]),
                              math.fsum(plan_tokens(r) for r in members[by, name]) / len(members[by, name]),
                              estimates.get((by, name))) for by, name in order)
    prompts = [r.answer.stats.prompt.total for r in planned
               if r.answer is not None and r.answer.stats is not None and r.answer.stats.prompt is not None]
    ttfts = [r.answer.stats.ttft_s for r in planned
             if r.answer is not None and r.answer.stats is not None and r.answer.stats.ttft_s is not None]
    media = [plan_tokens(r) for r in planned]
    return SweepRow(
        value=value, folder=folder, items=items, ran=len(results), planned=len(planned),
        errors=len(results) - len(planned), would_refuse=sum(1 for r in planned if r.would_refuse is not None),
        scored=len(scored), unparsed=sum(1 for r in scored if r.score is not None and r.score.unparsed),
        media_tokens=sum(media), media_tokens_per_item=_mean(media),
        frames_per_video=_mean([n for r in planned for n in _frames(r)]),
        prompt_tokens_per_item=_mean(prompts), median_ttft_s=statistics.median(ttfts) if ttfts else None,
        accuracy=acc.overall if acc is not None else None, groups=groups,
    )


def sweep_json(report: SweepReport) -> dict[str, Any]:
    """``sweep.json``'s object: ``format`` and the report's fields (an estimate: n, mean, se, low, high, clusters)."""
    return {"format": SWEEP_FORMAT, **codec.to_json(report)}


# ---------------------------------------------------------------- running it
@dataclass(frozen=True)
class SweepRun:
    """A finished sweep: each value's run (in the order given), the report, where it was written, and how many plans
    were made and reused."""

    runs: tuple[EvalRun, ...]
    report: SweepReport
    json_path: Path
    html_path: Path
    plans_made: int = 0
    plans_reused: int = 0

    @property
    def exit_status(self) -> int:
        """The worst of the runs' (2 an item error, 1 a score below 1, 0 all ran)."""
        return max((run.summary.exit_status for run in self.runs), default=0)


async def run_sweep(sweep: Sweep, settings: BatchSettings, engine: ChatEngine | None,
                    progress: Progress | None = None) -> SweepRun:
    """Each value's run into its folder, one after the other on one engine (started by the first, not shut down
    here), then ``sweep.json`` and ``sweep.html`` in ``settings.out_dir``. A cancellation (Ctrl-C) leaves the runs
    that finished and the interrupted one's results, and is raised again (no sweep report: a rerun completes it)."""
    progress = progress or Progress()
    memo = PlanMemo()
    runs: list[EvalRun] = []
    for forced in sweep.values:
        folder = sweep.folder(forced)
        progress.say(f"sweep {folder} ({len(runs) + 1} of {len(sweep.values)}) into {settings.out_dir / folder}")
        # each value's progress line counts its own items and errors
        runs.append(await evaluate(sweep.settings_for(settings, forced), engine, Progress(progress.out), memo))
        if sweep.budget:
            memo.forget_budgeted()
    cluster = _cluster(runs)
    rows = tuple(sweep_row(value_text(forced.value), sweep.folder(forced), [row.result for row in run.rows],
                           run.summary.items, cluster) for forced, run in zip(sweep.values, runs, strict=True))
    report = SweepReport(name=sweep.name, values=tuple(value_text(v.value) for v in sweep.values),
                         set=str(settings.set_path), preview=engine is None, cluster=cluster, rows=rows)
    json_path, html_path = write_sweep(report, settings.out_dir)
    return SweepRun(tuple(runs), report, json_path, html_path, plans_made=memo.made, plans_reused=memo.reused)


def _cluster(runs: Sequence[EvalRun]) -> str | None:
    """The set's cluster key (every run read the same set)."""
    record = runs[0].record if runs else None
    cluster = record.defaults.get("cluster") if record is not None else None
    return cluster if isinstance(cluster, str) else None


def write_sweep(report: SweepReport, out_dir: Path) -> tuple[Path, Path]:
    """``sweep.json`` and ``sweep.html`` in ``out_dir``, each written beside its name and renamed over it."""
    paths = (out_dir / SWEEP_JSON, out_dir / SWEEP_HTML)
    texts = (json.dumps(sweep_json(report), ensure_ascii=False, indent=1) + "\n", sweep_page(report))
    for path, text in zip(paths, texts, strict=True):
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
    return paths


# ---------------------------------------------------------------- the terminal's table
def _accuracy_cell(estimate: Estimate | None) -> str:
    if estimate is None:
        return "—"
    if estimate.low is None or estimate.high is None:
        return f"{estimate.mean:.1%} (n={estimate.n})"
    return f"{estimate.mean:.1%} [{estimate.low:.1%}, {estimate.high:.1%}] (n={estimate.n})"


def _number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def table_lines(report: SweepReport) -> list[str]:
    """A line per value: the value, items run, errors, accuracy with its 95 % interval, media tokens per item, frames
    per video (stdout's summary of a sweep)."""
    header = (report.name, "items", "errors", "accuracy [95% interval]", "media tokens/item", "frames/video")
    rows = [(r.value, f"{r.ran}/{r.items}", str(r.errors), _accuracy_cell(r.accuracy),
             _number(r.media_tokens_per_item), _number(r.frames_per_video)) for r in report.rows]
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join([first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))])

    return [line(header), *(line(r) for r in rows)]


# ---------------------------------------------------------------- sweep.html
def _curve_png(title: str, series: Sequence[tuple[str, Sequence[tuple[float, Estimate, str]]]]) -> bytes:
    """Accuracy (with its 95 % interval as bars) against media tokens per item: a line per series, each point a
    value of the sweep, labelled with it when there is one series (matplotlib, Agg, PNG)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 3.6), dpi=90, facecolor="white")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for label, points in series:
        xs = [x for x, _, _ in points]
        ys = [e.mean for _, e, _ in points]
        below = [e.mean - e.low if e.low is not None else 0.0 for _, e, _ in points]
        above = [e.high - e.mean if e.high is not None else 0.0 for _, e, _ in points]
        axes.errorbar(xs, ys, yerr=[below, above], marker="o", capsize=4, label=label)
        if len(series) == 1:
            for x, e, text in points:
                axes.annotate(text, (x, e.mean), textcoords="offset points", xytext=(6, 6), fontsize=8)
    axes.margins(x=0.12)
    axes.set_ylim(0, 1.05)
    axes.set_xlabel("media tokens per item (inspector)")
    axes.set_ylabel("accuracy")
    axes.set_title(title, fontsize=10)
    if len(series) > 1 or series[0][0] != "overall":
        axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", transparent=False, facecolor="white")  # opaque whatever rcParams say
    return out.getvalue()


def _cost_png(report: SweepReport) -> bytes:
    """Preview: a bar per value, its media tokens per item (matplotlib, Agg, PNG)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(max(4.0, 0.9 * len(report.rows) + 1.5), 3.0), dpi=90, facecolor="white")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    heights = [r.media_tokens_per_item or 0.0 for r in report.rows]
    axes.bar(range(len(report.rows)), heights, color="#4c78a8")
    axes.set_xticks(range(len(report.rows)), [r.value for r in report.rows], fontsize=8)
    axes.set_xlabel(report.name)
    axes.set_ylabel("media tokens per item")
    axes.set_title(f"media tokens per item by {report.name} (the plans)", fontsize=10)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", transparent=False, facecolor="white")  # opaque whatever rcParams say
    return out.getvalue()


def _img(png: bytes, alt: str) -> str:
    return (f'<img class="d3r-plot" alt="{rh.esc(alt)}" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">')


def _interval(estimate: Estimate | None) -> str:
    if estimate is None:
        return "—"
    if estimate.low is None or estimate.high is None:
        return "— (one item)"
    return f"{estimate.low:.1%} – {estimate.high:.1%}"


def _percent(estimate: Estimate | None) -> str:
    return "—" if estimate is None else f"{estimate.mean:.1%}"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} s"


def sweep_page(report: SweepReport) -> str:
    """``sweep.html``: one self-contained page (no script): the values' table, the curve (or, in preview, the cost
    per value) and a curve and table per breakdown."""
    banners = [rh.banner_html(f"{PREVIEW_NOTE}. The sweep gives the cost side alone: the media tokens and frames "
                              "each value plans, no accuracy.")] if report.preview else []
    how = (f"clustered by {report.cluster} (the set's cluster key)" if report.cluster
           else "each item independent (the set's header names no cluster key)")
    facts = rh.facts_html([
        ("set", report.set), ("setting swept", report.name), ("values", ", ".join(report.values)),
        ("each value", f"an ordinary run in its folder ({report.name}=VALUE/: results.jsonl, run.json, report.html); "
                       "every item takes the value in place of its own"),
        *((("intervals", f"95 %, mean ± 1.96 SE, {how}"),) if not report.preview else ()),
    ])
    if report.preview:
        header: tuple[str, ...] = (report.name, "run folder", "items", "errors", "would be refused",
                                   "media tokens/item", "frames/video")
        rows: list[tuple[object, ...]] = [
            (r.value, r.folder, f"{r.ran}/{r.items}", r.errors, r.would_refuse, _number(r.media_tokens_per_item),
             _number(r.frames_per_video)) for r in report.rows]
    else:
        header = (report.name, "run folder", "items", "errors", "accuracy", "95 % interval", "scored",
                  "media tokens/item", "frames/video", "prompt tokens/item (engine)", "median TTFT")
        rows = [(r.value, r.folder, f"{r.ran}/{r.items}", r.errors, _percent(r.accuracy), _interval(r.accuracy),
                 r.scored, _number(r.media_tokens_per_item), _number(r.frames_per_video),
                 _number(r.prompt_tokens_per_item), _seconds(r.median_ttft_s)) for r in report.rows]
    parts = [facts, rh.table_html(header, rows, numeric=(2, 3, 4, 5, 6) if report.preview
                                  else (2, 3, 4, 6, 7, 8, 9, 10))]
    if report.preview:
        parts.append(_img(_cost_png(report), f"media tokens per item by {report.name}"))
    else:
        points = [(r.media_tokens_per_item, r.accuracy, f"{report.name}={r.value}") for r in report.rows
                  if r.accuracy is not None and r.media_tokens_per_item is not None]
        if points:
            parts.append(_img(_curve_png(f"accuracy against media tokens per item, by {report.name} (95% interval)",
                                         [("overall", points)]), "accuracy against media tokens per item"))
        else:
            parts.append(rh.banner_html("no item was scored (no answers, or no item has a score or expect strings)"))
    body = "".join(banners) + rh.section_html(f"By {report.name}", "".join(parts), anchor="values")
    body += rh.section_html("Per modality, tag and metadata value", _breakdowns_html(report), anchor="breakdowns")
    return rh.page_html(f"Sweep of {report.name}", body, subtitle=f"{report.set} · Dots3 NOTE Studio")


def _breakdowns_html(report: SweepReport) -> str:
    """Per breakdown: a curve per group (engine runs) and a table of each group at each value."""
    keys = list(dict.fromkeys((g.by, g.name) for r in report.rows for g in r.groups))
    bys = list(dict.fromkeys(by for by, _ in keys))
    if not bys:
        return rh.banner_html("no item ran without an error")
    parts = []
    for by in bys:
        names = [name for b, name in keys if b == by]
        parts.append(f"<h3>by {rh.esc(by)}</h3>")
        series = []
        for name in names:
            points = [(g.media_tokens_per_item, g.accuracy, r.value) for r in report.rows for g in r.groups
                      if (g.by, g.name) == (by, name) and g.accuracy is not None]
            if points:
                series.append((name, points))
        if series:
            parts.append(_img(_curve_png(f"accuracy against media tokens per item, by {by} (95% interval)", series),
                              f"accuracy against media tokens per item by {by}"))
        cells = [(name, r.value, g) for name in names for r in report.rows for g in r.groups
                 if (g.by, g.name) == (by, name)]
        if report.preview:
            parts.append(rh.table_html((by, report.name, "items", "media tokens/item"),
                                       [(n, v, g.items, _number(g.media_tokens_per_item)) for n, v, g in cells],
                                       numeric=(2, 3)))
        else:
            parts.append(rh.table_html((by, report.name, "items", "accuracy", "95 % interval", "media tokens/item"),
                                       [(n, v, g.items, _percent(g.accuracy), _interval(g.accuracy),
                                         _number(g.media_tokens_per_item)) for n, v, g in cells], numeric=(2, 3, 5)))
    return "".join(parts)
