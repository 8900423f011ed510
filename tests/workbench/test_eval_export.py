"""``python app.py eval-export DIR --inspect LOG.eval``: a run folder (answered by the studio's ``InProcessEngine`` over
the scripted double of vLLM's ``AsyncLLM``, on generated media) written as inspect-ai's log and read back with
``inspect_ai.log.read_eval_log``: one sample per item with its prompt, the frames the model saw as image content
(the same pictures as the report's), its answer, score, tags and metadata; the model and engine from run.json; and
``inspect view``'s own server serving it. Without inspect-ai (its import made to fail in a child process) the
command says so in one line and exits 2."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log
from inspect_ai.model import ContentImage, ContentText

import app
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT
from dots3_demo.workbench.accuracy import estimate
from dots3_demo.workbench.inspect_log import INSPECT_MISSING
from support import media_factory, servers
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.workbench.test_eval_engine import TOOL_SCRIPT, WEATHER, prompt_of
from tests.workbench.test_eval_scores import run_set, write_set

REPLIES = {"colour": ["The answer is ", "(B)."], "shape": ["C"], "picture": ["It is ", "blue."],
           "clip": ["A"]}


def script(engine_input):
    prompt = prompt_of(engine_input)
    if "weather" in prompt:
        return TOOL_SCRIPT
    return next(reply for word, reply in REPLIES.items() if word in prompt)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, profile) -> Path:
    folder = tmp_path_factory.mktemp("eval-export")
    media_factory.make_image(folder / "photo.png", width=320, height=200)
    media_factory.make_video(folder / "clip.mp4", seconds=3, width=320, height=240, fps=10)
    set_path = write_set(folder / "set.jsonl", [
        {"set": {"score": "choice", "cluster": "video"}},
        {"id": "colour", "media": [], "prompt": "Which colour? A) red B) blue", "target": "B", "tags": ["mc"],
         "metadata": {"video": "v1", "duration": "short"}},
        {"id": "shape", "media": [], "prompt": "Which shape? A) round B) square", "target": "B", "tags": ["mc"],
         "metadata": {"video": "v1", "duration": "short"}},
        {"id": "picture", "media": ["photo.png"], "prompt": "What does the picture show?", "score": "contains",
         "expect": ["blue"], "tags": ["ocr"], "system": "Be brief."},
        {"id": "clip", "media": ["clip.mp4"], "prompt": "Which clip? A) bar B) dot", "target": "A",
         "metadata": {"video": "v2", "duration": "long"}},
        {"id": "weather", "media": [], "prompt": "What is the weather in Paris?", "tools": WEATHER,
         "score": "tool_call", "target": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "missing", "media": ["nowhere.png"], "prompt": "?"},
    ])
    engine = scripted_engine(ScriptedAsyncLLM(script))
    run_set(set_path, folder / "out", profile, engine)
    return folder / "out"


@pytest.fixture(scope="module")
def exported(run_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    log_path = tmp_path_factory.mktemp("logs") / "run.eval"
    out, err = io.StringIO(), io.StringIO()
    from contextlib import redirect_stderr, redirect_stdout

    with redirect_stdout(out), redirect_stderr(err):
        status = app.main(["eval-export", str(run_dir), "--inspect", str(log_path)])
    assert status == 0, err.getvalue()
    return log_path, out.getvalue(), read_eval_log(str(log_path), resolve_attachments=True)  # images inline again


def rows(run_dir: Path) -> dict[str, dict]:
    return {r["key"]: r for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}


def images(sample) -> list[str]:
    return [part.image for part in sample.input[-1].content if isinstance(part, ContentImage)]


def texts(sample) -> list[str]:
    return [part.text for part in sample.input[-1].content if isinstance(part, ContentText)]


def test_each_item_is_a_sample_with_its_turn_answer_score_and_metadata(run_dir, exported):
    log_path, said, log = exported
    results = rows(run_dir)
    assert sorted(s.id for s in log.samples) == sorted(results)  # one per row (inspect keeps them sorted by id)
    drawn = sum(len(images(s)) for s in log.samples)
    assert said.strip() == (f"eval-export: wrote {log_path}: 6 samples (5 scored, {drawn} images); open it with: "
                            f"inspect view --log-dir {log_path.parent}")
    samples = {s.id: s for s in log.samples}
    colour = samples["colour"]
    assert colour.input[0].role == "system" and colour.input[0].text == DEFAULT_SYSTEM_PROMPT
    assert texts(colour) == ["Which colour? A) red B) blue"] and images(colour) == []
    assert colour.output.completion == "The answer is (B)." and colour.output.stop_reason == "stop"
    assert colour.messages[-1].role == "assistant" and colour.messages[-1].text == "The answer is (B)."
    score = colour.scores["choice"]
    assert (score.value, score.answer, score.explanation) == (1.0, "B", results["colour"]["score"]["reason"])
    assert colour.target == ["B"]
    assert colour.metadata["tags"] == ["mc"] and colour.metadata["duration"] == "short"
    assert colour.metadata["video"] == "v1" and colour.metadata["cluster"] == "v1" and colour.metadata["line"] == 2
    usage = colour.model_usage["vllm/scripted"]
    assert usage.input_tokens == results["colour"]["prompt_tokens"]["total"] > 0
    assert usage.output_tokens == results["colour"]["output_tokens"] > 0
    wrong = samples["shape"].scores["choice"]
    assert (wrong.value, wrong.answer) == (0.0, "C")
    assert samples["picture"].input[0].text == "Be brief." and samples["picture"].metadata["tags"] == ["ocr"]
    assert samples["picture"].scores["contains"].value == 1.0
    call = samples["weather"].messages[-1].tool_calls[0]
    assert (call.function, call.arguments) == ("get_weather", {"city": "Paris"})
    assert samples["weather"].scores["tool_call"].answer == "get_weather"
    assert samples["weather"].output.stop_reason == "tool_calls"
    missing = samples["missing"]
    assert missing.error.message == results["missing"]["error"] and missing.scores is None
    assert missing.output.completion == ""


def test_the_frames_the_model_saw_are_image_content_as_the_report_draws_them(run_dir, exported):
    _, _, log = exported
    samples = {s.id: s for s in log.samples}
    report = (run_dir / "report.html").read_text()
    drawn = set(re.findall(r'<img src="(data:image/jpeg;base64,[^"]+)"', report))
    picture, clip = images(samples["picture"]), images(samples["clip"])
    assert len(picture) == 1 and picture[0] in drawn
    assert base64.b64decode(picture[0].split(",", 1)[1])[:3] == b"\xff\xd8\xff"  # a JPEG
    frames = rows(run_dir)["clip"]["plan"][0]["video"]["frames"]
    assert len(clip) == len(frames) > 1 and set(clip) <= drawn
    # each frame after its caption, the timestamp text vLLM puts before it; the prompt last
    assert texts(samples["clip"]) == [f["timestamp"] for f in frames] + ["Which clip? A) bar B) dot"]
    parts = samples["clip"].input[-1].content
    assert [p.type for p in parts[:4]] == ["text", "image", "text", "image"]


def test_the_results_model_and_engine_come_from_the_run(run_dir, exported):
    _, _, log = exported
    (run,) = json.loads((run_dir / "run.json").read_text())["runs"]
    assert log.status == "success" and log.eval.model == "vllm/scripted" and log.eval.run_id == run["run"]
    assert log.eval.task == "set" and log.eval.dataset.samples == 6
    assert log.eval.packages == {"vllm": run["engine"]["vllm_version"]}
    assert log.eval.model_args["kind"] == "inprocess" and log.eval.metadata["dots3_runs"] == [run]
    assert log.stats.started_at == run["started"]
    scores = {s.name: s for s in log.results.scores}
    assert set(scores) == {"choice", "contains", "tool_call"}
    results = rows(run_dir)
    choice = [results[k] for k in ("colour", "shape", "clip")]
    expected = estimate([r["score"]["value"] for r in choice], [r["cluster"] for r in choice])  # clustered by video
    assert scores["choice"].metrics["accuracy"].value == pytest.approx(expected.mean)
    assert scores["choice"].metrics["stderr"].value == pytest.approx(expected.se)
    assert scores["choice"].scored_samples == 3
    assert log.results.total_samples == 6 and log.results.completed_samples == 5


def test_inspect_view_serves_the_log(exported):
    """``inspect view`` (inspect-ai's own viewer) lists the log in its folder and serves its samples."""
    log_path, _, _ = exported
    inspect = Path(sys.executable).parent / "inspect"
    port = servers.free_port()
    with servers.launch([str(inspect), "view", "--log-dir", str(log_path.parent), "--host", "127.0.0.1", "--port",
                         str(port)], f"http://127.0.0.1:{port}", log_path.parent / "view.log") as viewer:
        listed = viewer.wait_until(lambda: servers.get_json(f"{viewer.url}/api/log-files")[1], "inspect view", 120)
        assert [Path(f["name"]).name for f in listed["files"]] == ["run.eval"], listed
        name = urllib.parse.quote(listed["files"][0]["name"], safe="")
        with urllib.request.urlopen(f"{viewer.url}/api/logs/{name}", timeout=30) as answer:  # loopback
            served = json.load(answer)
    assert served["eval"]["model"] == "vllm/scripted" and served["status"] == "success"
    assert sorted(s["id"] for s in served["samples"]) == ["clip", "colour", "missing", "picture", "shape", "weather"]


def test_without_inspect_ai_the_command_says_so_in_one_line(run_dir, tmp_path):
    """inspect-ai's import made to fail in a child process (``sys.modules`` entry None), as where it is not
    installed: one line, exit 2, nothing written."""
    code = ("import sys, runpy; sys.modules['inspect_ai'] = None; "
            f"sys.argv = ['app.py', 'eval-export', {str(run_dir)!r}, '--inspect', {str(tmp_path / 'x.eval')!r}]; "
            "runpy.run_path('app.py', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], cwd=servers.ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"})
    assert done.returncode == 2 and done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if not line.startswith("W")]  # torch's CUDA warning aside
    assert lines == [f"eval-export: {INSPECT_MISSING}"], done.stderr
    assert not (tmp_path / "x.eval").exists()


def test_a_folder_without_results_and_a_wrong_log_name_are_clear_errors(run_dir, tmp_path, capsys):
    assert app.main(["eval-export", str(tmp_path), "--inspect", str(tmp_path / "x.eval")]) == 2
    assert capsys.readouterr().err.strip() == (f"eval-export: {tmp_path / 'results.jsonl'} is not a file (give an "
                                               "`app.py eval` --out folder)")
    assert app.main(["eval-export", str(run_dir), "--inspect", str(tmp_path / "x.zip")]) == 2
    assert capsys.readouterr().err.strip() == f"eval-export: {tmp_path / 'x.zip'} must end in .eval (inspect's own " \
                                              "format) or .json"
    assert not (tmp_path / "x.zip").exists()
