"""``python app.py eval`` in preview mode (no engine) on generated media: the plans are the inspect command's
own output, a bad item is that item's error and the run goes on, the exit status, a rerun skips what is done,
the report, ``--help``, and the example set from the repository."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dots3_demo.cli.eval import build_parser, main_eval
from dots3_demo.cli.inspect import add_inspect_arguments, run_inspect
from dots3_demo.workbench.eval_results import PREVIEW_NOTE
from support import media_factory
from tests.workbench.htmlcheck import assert_inert, parse

REPO = Path(__file__).resolve().parents[2]
SEQ = 4096
MAX_TOKENS = 1024  # the default sampling max_tokens: the engine plans a video for it


def run_eval(*argv: str) -> tuple[int, str, str]:
    """``app.py eval`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main_eval(list(argv))
    return status, out.getvalue(), err.getvalue()


def results(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def write_set(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def set_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A set's folder: a clip with sound, an image, an audio file, a text file named like a video."""
    folder = tmp_path_factory.mktemp("eval-set")
    media_factory.make_video(folder / "clip.mp4", seconds=3, width=320, height=240, fps=10)
    (folder / "pictures").mkdir()
    media_factory.make_image(folder / "pictures" / "photo.png", width=320, height=200)
    media_factory.make_audio(folder / "tone.wav", seconds=1.5)
    (folder / "notes.mp4").write_text("this is not a video\n" * 20)
    return folder


ITEMS: list[object] = [
    {"id": "video", "media": ["clip.mp4"], "prompt": "What moves?", "expect": ["bar"]},
    {"id": "image+audio", "media": ["pictures/photo.png", "tone.wav"], "prompt": "Describe."},
    {"id": "missing", "media": ["nowhere.png"], "prompt": "?"},
    '{"id": "broken", "media": [',
    {"id": "unknown", "media": [], "prompt": "?", "temperature": 0},
    {"id": "mixed", "media": ["clip.mp4", "pictures/photo.png"], "prompt": "?"},
    {"id": "not-a-video", "media": ["notes.mp4"], "prompt": "?"},
    {"id": "video", "media": [], "prompt": "the same id again"},
    {"id": "text", "media": [], "prompt": "Only words.", "expect": ["words"]},
]


@pytest.fixture(scope="module")
def preview(set_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, str, Path]:
    out = tmp_path_factory.mktemp("eval-out") / "run"
    set_path = write_set(set_folder / "set.jsonl", ITEMS)
    status, stdout, stderr = run_eval(str(set_path), "--out", str(out), "--seq", str(SEQ))
    return status, stdout, stderr, out


def test_each_plan_is_what_the_inspect_command_prints(preview, set_folder):
    _, _, _, out = preview
    rows = {r["id"]: r for r in results(out) if r["line"] in (1, 2, 3, 7)}  # the items whose media were planned
    files = [set_folder / "clip.mp4", set_folder / "pictures" / "photo.png", set_folder / "tone.wav",
             set_folder / "nowhere.png", set_folder / "notes.mp4"]
    command = [sys.executable, "app.py", "inspect", *map(str, files), "--json", "--seq", str(SEQ),
               "--max-new-tokens", str(MAX_TOKENS)]
    printed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert printed.returncode == 2, printed.stderr[-2000:]  # two files cannot be inspected
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    assert len(lines) == 5
    assert rows["video"]["plan"] == lines[0:1]
    assert rows["image+audio"]["plan"] == lines[1:3]
    assert rows["missing"]["plan"] == lines[3:4] and "error" in lines[3]
    assert rows["not-a-video"]["plan"] == lines[4:5] and "error" in lines[4]
    assert lines[0]["video"]["budget"]["seq"] == SEQ and lines[0]["video"]["frames"]


def test_a_bad_item_is_its_own_one_line_error_and_the_run_goes_on(preview):
    status, _, stderr, out = preview
    assert status == 2
    rows = results(out)
    assert [r["line"] for r in rows] == list(range(1, len(ITEMS) + 1))  # one per line, in the set's order
    errors = {r["line"]: r["error"] for r in rows}
    assert errors[1] is None and errors[2] is None and errors[9] is None
    assert errors[3].startswith("nowhere.png: ")
    assert errors[4].startswith("not a JSON object") and rows[3]["id"] is None
    assert errors[5].startswith("unknown key(s) 'temperature'")
    assert "cannot mix a video with images or audio" in errors[6]
    assert errors[7].startswith("notes.mp4: ")
    assert errors[8] == "duplicate id 'video' (first on line 1)"
    assert all("\n" not in e for e in errors.values() if e)
    assert "9/9 items, 6 errors" in stderr


def test_progress_off_a_terminal_is_tqdms_meter_a_line_per_item(preview):
    """stderr is not a TTY here (a StringIO): one meter line at the start and one per item, each with what became
    of the item; the counts grow to the run's."""
    _, stdout, stderr, _ = preview
    meters = [line for line in stderr.splitlines() if line.startswith("eval: [")]
    assert len(meters) == 1 + len(ITEMS) and "\r" not in stderr and "eval: [" not in stdout
    assert meters[0] == "eval: [                        ] 0/9 items, 0 errors, 0 failed checks [00:00<?, ?item/s]"
    keys = {line.split(" — ", 1)[1].split(": ", 1)[0] for line in meters[1:]}
    assert keys == {"video", "image+audio", "missing", "line 4", "unknown", "mixed", "not-a-video", "line 8", "text"}
    assert [int(line.split("/9 items")[0].rsplit(" ", 1)[1]) for line in meters] == list(range(10))
    assert meters[-1].startswith("eval: [########################] 9/9 items, 6 errors, 0 failed checks [")
    assert any(line.endswith(" — line 8: error: duplicate id 'video' (first on line 1)") for line in meters)


def test_progress_on_a_terminal_is_one_bar_drawn_again_in_place():
    """On a TTY tqdm draws one bar, rewritten in place (carriage returns, no line per item); a message said while it
    runs goes on a line of its own above it; the bar ends on its own line with the run's counts."""
    from dots3_demo.core.records import Answer
    from dots3_demo.workbench.batch import Progress
    from dots3_demo.workbench.eval_results import EvalResult, checks_for

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    progress = Progress(out)
    progress.say("engine: ready")
    progress.start(3)
    answer = Answer(text="the answer")
    progress.item(EvalResult(id="a", line=1, answer=answer, checks=checks_for(["answer"], answer)))
    progress.say("a message")
    progress.item(EvalResult(id="b", line=2, error="the engine failed"))
    progress.item(EvalResult(id="c", line=3, answer=answer, checks=checks_for(["nowhere"], answer)))
    progress.end_line()
    progress.say("done")
    text = out.getvalue()
    assert text.startswith("eval: engine: ready\n\r") and text.endswith("\neval: done\n")
    assert "\reval: a message\n" in text and " — " not in text  # no per-item lines on a terminal
    drawn = [part for part in text.split("\r") if part.startswith("eval: [")]
    assert len(drawn) >= 2 and drawn[-1].endswith("item/s]\neval: done\n")  # the bar's last state, then a newline
    assert drawn[-1].startswith("eval: [########################] 3/3 items, 1 errors, 1 failed checks [")


def test_preview_answers_nothing_and_says_so_once(preview):
    _, stdout, stderr, out = preview
    assert stderr.count(PREVIEW_NOTE) == 1
    assert (out / "report.html").read_text().count(PREVIEW_NOTE) == 1
    for row in results(out):
        assert row["answer"] is None and row["tool_calls"] is None and row["ttft_s"] is None
        assert row["prompt_tokens"] is None and row["finish_reason"] is None
        assert all(check["found"] is None for check in row["checks"])
    video = results(out)[0]
    assert video["checks"] == [{"expect": "bar", "found": None}]
    media_tokens = sum(r["plan"][0]["video"]["prompt_tokens"] if r["plan"][0]["kind"] == "video" else 0
                       for r in results(out) if r["plan"] and not r["error"])
    assert media_tokens > 0
    assert "9 of 9 items planned (preview: nothing answered), 6 with an error" in stdout


def test_the_report_shows_each_item_with_the_frames_the_model_saw(preview):
    _, _, _, out = preview
    document = (out / "report.html").read_text()
    page = assert_inert(document)
    rows = results(out)
    frames = rows[0]["plan"][0]["video"]["frames"]
    images = page.all("img")
    # the video's frames (with vLLM's timestamps as captions), the image (nothing for the audio), and both again
    # for the item vLLM refuses (a video with an image): planned, never sent
    stamps = [f["timestamp"] for f in frames]
    assert [i["alt"] for i in images] == stamps + ["pictures/photo.png"] + stamps + ["pictures/photo.png"]
    text = page.joined_text()
    for row in rows:
        assert f"line {row['line']}" in text
        if row["error"]:
            assert row["error"] in text
    assert "What moves?" in text and "Only words." in text


def test_a_set_without_errors_exits_0_in_preview(set_folder, tmp_path):
    set_path = write_set(tmp_path / "ok.jsonl", [
        {"id": "a", "media": [str(set_folder / "tone.wav")], "prompt": "?", "expect": ["tone"]},
        {"id": "b", "media": [], "prompt": "?"},
    ])
    status, stdout, _ = run_eval(str(set_path), "--out", str(tmp_path / "out"))
    assert status == 0, stdout
    assert [r["error"] for r in results(tmp_path / "out")] == [None, None]


def test_an_item_budget_is_the_plan_budget(set_folder, tmp_path):
    item = {"id": "small", "media": ["clip.mp4"], "prompt": "?", "seq": 2048, "audio_cap": 0, "k_mode": "whole",
            "max_new_tokens": 100}
    set_path = write_set(set_folder / "budget.jsonl", [item])
    status, _, _ = run_eval(str(set_path), "--out", str(tmp_path / "out"))
    assert status == 0
    (row,) = results(tmp_path / "out")
    parser = __import__("argparse").ArgumentParser()
    add_inspect_arguments(parser)
    printed = io.StringIO()
    run_inspect(parser.parse_args([str(set_folder / "clip.mp4"), "--json", "--seq", "2048", "--audio-cap", "0",
                                   "--k-mode", "whole", "--max-new-tokens", "100"]), out=printed)
    assert row["plan"] == [json.loads(printed.getvalue())]
    assert row["plan"][0]["video"]["audio_segments"] == []  # audio_cap 0: frames only


def test_a_rerun_skips_what_is_done_and_runs_what_failed(set_folder, tmp_path):
    out = tmp_path / "out"
    later = set_folder / "later.png"
    set_path = write_set(tmp_path / "set.jsonl", [
        {"id": "first", "media": [str(set_folder / "tone.wav")], "prompt": "?"},
        {"id": "later", "media": [str(later)], "prompt": "?"},
        {"id": "last", "media": [], "prompt": "?"},
    ])
    assert run_eval(str(set_path), "--out", str(out))[0] == 2  # later.png does not exist yet
    rows = results(out)
    assert rows[1]["error"] and rows[0]["error"] is None
    # what is done is never redone: a marker put into the first item's line survives the rerun
    rows[0]["plan"][0]["marker"] = "kept"
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    media_factory.make_image(later, width=64, height=64)
    status, _, stderr = run_eval(str(set_path), "--out", str(out))
    assert status == 0
    assert "2 of 3 items are done" in stderr and "1/1 items" in stderr
    again = results(out)
    assert [r["id"] for r in again] == ["first", "later", "last"]
    assert again[0]["plan"][0]["marker"] == "kept"
    assert again[1]["error"] is None and again[1]["plan"][0]["kind"] == "image"
    assert "from an earlier run" in (out / "report.html").read_text()


def test_a_line_cut_short_in_results_is_run_again(set_folder, tmp_path):
    out = tmp_path / "out"
    set_path = write_set(tmp_path / "set.jsonl", [{"id": "a", "media": [], "prompt": "?"},
                                                  {"id": "b", "media": [], "prompt": "?"}])
    assert run_eval(str(set_path), "--out", str(out))[0] == 0
    text = (out / "results.jsonl").read_text()
    (out / "results.jsonl").write_text(text[: len(text) - 40])  # a crash in the middle of the last line
    status, stdout, stderr = run_eval(str(set_path), "--out", str(out))
    assert status == 0 and "1 of 2 items are done" in stderr and "could not be read" in stdout
    assert [r["id"] for r in results(out)] == ["a", "b"]


def test_a_set_that_cannot_be_read_is_a_clear_error(tmp_path, capsys):
    assert main_eval([str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == f"eval: {tmp_path / 'none.jsonl'} is not a file"


def test_help_names_the_command_its_flags_and_the_engine_flags():
    text = build_parser(["--help"]).format_help()
    assert text.startswith("usage: app.py eval")
    for words in ("SET.jsonl", "--out DIR", "--seq", "--inspect-workers", "preview mode", "--endpoint",
                  "--max-concurrency N", "the name vllm bench serve uses", "16 for an endpoint",
                  "--max-num-seqs", "Exit status: 0 every item ran, 1 an item scored below 1 (an expect string was "
                  "not found), 2 an item had an error", "choice", "tool_call", "judge", "cluster"):
        assert words in " ".join(text.split()), words
    with pytest.raises(SystemExit) as exited, contextlib.redirect_stdout(io.StringIO()) as printed:
        main_eval(["--help"])
    assert exited.value.code == 0 and "--out DIR" in printed.getvalue()


def test_the_example_set_runs_in_preview_from_the_repository(tmp_path):
    set_path = REPO / "assets" / "eval" / "set.jsonl"
    items = [json.loads(line) for line in set_path.read_text().splitlines()]
    media = sorted({str((set_path.parent / m).resolve().relative_to(REPO)) for item in items for m in item["media"]})
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "assets/eval/set.jsonl", *media], cwd=REPO,
                             capture_output=True, text=True)
    assert tracked.returncode == 0, tracked.stderr  # a clean clone has every file it names
    kinds = {Path(m).suffix for m in media}
    assert {".mp4", ".png", ".wav"} <= kinds and any("tools" in i for i in items) and all("expect" in i for i in items)
    out = tmp_path / "x"
    done = subprocess.run([sys.executable, "app.py", "eval", "assets/eval/set.jsonl", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = results(out)
    assert [r["id"] for r in rows] == [i["id"] for i in items]
    assert all(r["error"] is None and r["answer"] is None for r in rows)
    assert PREVIEW_NOTE in done.stderr and "planned (preview: nothing answered)" in done.stdout
    assert parse((out / "report.html").read_text()).all("img")
    shutil.rmtree(out)
