"""Scores end to end: ``app.py eval`` over the studio's ``InProcessEngine`` with the scripted double of vLLM's
``AsyncLLM`` (the exact reply text matters here; its tool call is parsed by vLLM's ``DotsToolParser``), a judge
as an HTTP server in the test that records what it was asked, and a preview run: each item's score and reason
in ``results.jsonl`` and the report, the accuracy with its intervals (clustered by the set's key) in the report's
plots and in the terminal's summary."""

from __future__ import annotations

import asyncio
import io
import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dots3_demo.cli.eval import summary_lines
from dots3_demo.workbench.accuracy import estimate
from dots3_demo.workbench.batch import Progress, evaluate
from dots3_demo.workbench.eval_results import BatchSettings, EvalRun
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.workbench.htmlcheck import assert_inert
from tests.workbench.test_eval_engine import TOOL_SCRIPT, WEATHER, prompt_of

REPLIES = {
    "colour": ["The answer is ", "(B)."],
    "shape": ["A"],
    "size": ["I cannot tell from this."],
    "birds": ["There are 12 ", "birds."],
    "password": ["The password is Blue Falcon."],
    "summary": ["The man opens the door and leaves."],
}


def script(engine_input: dict[str, Any]) -> list[str]:
    prompt = prompt_of(engine_input)
    if "weather" in prompt:
        return TOOL_SCRIPT
    return next(reply for word, reply in REPLIES.items() if word in prompt)


class Judge:
    """An OpenAI-compatible chat endpoint that records each request and gives a fixed verdict."""

    def __init__(self, content: str) -> None:
        self.content = content
        self.requests: list[dict[str, Any]] = []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                judge.requests.append({"path": self.path, "body": json.loads(body)})
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": judge.content}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def judge() -> Iterator[Judge]:
    server = Judge('{"verdict": "correct"}')
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def write_set(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def scored_set(path: Path, judge_url: str) -> Path:
    rubric = "Correct when the answer says the man <leaves>."
    return write_set(path, [
        {"set": {"score": "choice", "cluster": "video"}},
        {"id": "colour", "media": [], "prompt": "Which colour? A) red B) blue", "target": "B", "tags": ["mc"],
         "metadata": {"video": "v1", "duration": "short"}},
        {"id": "shape", "media": [], "prompt": "Which shape? A) round B) square", "target": "B", "tags": ["mc"],
         "metadata": {"video": "v1", "duration": "short"}},
        {"id": "size", "media": [], "prompt": "Which size? A) big B) small C) tiny", "target": "C", "tags": ["mc"],
         "metadata": {"video": "v2", "duration": "long"}},
        {"id": "birds", "media": [], "prompt": "How many birds?", "score": {"kind": "number", "tolerance": 0.5},
         "target": 12, "metadata": {"video": "v2", "duration": "long"}},
        {"id": "password", "media": [], "prompt": "Which password?", "score": "regex", "target": r"Blue \w+"},
        {"id": "weather", "media": [], "prompt": "What is the weather in Paris?", "tools": WEATHER,
         "score": "tool_call", "target": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "old", "media": [], "prompt": "Which password again?", "expect": ["falcon"]},
        {"id": "summary", "media": [], "prompt": "Give a summary.", "target": "He leaves.",
         "score": {"kind": "judge", "endpoint": judge_url, "model": "grader", "rubric": rubric}},
    ])


def run_set(set_path: Path, out: Path, profile, engine) -> EvalRun:
    settings = BatchSettings(set_path=set_path, out_dir=out, profile=profile, seq=8192)
    return asyncio.run(evaluate(settings, engine, Progress(io.StringIO())))


def results(folder: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, (folder / "results.jsonl").read_text().splitlines())}


def test_every_scorer_end_to_end_with_a_clustered_accuracy_in_the_report_and_the_terminal(tmp_path, profile, judge):
    run = run_set(scored_set(tmp_path / "set.jsonl", judge.url), tmp_path / "out",
                  profile, scripted_engine(ScriptedAsyncLLM(script)))
    got = results(tmp_path / "out")
    values = {key: (r["score"]["value"], r["score"]["scorer"]) for key, r in got.items()}
    assert values == {"colour": (1.0, "choice"), "shape": (0.0, "choice"), "size": (0.0, "choice"),
                      "birds": (1.0, "number"), "password": (1.0, "regex"), "weather": (1.0, "tool_call"),
                      "old": (1.0, "contains"), "summary": (1.0, "judge")}
    assert all(r["format"] == 2 and r["score"]["reason"] for r in got.values())
    assert got["size"]["score"]["unparsed"] is True and got["colour"]["score"]["extracted"] == "B"
    assert got["colour"]["metadata"] == {"video": "v1", "duration": "short"} and got["colour"]["cluster"] == "v1"
    assert got["old"]["checks"] == [{"expect": "falcon", "found": True}]  # today's expect still checked

    # the judge was asked through the OpenAI chat API with a schema forcing the verdict; its prompt is kept
    (request,) = judge.requests
    assert request["path"] == "/v1/chat/completions" and request["body"]["model"] == "grader"
    schema = request["body"]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["verdict"]["enum"] == ["correct", "incorrect"]
    asked = request["body"]["messages"][-1]["content"]
    assert "man <leaves>" in asked and "He leaves." in asked and "The man opens the door and leaves." in asked
    kept = got["summary"]["score"]["judge"]
    assert json.loads(kept["prompt"]) == request["body"]["messages"] and kept["verdict"] == "correct"

    # accuracy: 6 of 8, clustered by video (items without one are their own cluster)
    order = ["colour", "shape", "size", "birds", "password", "weather", "old", "summary"]
    expected = estimate([values[k][0] for k in order], ["v1", "v1", "v2", "v2", None, None, None, None])
    s = run.summary
    assert s.accuracy is not None and s.accuracy.overall == expected and s.accuracy.cluster_key == "video"
    assert (s.passed, s.failed, s.scored, s.unparsed, s.exit_status) == (6, 2, 8, 1, 1)
    assert not math.isclose(expected.se or 0, estimate([values[k][0] for k in order]).se or 0)
    by = {b.by: {g.name: g.estimate.mean for g in b.groups} for b in s.accuracy.breakdowns}
    assert by["duration"] == {"long": 0.5, "short": 0.5} and by["tag"] == {"mc": pytest.approx(1 / 3)}
    assert by["modality"] == {"text": 0.75} and set(by["video"]) == {"v1", "v2"}
    overall = next(line for line in summary_lines(run) if line.startswith("eval: accuracy"))
    assert f"{expected.mean:.1%} 95% CI [{expected.low:.1%}, {expected.high:.1%}]" in overall
    assert "clustered by video" in overall and "1 repl(ies) could not be read" in overall

    page = assert_inert((tmp_path / "out" / "report.html").read_text())
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == len(s.accuracy.breakdowns) == 4
    assert "accuracy by duration" in html and "chose B, the answer is B" in html
    assert "man &lt;leaves&gt;" in html and "man <leaves>" not in html  # the judge's prompt, escaped
    assert page is not None


def test_a_judge_that_fails_is_the_items_error_and_a_rerun_asks_again(tmp_path, profile, judge):
    dead = write_set(tmp_path / "set.jsonl", [
        {"id": "summary", "media": [], "prompt": "Give a summary.",
         "score": {"kind": "judge", "endpoint": "http://127.0.0.1:9/v1", "model": "grader", "rubric": "r"}}])
    run = run_set(dead, tmp_path / "out", profile, scripted_engine(ScriptedAsyncLLM(script)))
    (result,) = results(tmp_path / "out").values()
    assert result["error"].startswith("judge: the judge at http://127.0.0.1:9/v1/chat/completions could not be")
    assert result["answer"] == "The man opens the door and leaves." and result["score"] is None
    assert run.summary.exit_status == 2
    judge.content = "maybe"
    live = write_set(tmp_path / "set.jsonl", [
        {"id": "summary", "media": [], "prompt": "Give a summary.",
         "score": {"kind": "judge", "endpoint": judge.url, "model": "grader", "rubric": "r"}}])
    run_set(live, tmp_path / "out", profile, scripted_engine(ScriptedAsyncLLM(script)))
    (result,) = results(tmp_path / "out").values()
    assert "the judge gave no verdict" in result["error"] and len(judge.requests) == 1


def test_a_preview_run_carries_scorers_fields_but_scores_nothing(tmp_path, profile):
    set_path = write_set(tmp_path / "set.jsonl", [
        {"set": {"score": "choice", "cluster": "video"}},
        {"id": "a", "media": [], "prompt": "Which? A) x B) y", "target": "A", "metadata": {"video": "v1"}}])
    run = run_set(set_path, tmp_path / "out", profile, None)
    (result,) = results(tmp_path / "out").values()
    assert result["score"] is None and result["cluster"] == "v1" and result["format"] == 2
    assert run.summary.accuracy is None and not any("accuracy" in line for line in summary_lines(run))
    html = (tmp_path / "out" / "report.html").read_text()
    assert_inert(html)
    assert "data:image/png" not in html
