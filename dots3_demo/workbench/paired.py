"""Two runs of one set, paired item by item (issue 22 §3, no Gradio): did B help over A?

Items pair by key (the id, as ``results.jsonl`` keys them) where both runs scored them. Each pair is *fixed*
(B scored higher), *broken* (B lower) or *same*. The accuracy difference B − A is the mean of the per-item
differences, with the standard error of that mean and a 95 % interval (``accuracy.estimate`` over the
differences, clustered by the set's cluster key when the runs name one: several questions on one video move
together). For pass/fail scores, McNemar's exact test gives the p-value: under "no difference" a discordant pair
is fixed or broken with probability ½, so the p-value is the two-sided binomial test of the fixed count among the
discordant pairs (``scipy.stats.binomtest``). Scores between 0 and 1 (a judge, a number's partial credit) make
the pairs not binary: the test is then left out and the paired interval is the answer.

The cost side: the inspector's media tokens per item (the plans) and the engine's prompt tokens (what it
counted), each run's mean and the difference over the paired items. ``comparison.html`` sets every changed item's
two runs side by side, with the frames each gave the model drawn again (the inspector is deterministic: the file
under the run's budget gives the run's frames, checked against its plan's timestamps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dots3_demo.budget import VideoSettings
from dots3_demo.inspection.plan import plan_file
from dots3_demo.profiles import Profile
from dots3_demo.workbench import report_html as rh
from dots3_demo.workbench.accuracy import Estimate, estimate
from dots3_demo.workbench.eval_results import EvalResult, plan_tokens
from dots3_demo.workbench.report_html import Thumbnail, report_thumbnails

Change = Literal["fixed", "broken", "same"]


@dataclass(frozen=True)
class Pair:
    """One item scored in both runs: each run's result, the change from A to B."""

    key: str
    a: EvalResult
    b: EvalResult

    @property
    def a_value(self) -> float:
        return self.a.score.value if self.a.score is not None else 0.0

    @property
    def b_value(self) -> float:
        return self.b.score.value if self.b.score is not None else 0.0

    @property
    def change(self) -> Change:
        if self.b_value > self.a_value:
            return "fixed"
        return "broken" if self.b_value < self.a_value else "same"


@dataclass(frozen=True)
class Cost:
    """Mean tokens per paired item in A and in B (None: no item reported them), and B − A."""

    a: float | None
    b: float | None

    @property
    def difference(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a


@dataclass(frozen=True)
class Paired:
    """The comparison: the pairs, what could not be paired, the accuracies, the difference and its test."""

    pairs: tuple[Pair, ...]
    only_a: tuple[str, ...]  # keys scored in A, not in B (missing, unscored or an error there)
    only_b: tuple[str, ...]
    accuracy_a: Estimate | None
    accuracy_b: Estimate | None
    difference: Estimate | None  # mean of B − A per item
    mcnemar_p: float | None  # None: a score between 0 and 1, or no pairs
    media_tokens: Cost
    prompt_tokens: Cost
    clustered: bool  # by the set's cluster key (the items carried its values)

    def count(self, change: Change) -> int:
        return sum(1 for p in self.pairs if p.change == change)

    def rows(self) -> list[tuple[str, str]]:
        """The comparison as (label, value) rows: what the command prints, and the page's summary."""
        if not self.pairs:
            return [("paired items", "none: no item was scored in both runs, nothing to compare")]
        rows = [("paired items", f"{len(self.pairs):,} (scored in both runs; {len(self.only_a):,} only in A, "
                                 f"{len(self.only_b):,} only in B)"),
                ("changes", f"fixed {self.count('fixed'):,} · broken {self.count('broken'):,} · "
                            f"same {self.count('same'):,}")]
        if self.accuracy_a is not None and self.accuracy_b is not None:
            rows += [("A", self.accuracy_a.line()), ("B", self.accuracy_b.line())]
        if self.difference is not None:
            rows.append(("B − A", self.difference.line(signed=True)))
        discordant = self.count("fixed") + self.count("broken")
        rows.append(("McNemar's exact test", f"p = {self.mcnemar_p:.4g} ({discordant:,} discordant pair(s))"
                     if self.mcnemar_p is not None else
                     "not applicable (a score between 0 and 1; the interval above is the answer)"))
        rows += [("media tokens (inspector) per item", cost_line(self.media_tokens)),
                 ("prompt tokens (engine) per item", cost_line(self.prompt_tokens))]
        return rows

    def lines(self) -> list[str]:
        """The comparison in words, as the command prints it."""
        return [f"{label}: {value}" for label, value in self.rows()]


def cost_line(cost: Cost) -> str:
    if cost.a is None or cost.b is None or cost.difference is None:
        return "not reported by both runs"
    return f"A {cost.a:,.1f} · B {cost.b:,.1f} · B − A {cost.difference:+,.1f}"


def _scored(results: Sequence[EvalResult]) -> dict[str, EvalResult]:
    return {r.key: r for r in results if r.id is not None and r.score is not None and r.error is None}


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _prompt_total(result: EvalResult) -> float | None:
    stats = result.answer.stats if result.answer is not None else None
    return float(stats.prompt.total) if stats is not None and stats.prompt is not None else None


def _cost(pairs: Sequence[Pair], of: Literal["media", "prompt"]) -> Cost:
    def side(results: Sequence[EvalResult]) -> float | None:
        if of == "media":
            return _mean([float(plan_tokens(r)) for r in results])
        values = [_prompt_total(r) for r in results]
        return None if any(v is None for v in values) else _mean([v for v in values if v is not None])

    return Cost(side([p.a for p in pairs]), side([p.b for p in pairs]))


def mcnemar_exact(fixed: int, broken: int) -> float:
    """McNemar's exact two-sided p-value: ``fixed`` among ``fixed + broken`` discordant pairs against ½."""
    if fixed + broken == 0:
        return 1.0
    from scipy.stats import binomtest  # type: ignore[import-untyped]

    return float(binomtest(fixed, fixed + broken, 0.5).pvalue)


def compare_runs(a: Sequence[EvalResult], b: Sequence[EvalResult]) -> Paired:
    """Run B against run A (each as ``ResultsFile.load`` reads it), paired by key in A's order; clustered when
    A's items carry the set's cluster values."""
    scored_a, scored_b = _scored(a), _scored(b)
    pairs = tuple(Pair(key, scored_a[key], scored_b[key]) for key in scored_a if key in scored_b)
    clustered = any(p.a.cluster is not None for p in pairs)
    clusters = [p.a.cluster for p in pairs] if clustered else None
    binary = all(v in (0.0, 1.0) for p in pairs for v in (p.a_value, p.b_value))
    fixed = sum(1 for p in pairs if p.change == "fixed")
    broken = sum(1 for p in pairs if p.change == "broken")
    return Paired(
        pairs=pairs,
        only_a=tuple(k for k in scored_a if k not in scored_b),
        only_b=tuple(k for k in scored_b if k not in scored_a),
        accuracy_a=estimate([p.a_value for p in pairs], clusters) if pairs else None,
        accuracy_b=estimate([p.b_value for p in pairs], clusters) if pairs else None,
        difference=estimate([p.b_value - p.a_value for p in pairs], clusters, bounds=(-1.0, 1.0)) if pairs else None,
        mcnemar_p=mcnemar_exact(fixed, broken) if pairs and binary else None,
        media_tokens=_cost(pairs, "media"),
        prompt_tokens=_cost(pairs, "prompt"),
        clustered=clustered,
    )


# ---------------------------------------------------------------- what the command writes
def comparison_json(paired: Paired, a: str, b: str) -> dict[str, object]:
    """``comparison.json``: the runs compared, the summary figures and every pair (key, change, both scores)."""

    def est(e: Estimate | None) -> dict[str, object] | None:
        return None if e is None else {"n": e.n, "mean": e.mean, "se": e.se, "low": e.low, "high": e.high,
                                       "clusters": e.clusters}

    return {
        "a": a, "b": b, "paired": len(paired.pairs), "only_a": list(paired.only_a), "only_b": list(paired.only_b),
        "fixed": paired.count("fixed"), "broken": paired.count("broken"), "same": paired.count("same"),
        "accuracy_a": est(paired.accuracy_a), "accuracy_b": est(paired.accuracy_b),
        "difference": est(paired.difference), "mcnemar_p": paired.mcnemar_p, "clustered": paired.clustered,
        "media_tokens": {"a": paired.media_tokens.a, "b": paired.media_tokens.b},
        "prompt_tokens": {"a": paired.prompt_tokens.a, "b": paired.prompt_tokens.b},
        "items": [{"key": p.key, "change": p.change, "a": p.a_value, "b": p.b_value} for p in paired.pairs],
    }


def budget_of(result: EvalResult) -> VideoSettings:
    """The video budget a result ran with (its ``budget``: the request's ``mm_processor_kwargs``)."""
    b = result.budget or {}
    defaults = VideoSettings()
    return VideoSettings(seq=int(b.get("seq", defaults.seq)), output_reserve=b.get("output_reserve"),
                         max_new_tokens=int(b.get("max_new_tokens", 0)),
                         audio_cap=float(b.get("audio_cap", defaults.audio_cap)),
                         k_mode=str(b.get("k_mode", defaults.k_mode)), question=str(b.get("video_question", "")))


def _timestamps(plan: Mapping[str, Any]) -> list[Any]:
    video = plan.get("video")
    frames = video.get("frames") if isinstance(video, dict) else None
    return [f.get("timestamp") for f in frames if isinstance(f, dict)] if isinstance(frames, list) else []


def draw_frames(result: EvalResult, profile: Profile) -> tuple[tuple[tuple[Thumbnail, ...], ...], tuple[str, ...]]:
    """What the model saw in ``result``, drawn again: each media file of its plan inspected under the budget it ran
    with (the inspector is deterministic), one tuple of thumbnails per file; and a note per file that could not be
    drawn as planned (not found here, or frames other than the run's: another file or profile)."""
    thumbs: list[tuple[Thumbnail, ...]] = []
    notes: list[str] = []
    for item in result.plan:
        path = item.get("file")
        if not isinstance(path, str) or "error" in item:
            thumbs.append(())
            continue
        planned = plan_file(path, profile, budget_of(result))
        if planned.report is None:
            thumbs.append(())
            notes.append(f"{path}: not drawn ({planned.item.get('error', 'not found here')})")
            continue
        if _timestamps(planned.item) != _timestamps(item):
            notes.append(f"{path}: the frames drawn here are not the ones the run planned (another file or "
                         f"profile: use the run's --model)")
        thumbs.append(report_thumbnails(planned.report, path.rsplit("/", 1)[-1]))
    return tuple(thumbs), tuple(notes)


def _side_html(result: EvalResult, label: str, profile: Profile | None) -> str:
    parts = [f"<h4>{rh.esc(label)}: score {result.score.value if result.score else 0.0:g}</h4>"]
    if result.budget:
        parts.append(f'<div class="d3r-note">budget: {rh.esc(", ".join(f"{k} {v}" for k, v in result.budget.items()))}'
                     "</div>")
    thumbs, notes = draw_frames(result, profile) if profile is not None else ((), ())
    parts += [rh.banner_html(note) for note in notes]
    parts += [rh.media_html(str(item.get("file", f"media {i + 1}")), item, thumbs[i] if i < len(thumbs) else ())
              for i, item in enumerate(result.plan)]
    if result.answer is not None:
        parts.append(rh.answer_html(result.answer, title="answer"))
    if result.score is not None:
        parts.append(f'<div class="d3r-note">{rh.esc(result.score.reason)}</div>')
    return f"<div>{''.join(parts)}</div>"


def comparison_html(paired: Paired, a: str, b: str, profile: Profile | None = None) -> str:
    """``comparison.html``: one page, no script: the summary, then every changed item with both runs' plans and
    answers side by side, with the frames each run gave the model drawn again (``profile``: the checkpoint's
    geometry; None: the plans' figures only)."""
    summary = rh.facts_html([("run A", a), ("run B", b), *paired.rows()])
    changed = [p for p in paired.pairs if p.change != "same"]
    items = "".join(
        f'<div class="d3r-turn" id="item-{rh.esc(p.key)}"><h3>{rh.esc(p.key)} '
        f'<span class="{"d3r-ok" if p.change == "fixed" else "d3r-bad"}">{p.change}</span></h3>'
        f'<div class="d3r-cols">{_side_html(p.a, "A", profile)}{_side_html(p.b, "B", profile)}</div></div>'
        for p in changed)
    body = rh.section_html("Summary", summary, anchor="summary")
    body += rh.section_html(f"Changed items ({len(changed):,})", items or "<p>none: every paired item scored the "
                            "same in both runs</p>", anchor="changed")
    return rh.page_html("Two runs paired", body, subtitle=f"{a} → {b} · Dots3 NOTE Studio")
