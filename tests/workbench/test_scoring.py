"""The scorers of ``app.py eval`` (``workbench.scoring``): each one's edge cases, the scorer read from a set line
and its header, and old results lines (format 1) scored from their checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dots3_demo.tools.calls import ToolCall
from dots3_demo.workbench.eval_results import EvalResult
from dots3_demo.workbench.evalset import EvalItem, SetDefaults, SetLineError, read_set_with_header
from dots3_demo.workbench.scoring import Scorer, ScorerProblem, choice_letter, parse_scorer, score_reply


def score(scorer: Scorer, text: str, calls: tuple[ToolCall, ...] = ()) -> tuple[float, str, bool, str | None]:
    s = score_reply(scorer, text, calls)
    assert 0.0 <= s.value <= 1.0 and s.reason
    return s.value, s.reason, s.unparsed, s.extracted


CHOICE_B = parse_scorer("choice", "B", ())


@pytest.mark.parametrize(("reply", "letter"), [
    ("The answer is (B).", "B"),
    ("b", "B"),
    ("(b)", "B"),
    ("B", "B"),
    ("Answer: B", "B"),
    ("The best answer is B. The man opens the door.", "B"),
    ("Because the car turns left, the answer is B", "B"),  # the B of "Because" is inside a word
    ("(A) and (C) both fit", "A"),  # two letters: the first, as the benchmarks' parsers take it
    ("Option A seems close, but the correct answer is B.", "B"),  # the letter after the answer prefix
])
def test_choice_reads_the_letter_as_the_benchmarks_parsers_do(reply, letter):
    assert choice_letter(reply)[0] == letter
    value, reason, unparsed, extracted = score(CHOICE_B, reply)
    assert extracted == letter and not unparsed and value == float(letter == "B")


def test_choice_with_two_letters_says_so_and_none_is_unparsed_and_wrong():
    value, reason, unparsed, _ = score(CHOICE_B, "Either A or B.")
    assert value == 0.0 and "first of A, B" in reason and not unparsed
    for reply in ("I cannot tell from the video.", "", "The answer is unclear"):
        value, reason, unparsed, extracted = score(CHOICE_B, reply)
        assert (value, unparsed, extracted) == (0.0, True, None) and "unparsed" in reason


def test_number_with_a_tolerance():
    near = parse_scorer({"kind": "number", "tolerance": 0.01}, 3.1416, ())
    assert score(near, "It is about 3.14 metres.")[0] == 1.0
    assert score(parse_scorer("number", 3.1416, ()), "It is about 3.14 metres.")[0] == 0.0  # tolerance 0
    assert score(parse_scorer("number", 1234, ()), "The answer is 1,234 people")[:1] == (1.0,)
    assert score(parse_scorer("number", -2.5, ()), "Answer: -2.5")[0] == 1.0
    assert score(parse_scorer("number", 12, ()), "In 2 minutes I counted; the answer is 12.")[3] == "12"
    value, _, unparsed, _ = score(near, "no idea")
    assert value == 0.0 and unparsed
    with pytest.raises(ScorerProblem, match="tolerance"):
        parse_scorer({"kind": "number", "tolerance": -1}, 3, ())
    with pytest.raises(ScorerProblem, match="numeric target"):
        parse_scorer("number", "three", ())


def test_regex_exact_and_contains():
    pattern = parse_scorer("regex", r"\bblue\s+falcon\b", ())
    assert score(pattern, "The password is blue  falcon.")[0] == 1.0
    assert score(pattern, "The password is Blue Falcon.")[0] == 0.0  # case counts unless ignore_case
    assert score(parse_scorer({"kind": "regex", "ignore_case": True}, r"blue falcon", ()), "Blue Falcon")[0] == 1.0
    with pytest.raises(ScorerProblem, match="pattern"):
        parse_scorer("regex", "(unclosed", ())
    exact = parse_scorer("exact", "Paris", ())
    assert score(exact, "  paris.\n")[0] == 1.0 and score(exact, "Paris, France")[0] == 0.0
    contains = parse_scorer(None, None, ("falcon", "BLUE"))
    assert contains.kind == "contains" and score(contains, "blue falcon")[0] == 1.0
    value, reason, _, _ = score(contains, "a falcon")
    assert value == 0.0 and "'BLUE'" in reason


def test_tool_call_name_and_arguments_in_any_order():
    scorer = parse_scorer("tool_call", {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}, ())
    same = ToolCall(id="c1", name="get_weather", arguments='{"unit": "C", "city": "Paris"}')
    assert score(scorer, "", (same,))[0] == 1.0
    other_value = ToolCall(id="c1", name="get_weather", arguments='{"unit": "F", "city": "Paris"}')
    value, reason, _, _ = score(scorer, "", (other_value,))
    assert value == 0.0 and '"unit": "F"' in reason
    assert score(scorer, "", (ToolCall(id="c", name="get_time", arguments="{}"), same))[0] == 1.0  # any call
    assert score(scorer, "", (ToolCall(id="c", name="get_weather", arguments="{not json"),))[0] == 0.0
    value, _, unparsed, _ = score(scorer, "It is sunny.")
    assert value == 0.0 and unparsed
    name_only = parse_scorer("tool_call", {"name": "get_weather"}, ())
    assert score(name_only, "", (other_value,))[0] == 1.0


@pytest.mark.parametrize(("given", "target", "problem"), [
    ("choice", "F", "one letter"),
    ("choice", None, "target string"),
    ("vote", "A", "kind must be one of"),
    ({"kind": "choice", "weight": 2}, "A", "unknown score key"),
    ("judge", None, "endpoint, model, rubric"),
    ("tool_call", {"arguments": {}}, "name"),
])
def test_a_scorer_that_cannot_be_used_says_why(given, target, problem):
    with pytest.raises(ScorerProblem, match=problem):
        parse_scorer(given, target, ())


def write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_the_sets_header_metadata_and_cluster(tmp_path):
    judge = {"kind": "judge", "endpoint": "http://127.0.0.1:9/v1", "model": "m", "rubric": "Is it right?"}
    path = write(tmp_path / "set.jsonl", [
        {"set": {"score": "choice", "cluster": "video"}},
        {"id": "a", "media": [], "prompt": "?", "target": "B", "metadata": {"video": "v1", "duration": "short"}},
        {"id": "b", "media": [], "prompt": "?", "target": "c", "metadata": {"video": "v1", "n": 3}},
        {"id": "c", "media": [], "prompt": "?", "expect": ["x"]},  # an old-style item: contains
        {"id": "d", "media": [], "prompt": "?", "score": "number", "target": 4},
        {"id": "e", "media": [], "prompt": "?", "score": judge},
        {"id": "f", "media": [], "prompt": "?", "target": "Z"},
        {"id": "g", "media": [], "prompt": "?", "target": "A", "metadata": {"video": ["v1"]}},
        {"set": {"score": "exact"}},
    ])
    header, entries = read_set_with_header(path, SetDefaults(seq=4096))
    assert header.cluster == "video"
    a, b, c, d, e, f, g, late = entries
    assert isinstance(a, EvalItem) and a.scorer == Scorer("choice", target=("B",))
    assert a.metadata == (("video", "v1"), ("duration", "short")) and a.cluster == "v1"
    assert isinstance(b, EvalItem) and b.scorer is not None and b.scorer.target == ("C",)
    assert b.metadata[1] == ("n", "3")
    assert isinstance(c, EvalItem) and c.scorer == Scorer("contains", target=("x",)) and c.cluster is None
    assert isinstance(d, EvalItem) and d.scorer is not None and d.scorer.number == 4.0
    assert isinstance(e, EvalItem) and e.scorer is not None and e.scorer.judge is not None
    assert isinstance(f, SetLineError) and "one letter" in f.error and f.id == "f"
    assert isinstance(g, SetLineError) and "metadata.video" in g.error
    assert isinstance(late, SetLineError) and "first line" in late.error


def test_a_bad_header_is_its_lines_error_and_the_items_still_run(tmp_path):
    path = write(tmp_path / "set.jsonl", [{"set": {"score": "vote", "cluster": "video"}},
                                          {"id": "a", "media": [], "prompt": "?"}])
    header, (bad, item) = read_set_with_header(path, SetDefaults(seq=4096))
    assert isinstance(bad, SetLineError) and "the set's header" in bad.error and "vote" in bad.error
    assert isinstance(item, EvalItem) and item.scorer is None and header.cluster is None


def test_a_format_1_results_line_is_scored_from_its_checks():
    old = {"key": "a", "id": "a", "line": 1, "plan": [], "answer": "blue falcon", "checks": [
        {"expect": "blue", "found": True}, {"expect": "red", "found": False}], "error": None}
    result = EvalResult.from_json(old)
    assert result.score is not None and result.score.value == 0.0 and "'red'" in result.score.reason
    assert result.passed is False
    again = EvalResult.from_json(result.to_json())
    assert again.to_json()["format"] == 2 and again.score == result.score
    planned = EvalResult.from_json({**old, "answer": None, "checks": [{"expect": "x", "found": None}]})
    assert planned.score is None and planned.passed is None
