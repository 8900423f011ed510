"""Two eval runs paired (issue 22 §3): fixed / broken / same per item, the paired difference with its interval,
McNemar's exact test, the token cost, and ``app.py eval-compare`` writing them from two results.jsonl files."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

import app
from dots3_demo.core.records import Answer
from dots3_demo.engine.protocol import PromptTokens, TurnStats
from dots3_demo.workbench.eval_results import RESULTS_NAME, EvalResult, ResultsFile
from dots3_demo.workbench.paired import compare_runs, comparison_html
from dots3_demo.workbench.scoring import Score

A_SCORES = [1, 1, 0, 0, 1, 0, 1, 0]
B_SCORES = [1, 0, 1, 1, 1, 1, 1, 0]  # item 2 broken; items 3, 4, 6 fixed


def _result(key: str, line: int, value: float | None, *, text: str = "", prompt: int = 100, video: int = 0,
            cluster: str | None = None, error: str | None = None) -> EvalResult:
    plan = ({"kind": "video", "file": "clip.mp4", "video": {"prompt_tokens": video}},) if video else ()
    answer = Answer(text=text or f"answer {key}", finish_reason="stop",
                    stats=TurnStats(prompt=PromptTokens(total=prompt, text=prompt - video, video=video)))
    score = None if value is None or error else Score(float(value), f"scored {value}", "contains")
    return EvalResult(id=key, line=line, plan=plan, answer=None if error else answer, error=error, score=score,
                      cluster=cluster)


def _runs():
    a = [_result(f"q{i}", i, v, video=200) for i, v in enumerate(A_SCORES, 1)]
    b = [_result(f"q{i}", i, v, video=150, prompt=80) for i, v in enumerate(B_SCORES, 1)]
    return a, b


def test_pairs_are_fixed_broken_or_same_with_the_paired_interval_and_mcnemar():
    a, b = _runs()
    paired = compare_runs(a, b)
    assert [p.change for p in paired.pairs] == ["same", "broken", "fixed", "fixed", "same", "fixed", "same", "same"]
    assert (paired.count("fixed"), paired.count("broken"), paired.count("same")) == (3, 1, 4)
    # by hand: 3 of 4 discordant pairs fixed; two-sided exact binomial P(X <= 1 or X >= 3 | n=4, p=1/2) = 10/16
    assert paired.mcnemar_p == pytest.approx(10 / 16)
    d = paired.difference
    # differences 0,-1,1,1,0,1,0,0: mean 1/4, sample variance 3.5/7 = 0.5, SE = sqrt(0.5/8) = 1/4
    assert (d.n, d.mean, d.se) == (8, pytest.approx(0.25), pytest.approx(0.25))
    z = 1.959963984540054  # the standard normal's 97.5 % quantile
    assert (d.low, d.high) == (pytest.approx(0.25 - z * 0.25), pytest.approx(0.25 + z * 0.25))
    assert paired.accuracy_a.mean == pytest.approx(0.5) and paired.accuracy_b.mean == pytest.approx(0.75)
    assert (paired.media_tokens.a, paired.media_tokens.b, paired.media_tokens.difference) == (200, 150, -50)
    assert (paired.prompt_tokens.a, paired.prompt_tokens.b) == (100, 80)


def test_only_items_scored_in_both_runs_pair():
    a, b = _runs()
    b[1] = _result("q2", 2, None, error="the engine failed")  # an error in B: not paired, counted as only in A
    b.append(_result("q9", 9, 1))  # a new item in B
    a[7] = _result("q8", 8, None)  # answered without a scorer in A
    paired = compare_runs(a, b)
    assert [p.key for p in paired.pairs] == ["q1", "q3", "q4", "q5", "q6", "q7"]
    assert paired.only_a == ("q2",) and paired.only_b == ("q8", "q9")


def test_clustered_items_move_together():
    a, b = _runs()
    clustered_a = [_result(r.key, r.line, r.score.value, video=200, cluster=f"v{r.line // 3}") for r in a]
    paired = compare_runs(clustered_a, b)
    plain = compare_runs(a, b)
    assert paired.clustered and paired.difference.clusters == 3 and not plain.clustered
    assert paired.difference.mean == plain.difference.mean and paired.difference.se != plain.difference.se


def test_partial_scores_have_no_mcnemar_test():
    a, b = _runs()
    b[0] = _result("q1", 1, 0.5)
    paired = compare_runs(a, b)
    assert paired.mcnemar_p is None and any("not applicable" in line for line in paired.lines())
    assert paired.pairs[0].change == "broken"


def _write(folder: Path, results) -> Path:
    folder.mkdir()
    ResultsFile(folder / RESULTS_NAME).rewrite(results)
    return folder


def test_the_command_prints_and_writes_the_comparison(tmp_path, capsys):
    a, b = _runs()
    b[2] = _result("q3", 3, 1, text="B says <b>door</b>", video=150, prompt=80)
    run_a, run_b = _write(tmp_path / "a", a), _write(tmp_path / "b", b)
    assert app.main(["eval-compare", str(run_a), str(run_b), "--out", str(tmp_path / "cmp")]) == 0
    printed = capsys.readouterr().out
    assert "fixed 3 · broken 1 · same 4" in printed and "p = 0.625" in printed and "B − A: +25.0%" in printed
    data = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert (data["fixed"], data["broken"], data["paired"]) == (3, 1, 8)
    assert math.isclose(data["difference"]["mean"], 0.25) and math.isclose(data["mcnemar_p"], 0.625)
    page = (tmp_path / "cmp" / "comparison.html").read_text()
    for key in ("q2", "q3", "q4", "q6"):  # the changed items, each with both answers
        assert f'id="item-{key}"' in page
    assert 'id="item-q1"' not in page  # the same: not repeated
    assert "B says &lt;b&gt;door&lt;/b&gt;" in page and "answer q3" in page and "<script" not in page


def test_a_folder_without_results_is_refused(tmp_path, capsys):
    assert app.main(["eval-compare", str(tmp_path), str(tmp_path)]) == 2
    assert "is not a file" in capsys.readouterr().err


def test_the_page_draws_the_frames_each_run_gave_the_model(tmp_path, profile):
    """Run A planned the example clip with seq 32,768, run B with seq 1,024 (fewer frames); the changed item
    shows each run's own frames, drawn again from the file under that run's budget, captioned with the planned
    timestamps."""
    from dots3_demo.budget import VideoSettings
    from dots3_demo.inspection.plan import plan_file

    clip = Path(__file__).resolve().parents[2] / "assets" / "examples" / "room_clip.mp4"
    sides = []
    for value, seq in ((0, 32768), (1, 1024)):
        budget = VideoSettings(seq=seq, max_new_tokens=64)
        plan = plan_file(clip, profile, budget).item
        result = replace(_result("q1", 1, value), plan=(plan,), budget=budget.mm_processor_kwargs())
        sides.append((result, [f["timestamp"] for f in plan["video"]["frames"]]))
    (a, frames_a), (b, frames_b) = sides
    assert len(frames_b) < len(frames_a)  # the two budgets gave the model different frames
    paired = compare_runs([a], [b])
    page = comparison_html(paired, "A", "B", profile)
    side_a, side_b = page.split('<div class="d3r-cols">', 1)[1].split("<h4>B: ", 1)
    for side, frames in ((side_a, frames_a), (side_b, frames_b)):
        assert side.count("<img ") == len(frames)
        assert all(f"<figcaption>{t}" in side for t in frames), frames
    assert "not the ones the run planned" not in page
