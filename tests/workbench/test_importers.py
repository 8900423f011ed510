"""``python app.py eval-import``: made-up items in the Video-MME, MVBench and LongVideoBench formats (never the
data sets) become a set that ``workbench.evalset`` reads, ``app.py eval`` plans and the choice scorer scores; the
prompt and the letter are lmms-eval's (its ``lmms_eval/tasks/<benchmark>/utils.py``); bad items are skipped with
their reason, a missing video is counted, an unreadable file is refused."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

import app
from dots3_demo.workbench.evalset import EvalItem, SetDefaults, SetLineError, read_set_with_header
from dots3_demo.workbench.scoring import score_reply

CLIP = Path(__file__).resolve().parents[2] / "assets" / "examples" / "room_clip.mp4"

VIDEOMME_PROMPT = (
    "Select the best answer to the following multiple-choice question based on the video and the subtitles. "
    "Respond with only the letter (A, B, C, or D) of the correct option.\n"
    "What number is on the door?\nA. 1\nB. 3\nC. 7\nD. 9\n"
    "\nAnswer with the option's letter from the given choices directly."
)


def videomme_row(**changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "video_id": "001", "duration": "short", "domain": "Life Record", "sub_category": "Daily Life",
        "url": "https://example.invalid/room", "videoID": "room", "question_id": "001-1",
        "task_type": "OCR Problems", "question": "What number is on the door?",
        "options": ["A. 1", "B. 3", "C. 7", "D. 9"], "answer": "B",
    }
    row.update(changes)
    return row


def write_parquet(path: Path, rows: list[dict[str, object]]) -> Path:
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return path


def write_json(path: Path, items: list[object]) -> Path:
    path.write_text(json.dumps(items, indent=1))
    return path


def write_lines(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def run_import(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = app.main(["eval-import", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def set_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def read_back(path: Path) -> tuple[object, dict[str, EvalItem]]:
    header, entries = read_set_with_header(path, SetDefaults(seq=4096))
    errors = [e for e in entries if isinstance(e, SetLineError)]
    assert not errors, errors
    return header, {e.id: e for e in entries if isinstance(e, EvalItem)}


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    """A benchmark's folder with a videos folder holding the example clip as room.mp4 and as hall.mkv."""
    folder = tmp_path / "bench"
    (folder / "videos").mkdir(parents=True)
    shutil.copy(CLIP, folder / "videos" / "room.mp4")
    shutil.copy(CLIP, folder / "videos" / "hall.mkv")
    return folder


# ---------------------------------------------------------------- Video-MME
def test_videomme_parquet_becomes_a_set_with_lmms_evals_prompt_letter_and_breakdowns(bench, tmp_path, capsys):
    items = write_parquet(bench / "test-00000-of-00001.parquet", [
        videomme_row(),
        videomme_row(videoID="hall", question_id="002-1", duration="long", answer="d"),  # .mkv found, lower-case
        videomme_row(videoID="nowhere", question_id="003-1", domain="Knowledge"),
    ])
    out = tmp_path / "sets" / "videomme.jsonl"
    status, stdout, stderr = run_import(capsys, "videomme", str(items), "--out", str(out),
                                        "--media-root", str(bench / "videos"))
    assert status == 0, stderr
    lines = set_lines(out)
    assert lines[0] == {"set": {"score": "choice", "cluster": "media"}}
    assert lines[1] == {
        "id": "001-1", "media": ["../bench/videos/room.mp4"], "prompt": VIDEOMME_PROMPT, "target": "B",
        "sampling": {"temperature": 0.0},
        "metadata": {"duration": "short", "domain": "Life Record", "sub_category": "Daily Life",
                     "task_type": "OCR Problems"},
        "tags": ["videomme"],
    }
    assert (lines[2]["id"], lines[2]["media"], lines[2]["target"], lines[2]["metadata"]["duration"]) == (
        "002-1", ["../bench/videos/hall.mkv"], "D", "long")
    assert (lines[3]["media"], lines[3]["metadata"]["domain"]) == (["../bench/videos/nowhere.mp4"], "Knowledge")
    assert len(lines) == 4
    assert "wrote 3 Video-MME item(s)" in stdout
    assert f"1 of 3 video(s) not found under {bench / 'videos'}, e.g. {bench / 'videos' / 'nowhere.mp4'}" in stdout
    assert stderr == ""

    header, read = read_back(out)
    assert header.score == "choice" and header.cluster == "media"
    room = read["001-1"]
    assert room.files == (str(bench / "videos" / "room.mp4"),) and room.prompt == VIDEOMME_PROMPT
    assert room.metadata == (("duration", "short"), ("domain", "Life Record"), ("sub_category", "Daily Life"),
                             ("task_type", "OCR Problems"))
    assert room.cluster == "../bench/videos/room.mp4" and room.sampling.temperature == 0.0
    assert room.scorer is not None and room.scorer.kind == "choice" and room.scorer.target == ("B",)
    assert score_reply(room.scorer, "The answer is (B).", ()).value == 1.0
    assert score_reply(room.scorer, "The answer is (A).", ()).value == 0.0
    assert score_reply(read["002-1"].scorer, "D. 9", ()).value == 1.0


def test_videomme_items_that_cannot_convert_are_skipped_with_their_reason(bench, tmp_path, capsys):
    items = write_lines(bench / "videomme.jsonl", [
        videomme_row(question_id="ok-1"),
        videomme_row(question_id="no-answer", answer="E"),
        videomme_row(question_id="unlettered", options=["1", "3", "7", "9"]),
        {k: v for k, v in videomme_row(question_id="no-domain").items() if k != "domain"},
        '{"videoID": "room", "question_id": "cut-',
        videomme_row(question_id="ok-1", question="the same id again"),
        videomme_row(question_id="ok-2", options="A. 1"),
        [1, 2],
        videomme_row(question_id="ok-3"),
    ])
    out = tmp_path / "videomme.jsonl"
    status, stdout, stderr = run_import(capsys, "videomme", str(items), "--out", str(out),
                                        "--media-root", str(bench / "videos"))
    assert status == 0
    assert [line["id"] for line in set_lines(out)[1:]] == ["ok-1", "ok-3"]
    said = stderr.splitlines()
    assert said.pop(3).startswith("eval-import: skipped line 5: not JSON: Unterminated string")  # json's words
    assert said == [
        "eval-import: skipped line 2 (question_id no-answer): answer 'E' is not among the options A–D",
        "eval-import: skipped line 3 (question_id unlettered): options[0] is not lettered 'A. …' (Video-MME's "
        "options are 'A. …' strings), got \"1\"",
        "eval-import: skipped line 4 (question_id no-domain): missing field 'domain'",
        "eval-import: skipped line 6 (question_id ok-1): id 'ok-1' again (first at line 1)",
        "eval-import: skipped line 7 (question_id ok-2): options must be a list of strings, got \"A. 1\"",
        "eval-import: skipped line 8: not a JSON object: [1, 2]",
    ]
    assert "wrote 2 Video-MME item(s)" in stdout and "skipped 7 item(s)" in stdout
    assert f"every video was found under {bench / 'videos'}" in stdout
    read_back(out)


# ---------------------------------------------------------------- MVBench
def test_mvbench_answer_text_becomes_its_letter_and_the_file_name_the_sub_task(bench, tmp_path, capsys):
    (bench / "json").mkdir()
    items = write_json(bench / "json" / "action_antonym.json", [
        {"video": "room.mp4", "question": "What does the person do?",
         "candidates": ["open the door", "close the door", "not sure"], "answer": "close the door"},
        {"video": "hall.mkv", "question": "Which way?", "candidates": ["left", "right"], "answer": "up"},
        {"video": "room.mp4", "question": "Too many?", "candidates": list("abcdef"), "answer": "a"},
        {"id": "mine", "video": "gone.mp4", "question": "Own id?", "candidates": ["yes", "no"], "answer": "no"},
    ])
    out = bench / "mvbench.jsonl"
    status, stdout, stderr = run_import(capsys, "mvbench", str(items), "--out", str(out),
                                        "--media-root", str(bench / "videos"))
    assert status == 0, stderr
    lines = set_lines(out)
    assert lines[1] == {
        "id": "action_antonym-0", "media": ["videos/room.mp4"],
        "prompt": "Question:What does the person do?\nOption:\n(A) open the door\n(B) close the door\n(C) not sure\n"
                  "Only give the best option.\n",
        "target": "B", "sampling": {"temperature": 0.0}, "metadata": {"sub_task": "action_antonym"},
        "tags": ["mvbench"],
    }
    assert (lines[2]["id"], lines[2]["target"], lines[2]["media"]) == ("mine", "B", ["videos/gone.mp4"])
    assert len(lines) == 3
    assert stderr.splitlines() == [
        "eval-import: skipped item 2: answer \"up\" is not one of the candidates",
        "eval-import: skipped item 3: candidates: 6 options; the choice scorer reads the letters A–E",
    ]
    assert "1 of 2 video(s) not found" in stdout
    assert "lmms-eval keeps action_antonym's videos in MVBench's video folder under ssv2_video_mp4/" in stdout
    _, read = read_back(out)
    assert read["action_antonym-0"].metadata == (("sub_task", "action_antonym"),)
    assert score_reply(read["action_antonym-0"].scorer, "The answer is (B).", ()).value == 1.0

    named = bench / "named.jsonl"  # --subtask names it; the media root defaults to the item file's folder
    assert run_import(capsys, "mvbench", str(items), "--out", str(named), "--subtask", "state_change")[0] == 0
    first = set_lines(named)[1]
    assert (first["id"], first["metadata"], first["media"]) == (
        "state_change-0", {"sub_task": "state_change"}, ["json/room.mp4"])


# ---------------------------------------------------------------- LongVideoBench
def lvb_row(**changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "video_id": "room", "id": "room_0", "video_path": "room.mp4", "duration": 8.0, "duration_group": 15,
        "question_category": "S2E", "question": "What does the voice say after the door opens?",
        "option0": "hello", "option1": "blue falcon", "option2": "goodbye", "option3": "N/A", "option4": "N/A",
        "correct_choice": 1, "subtitle_path": "room_en.json", "starting_timestamp_for_subtitles": 0,
    }
    row.update(changes)
    return row


def test_longvideobench_options_without_na_and_the_choice_index_as_a_letter(bench, tmp_path, capsys):
    items = write_parquet(bench / "validation-00000-of-00001.parquet", [
        lvb_row(),
        lvb_row(id="hall_0", video_path="hall.mkv", duration_group=3600, question_category="E3E",
                option3="maybe", option4="never", correct_choice=4),
        lvb_row(id="points-at-na", correct_choice=3),
        lvb_row(id="gap", option2="N/A", option3="late"),
        lvb_row(id="test-split", correct_choice=None),
    ])
    out = tmp_path / "lvb.jsonl"
    status, stdout, stderr = run_import(capsys, "longvideobench", str(items), "--out", str(out),
                                        "--media-root", str(bench / "videos"))
    assert status == 0, stderr
    lines = set_lines(out)
    assert lines[1] == {
        "id": "room_0", "media": ["bench/videos/room.mp4"],
        "prompt": "What does the voice say after the door opens?\nA. hello\nB. blue falcon\nC. goodbye\n"
                  "Answer with the option's letter from the given choices directly.\n",
        "target": "B", "sampling": {"temperature": 0.0},
        "metadata": {"duration_group": 15, "question_category": "S2E"}, "tags": ["longvideobench"],
    }
    assert (lines[2]["target"], lines[2]["metadata"]) == ("E", {"duration_group": 3600, "question_category": "E3E"})
    assert lines[2]["prompt"].endswith("D. maybe\nE. never\nAnswer with the option's letter from the given "
                                       "choices directly.\n")
    assert len(lines) == 3
    assert stderr.splitlines() == [
        "eval-import: skipped item 3 (id points-at-na): correct_choice 3 is not among the options A–C (0–2)",
        "eval-import: skipped item 4 (id gap): option3 follows the unused option2: the options' letters would shift",
        "eval-import: skipped item 5 (id test-split): missing field 'correct_choice' (LongVideoBench's test split "
        "has no answers)",
    ]
    _, read = read_back(out)
    assert read["room_0"].metadata == (("duration_group", "15"), ("question_category", "S2E"))
    assert score_reply(read["hall_0"].scorer, "Answer: E", ()).value == 1.0


def test_longvideobench_official_json_gives_candidates(bench, tmp_path, capsys):
    row = {k: v for k, v in lvb_row().items() if not k.startswith("option")}
    items = write_json(bench / "lvb_val.json", [{**row, "candidates": ["hello", "blue falcon", "goodbye"]}])
    out = tmp_path / "lvb.jsonl"
    assert run_import(capsys, "longvideobench", str(items), "--out", str(out),
                      "--media-root", str(bench / "videos"))[0] == 0
    assert set_lines(out)[1]["prompt"].startswith("What does the voice say after the door opens?\nA. hello\n"
                                                  "B. blue falcon\nC. goodbye\nAnswer")


# ---------------------------------------------------------------- the imported set runs
def test_app_eval_plans_the_imported_set(bench, tmp_path, capsys):
    items = write_parquet(bench / "videomme.parquet", [videomme_row(), videomme_row(videoID="gone",
                                                                                    question_id="002-1")])
    set_path = tmp_path / "videomme.jsonl"
    assert run_import(capsys, "videomme", str(items), "--out", str(set_path), "--media-root",
                      str(bench / "videos"))[0] == 0
    run = tmp_path / "run"
    status = app.main(["eval", str(set_path), "--out", str(run), "--seq", "4096"])
    assert status == 2  # the missing video is its item's error
    rows = {r["id"]: r for r in map(json.loads, (run / "results.jsonl").read_text().splitlines())}
    assert rows["001-1"]["error"] is None and rows["001-1"]["plan"][0]["video"]["frames"]
    assert rows["001-1"]["metadata"]["task_type"] == "OCR Problems"
    assert rows["001-1"]["cluster"] == "bench/videos/room.mp4" and rows["001-1"]["tags"] == ["videomme"]
    assert "gone.mp4" in rows["002-1"]["error"]


# ---------------------------------------------------------------- bad input
def test_an_unreadable_item_file_is_refused_in_one_line(bench, tmp_path, capsys, monkeypatch):
    out = tmp_path / "set.jsonl"
    cases = {
        "missing": (tmp_path / "nowhere.json", "is not a file"),
        "broken list": (bench / "broken.json", "starts like a JSON list but is not JSON"),
        "not parquet": (bench / "fake.parquet", "is not a parquet file pyarrow reads"),
        "nothing converts": (bench / "other.json", "no item of"),
    }
    (bench / "broken.json").write_text('[{"videoID": "room",')
    (bench / "fake.parquet").write_text("not a parquet file\n")
    write_json(bench / "other.json", [{"video": "room.mp4", "question": "?"}])
    for name, (path, words) in cases.items():
        status, stdout, stderr = run_import(capsys, "videomme", str(path), "--out", str(out))
        assert status == 2, name
        assert words in stderr and stderr.startswith("eval-import: "), (name, stderr)
        assert not out.exists(), name

    parquet = write_parquet(bench / "ok.parquet", [videomme_row()])
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # pyarrow not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    status, _, stderr = run_import(capsys, "videomme", str(parquet), "--out", str(out))
    assert status == 2 and not out.exists()
    assert stderr == (f"eval-import: {parquet}: reading parquet needs pyarrow, which is not installed (pip install "
                      "pyarrow); or give the items as JSON or JSON lines\n")


def test_an_existing_set_is_kept_unless_forced_and_flags_are_checked(bench, tmp_path, capsys):
    items = write_json(bench / "videomme.json", [videomme_row()])
    out = tmp_path / "set.jsonl"
    out.write_text("my own set\n")
    status, _, stderr = run_import(capsys, "videomme", str(items), "--out", str(out))
    assert status == 2 and "exists: nothing written (--force replaces it)" in stderr
    assert out.read_text() == "my own set\n"
    assert run_import(capsys, "videomme", str(items), "--out", str(out), "--force")[0] == 0
    assert set_lines(out)[1]["id"] == "001-1"

    status, _, stderr = run_import(capsys, "videomme", str(items), "--out", str(out), "--force",
                                   "--media-root", str(tmp_path / "no-such-folder"))
    assert status == 2 and "is not a folder" in stderr
    with pytest.raises(SystemExit) as exit_info:
        app.main(["eval-import", "videomme", str(items), "--out", str(out), "--subtask", "x"])
    assert exit_info.value.code == 2 and "--subtask is MVBench's" in capsys.readouterr().err
