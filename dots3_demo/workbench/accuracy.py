"""Accuracy with its uncertainty, overall and per breakdown, from scored results (no Gradio).

The mean score of the items scored, its standard error and a 95 % interval (mean ± 1.96 SE, the normal
interval lmms-eval 0.6 reports, clipped to [0, 1]). Unclustered, SE² = s² / n (s² the sample variance,
n − 1 in its denominator). Clustered by a key (several questions on one video are not independent), SE is
Miller's (2024, "Adding Error Bars to Evals", arXiv 2411.00640, eq. 4), as lmms-eval computes it:

    SE² = s² / n + (1 / n²) · Σ_c Σ_i Σ_{j≠i} (x_ic − x̄)(x_jc − x̄)

An item without a cluster value is a cluster of its own. A breakdown groups the items by a tag (``tag``: each
item counted under every tag it has), a metadata field of the set (``duration``, ``task_type``, …) or the
modality of its media (``modality``); each group gets its own estimate, clustered the same way.

:class:`Estimate` and :func:`estimate` are the shapes a paired comparison of two runs can reuse (the same
estimate over per-item differences).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile (scipy.stats.norm.ppf(0.975))


@dataclass(frozen=True)
class Estimate:
    """A mean score with its uncertainty. ``se``, ``low`` and ``high`` are None below two items; ``clusters``
    is the number of clusters when the estimate was clustered (None: each item independent)."""

    n: int
    mean: float
    se: float | None
    low: float | None
    high: float | None
    clusters: int | None = None

    def line(self, *, signed: bool = False) -> str:
        """``50.0% 95% CI [13.0%, 87.0%] (SE 0.189, n=8)``; ``signed``: a difference (``+25.0% … [-24.0%, +74.0%]``)."""
        pct = "+.1%" if signed else ".1%"
        interval = (f"[{self.low:{pct}}, {self.high:{pct}}]" if self.low is not None and self.high is not None
                    else "[—]")
        se = f"SE {self.se:.3f}" if self.se is not None else "SE —"
        clustered = f", {self.clusters} clusters" if self.clusters is not None else ""
        return f"{self.mean:{pct}} 95% CI {interval} ({se}, n={self.n}{clustered})"


@dataclass(frozen=True)
class Scored:
    """One scored item as the summary reads it: its value, its cluster (None: its own), its groups."""

    value: float
    cluster: str | None = None
    groups: tuple[tuple[str, str], ...] = ()  # (breakdown, group), e.g. ("duration", "short"), ("tag", "ocr")


@dataclass(frozen=True)
class Group:
    name: str
    estimate: Estimate


@dataclass(frozen=True)
class Breakdown:
    by: str  # "tag", "modality" or a metadata field
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class Accuracy:
    """The run's accuracy: overall, and per breakdown. ``cluster_key`` names what the intervals are clustered by
    (None: not clustered)."""

    overall: Estimate
    breakdowns: tuple[Breakdown, ...] = ()
    cluster_key: str | None = None


def estimate(values: Sequence[float], clusters: Sequence[str | None] | None = None,
             bounds: tuple[float, float] = (0.0, 1.0)) -> Estimate:
    """The mean of ``values`` with its standard error and 95 % interval (kept within ``bounds``: a score's [0, 1], a
    paired difference's [-1, 1]), clustered when ``clusters`` is given."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to estimate from")
    mean = math.fsum(values) / n
    if n < 2:
        return Estimate(n, mean, None, None, None, 1 if clusters is not None else None)
    variance = math.fsum((x - mean) ** 2 for x in values) / (n - 1)
    se2 = variance / n
    count = None
    if clusters is not None:
        sums: dict[object, list[float]] = defaultdict(list)
        for index, (x, key) in enumerate(zip(values, clusters, strict=True)):
            sums[key if key is not None else ("item", index)].append(x - mean)
        cross = math.fsum(math.fsum(d) ** 2 - math.fsum(e * e for e in d) for d in sums.values())
        se2 += cross / n**2
        count = len(sums)
    se = math.sqrt(max(se2, 0.0))
    return Estimate(n, mean, se, max(bounds[0], mean - Z95 * se), min(bounds[1], mean + Z95 * se), count)


def accuracy(items: Sequence[Scored], cluster_key: str | None = None) -> Accuracy | None:
    """Overall and per-breakdown estimates of ``items`` (None when nothing was scored)."""
    if not items:
        return None
    clustered = cluster_key is not None

    def of(chosen: Sequence[Scored]) -> Estimate:
        return estimate([s.value for s in chosen], [s.cluster for s in chosen] if clustered else None)

    grouped: dict[str, dict[str, list[Scored]]] = defaultdict(lambda: defaultdict(list))
    for item in items:
        for by, name in dict.fromkeys(item.groups):
            grouped[by][name].append(item)
    order = sorted(grouped, key=lambda by: (by != "modality", by != "tag", by))
    breakdowns = tuple(Breakdown(by, tuple(Group(name, of(chosen)) for name, chosen in sorted(grouped[by].items())))
                       for by in order)
    return Accuracy(of(items), breakdowns, cluster_key)


def plot_png(breakdown: Breakdown, overall: Estimate) -> bytes:
    """A bar per group with its 95 % interval, and the overall accuracy as a line (matplotlib, Agg, PNG)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [g.name for g in breakdown.groups]
    means = [g.estimate.mean for g in breakdown.groups]
    below = [g.estimate.mean - g.estimate.low if g.estimate.low is not None else 0.0 for g in breakdown.groups]
    above = [g.estimate.high - g.estimate.mean if g.estimate.high is not None else 0.0 for g in breakdown.groups]
    figure = Figure(figsize=(max(4.0, 0.9 * len(names) + 1.5), 3.0), dpi=90, facecolor="white")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.bar(range(len(names)), means, yerr=[below, above], capsize=4, color="#4c78a8")
    axes.axhline(overall.mean, color="#888888", linestyle="--", linewidth=1, label=f"overall {overall.mean:.1%}")
    axes.set_xticks(range(len(names)), [f"{n}\n(n={g.estimate.n})" for n, g in zip(names, breakdown.groups,
                                                                                     strict=True)], fontsize=8)
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("accuracy")
    axes.set_title(f"accuracy by {breakdown.by} (95% interval)", fontsize=10)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", transparent=False, facecolor="white")  # opaque whatever rcParams say
    return out.getvalue()
