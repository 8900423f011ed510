"""Accuracy with 95 % intervals (``workbench.accuracy``) against reference computations done here independently
(numpy's variance, a double loop over the pairs of a cluster, a hand figure), clustered and not, and per
breakdown."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dots3_demo.workbench.accuracy import Z95, Scored, accuracy, estimate, plot_png


def test_the_normal_quantile_is_scipys():
    assert Z95 == pytest.approx(stats.norm.ppf(0.975), abs=1e-12)


def test_unclustered_interval_against_numpy():
    rng = np.random.default_rng(7)
    values = rng.integers(0, 2, size=37).astype(float)
    e = estimate(list(values))
    se = np.std(values, ddof=1) / math.sqrt(len(values))
    assert (e.n, e.clusters) == (37, None)
    assert e.mean == pytest.approx(values.mean()) and e.se == pytest.approx(se)
    assert e.low == pytest.approx(max(0.0, values.mean() - stats.norm.ppf(0.975) * se))
    assert e.high == pytest.approx(min(1.0, values.mean() + stats.norm.ppf(0.975) * se))


def reference_clustered_se(values: list[float], clusters: list[str]) -> float:
    """Miller (2024) eq. 4 with its double sum over ordered pairs i ≠ j of each cluster, written out."""
    x = np.asarray(values)
    n, mean = len(x), x.mean()
    se2 = np.var(x, ddof=1) / n
    cross = 0.0
    for key in set(clusters):
        members = [i for i, c in enumerate(clusters) if c == key]
        cross += sum((x[i] - mean) * (x[j] - mean) for i, j in itertools.permutations(members, 2))
    return math.sqrt(se2 + cross / n**2)


def test_clustered_interval_against_a_hand_figure_and_the_pairwise_sum():
    # two videos, each with both answers right or both wrong: mean 0.5, s²/n = (1/3)/4, cross term 2·(2·0.25)/16
    e = estimate([1, 1, 0, 0], ["v1", "v1", "v2", "v2"])
    assert e.se == pytest.approx(math.sqrt(1 / 12 + 1 / 16)) and e.clusters == 2
    assert estimate([1, 1, 0, 0]).se == pytest.approx(math.sqrt(1 / 12))  # the naive one is smaller
    rng = np.random.default_rng(3)
    values = [float(v) for v in rng.integers(0, 2, size=40)]
    clusters = [f"v{int(k)}" for k in rng.integers(0, 9, size=40)]
    assert estimate(values, clusters).se == pytest.approx(reference_clustered_se(values, clusters))


def test_one_cluster_per_item_is_the_unclustered_interval_and_no_key_is_its_own_cluster():
    values = [1.0, 0.0, 1.0, 1.0, 0.0]
    assert estimate(values, ["a", "b", "c", "d", "e"]).se == pytest.approx(estimate(values).se)
    assert estimate(values, [None] * 5).se == pytest.approx(estimate(values).se)
    assert estimate(values, [None] * 5).clusters == 5
    single = estimate([1.0])
    assert (single.se, single.low, single.high) == (None, None, None)


def test_breakdowns_per_tag_field_and_modality_each_clustered():
    items = [Scored(1.0, "v1", (("modality", "video"), ("tag", "ocr"), ("duration", "short"))),
             Scored(1.0, "v1", (("modality", "video"), ("tag", "ocr"), ("tag", "count"), ("duration", "short"))),
             Scored(0.0, "v2", (("modality", "video"), ("duration", "long"))),
             Scored(0.0, None, (("modality", "text"),)),
             Scored(1.0, None, (("modality", "text"), ("tag", "count")))]
    acc = accuracy(items, "video")
    assert acc is not None and acc.overall.n == 5 and acc.overall.mean == pytest.approx(0.6)
    assert acc.overall.se == pytest.approx(reference_clustered_se([1, 1, 0, 0, 1], ["v1", "v1", "v2", "i4", "i5"]))
    by = {b.by: {g.name: g.estimate for g in b.groups} for b in acc.breakdowns}
    assert [b.by for b in acc.breakdowns] == ["modality", "tag", "duration"]
    assert by["modality"]["video"].mean == pytest.approx(2 / 3) and by["modality"]["text"].n == 2
    assert by["tag"]["count"].n == 2 and by["tag"]["ocr"].clusters == 1
    assert by["duration"]["short"].se == pytest.approx(0.0) and by["duration"]["long"].se is None
    unclustered = accuracy(items)
    assert unclustered is not None
    assert unclustered.overall.se == pytest.approx(np.std([1, 1, 0, 0, 1], ddof=1) / math.sqrt(5))
    assert accuracy([]) is None
    png = plot_png(acc.breakdowns[0], acc.overall)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
