"""``python app.py eval --sweep NAME=V1,V2,...``: the flag's parsing (a bad name or value is one line, exit 2, nothing
written), a preview sweep of seq over the example clip whose media tokens per value are the inspect command's plan
for that budget (and differ between values), the sweep value replacing an item's own setting, resuming (a rerun
skips what is done), the plans made once where they can be, and sweep.json's figures against a hand computation."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
from pathlib import Path

import pytest

from dots3_demo.cli.eval import main_eval
from dots3_demo.cli.inspect import add_inspect_arguments, run_inspect
from dots3_demo.core.records import Answer
from dots3_demo.engine.protocol import PromptTokens, TurnStats
from dots3_demo.workbench.eval_results import EvalResult
from dots3_demo.workbench.evalset import Forced, SetDefaults, parse_line
from dots3_demo.workbench.scoring import Score
from dots3_demo.workbench.sweep import SweepProblem, SweepReport, parse_sweep, sweep_json, sweep_row, value_text
from support import media_factory

REPO = Path(__file__).resolve().parents[2]
CLIP = REPO / "assets" / "examples" / "room_clip.mp4"
MAX_NEW = 64  # the item's own max_new_tokens: the video is planned for it (and a seq of 1024 leaves room)
SEQS = (1024, 2048, 4096)


def run_eval(*argv: str) -> tuple[int, str, str]:
    """``app.py eval`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main_eval(list(argv))
    return status, out.getvalue(), err.getvalue()


def inspect_json(path: Path, seq: int, max_new_tokens: int) -> dict:
    """What ``app.py inspect FILE --json --seq SEQ --max-new-tokens N`` prints for one file (the command's own code)."""
    parser = argparse.ArgumentParser()
    add_inspect_arguments(parser)
    out = io.StringIO()
    status = run_inspect(parser.parse_args([str(path), "--json", "--seq", str(seq), "--max-new-tokens",
                                            str(max_new_tokens)]), out)
    assert status == 0, out.getvalue()
    (line,) = out.getvalue().splitlines()
    return json.loads(line)


def results(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- parsing
def test_a_sweep_parses_into_typed_values_and_folders():
    seq = parse_sweep("seq=4096, 8192,16384")
    assert seq.name == "seq" and seq.budget
    assert [v.value for v in seq.values] == [4096, 8192, 16384] and all(type(v.value) is int for v in seq.values)
    assert [seq.folder(v) for v in seq.values] == ["seq=4096", "seq=8192", "seq=16384"]
    temperature = parse_sweep("temperature=0,0.5,1")
    assert not temperature.budget and [v.value for v in temperature.values] == [0.0, 0.5, 1.0]
    assert [temperature.folder(v) for v in temperature.values] == ["temperature=0", "temperature=0.5", "temperature=1"]
    assert [v.value for v in parse_sweep("k_mode=eval_ek,whole").values] == ["eval_ek", "whole"]
    assert [v.value for v in parse_sweep("audio_cap=0,1").values] == [0.0, 1.0]
    assert value_text(0.1234567) == "0.1234567" and value_text(2.5) == "2.5"


BAD_SWEEPS = [
    ("seq", "want NAME=V1,V2,..."),
    ("=1,2", "want NAME=V1,V2,..."),
    ("frames=1,2", "cannot sweep 'frames' (known: budget: seq, output_reserve, max_new_tokens, audio_cap, k_mode; "
                   "sampling: temperature, top_p, top_k, seed, repetition_penalty)"),
    ("max_tokens=64,128", "max_tokens is max_new_tokens here"),
    ("seq=", "seq: give the values separated by commas, none empty"),
    ("seq=4096,,8192", "seq: give the values separated by commas, none empty"),
    ("seq=4k", "seq=4k: not a whole number"),
    ("seq=4096.5", "seq=4096.5: not a whole number"),
    ("seq=-8", "seq=-8: budget: seq must be positive, got -8"),
    ("seq=4096,4096", "seq=4096 is given twice"),
    ("temperature=0.5,0.50", "temperature=0.50 is given twice"),
    ("temperature=hot", "temperature=hot: not a number"),
    ("temperature=nan", "temperature=nan: not a finite number"),
    ("temperature=-1", "temperature=-1: sampling: vLLM refuses it: temperature must be non-negative"),
    ("top_p=2", "top_p=2: sampling: vLLM refuses it: top_p must be in (0, 1]"),
    ("audio_cap=-0.5", "audio_cap=-0.5: budget: audio cap must be ≥ 0"),
    ("k_mode=fast", "k_mode=fast: must be one of eval_ek, eval30, whole, logk"),
    ("max_new_tokens=0", "max_new_tokens=0: sampling: vLLM refuses it"),
]


@pytest.mark.parametrize(("given", "said"), BAD_SWEEPS)
def test_a_bad_sweep_is_one_line_and_exit_2(given, said, tmp_path):
    with pytest.raises(SweepProblem) as caught:
        parse_sweep(given)
    assert said in str(caught.value)
    set_path = tmp_path / "set.jsonl"
    set_path.write_text(json.dumps({"id": "q", "media": [], "prompt": "?"}) + "\n")
    out = tmp_path / "out"
    status, stdout, stderr = run_eval(str(set_path), "--out", str(out), "--sweep", given)
    assert (status, stdout) == (2, "")
    # one line (torch may warn once as vLLM is first imported: not the command's words)
    assert [line for line in stderr.splitlines() if "CUDA" not in line] == [f"eval: --sweep: {caught.value}"]
    assert not out.exists()  # nothing ran, nothing written


def test_the_sweep_value_replaces_the_items_own_setting():
    folder = "/sets"

    def item(line: dict, forced: Forced):
        return parse_line(json.dumps(line), 1, folder, SetDefaults(seq=32768, forced=forced))

    own = {"id": "q", "media": [], "prompt": "?", "seq": 16384, "max_new_tokens": 64, "audio_cap": 0,
           "sampling": {"temperature": 0.2, "max_tokens": 64}}
    assert item(own, Forced("seq", 2048)).video.seq == 2048
    assert item(own, Forced("audio_cap", 0.5)).video.audio_cap == 0.5
    assert item(own, Forced("k_mode", "whole")).video.k_mode == "whole"
    swept = item(own, Forced("max_new_tokens", 128))  # the one number: the reply's max tokens and the plan's reserve
    assert swept.video.max_new_tokens == swept.sampling.max_tokens == 128
    hot = item(own, Forced("temperature", 1.0))
    assert hot.sampling.temperature == 1.0 and hot.video.seq == 16384 and hot.sampling.max_tokens == 64
    assert item({"id": "q", "media": [], "prompt": "?"}, Forced("top_k", 5)).sampling.top_k == 5
    refused = item(own, Forced("seq", 60))  # refused with the item's own max_new_tokens: that item's error
    assert refused.error.startswith("budget: output reserve 64") and refused.id == "q"
    assert item(own, None).video.seq == 16384  # not swept: the item's own


# ---------------------------------------------------------------- a preview sweep of the example clip
@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return media_factory.make_image(tmp_path_factory.mktemp("sweep-media") / "photo.png", width=320, height=200)


def write_set(path: Path, picture: Path) -> Path:
    items = [
        # its own seq and audio_cap: the sweep's seq replaces the seq; its audio_cap stays
        {"id": "room", "media": [str(CLIP)], "prompt": "What room number is on the door?", "seq": 32768,
         "max_new_tokens": MAX_NEW, "tags": ["video"], "metadata": {"duration": "short"}},
        {"id": "picture", "media": [str(picture)], "prompt": "What is this?", "max_new_tokens": MAX_NEW,
         "tags": ["image"]},
        {"id": "room-again", "media": [str(CLIP)], "prompt": "What does the voice say?", "max_new_tokens": MAX_NEW,
         "tags": ["video"], "metadata": {"duration": "short"}},
    ]
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


@pytest.fixture(scope="module")
def seq_sweep(tmp_path_factory: pytest.TempPathFactory, picture: Path) -> tuple[int, str, str, Path, Path]:
    folder = tmp_path_factory.mktemp("sweep")
    set_path = write_set(folder / "set.jsonl", picture)
    out = folder / "out"
    status, stdout, stderr = run_eval(str(set_path), "--out", str(out), "--sweep",
                                      "seq=" + ",".join(map(str, SEQS)))
    return status, stdout, stderr, out, set_path


def test_a_preview_sweep_gives_each_values_plan_as_the_inspect_command_prints_it(seq_sweep, picture):
    status, stdout, stderr, out, _ = seq_sweep
    assert status == 0, stderr[-3000:]
    data = json.loads((out / "sweep.json").read_text())
    assert (data["format"], data["name"], data["values"], data["preview"]) == (1, "seq", [str(s) for s in SEQS], True)
    image = inspect_json(picture, SEQS[0], MAX_NEW)
    videos = []
    for seq, row in zip(SEQS, data["rows"], strict=True):
        video = inspect_json(CLIP, seq, MAX_NEW)
        videos.append(video)
        rows = {r["id"]: r for r in results(out / f"seq={seq}")}
        assert rows["room"]["plan"] == [video] and rows["room-again"]["plan"] == [video]
        assert rows["picture"]["plan"] == [image]
        assert rows["room"]["budget"]["seq"] == seq  # the sweep's value, not the item's own 32768
        assert row["folder"] == f"seq={seq}" and (row["items"], row["planned"], row["errors"]) == (3, 3, 0)
        tokens = video["video"]["prompt_tokens"]
        assert row["media_tokens"] == 2 * tokens + image["image"]["tokens"]
        assert row["media_tokens_per_item"] == pytest.approx((2 * tokens + image["image"]["tokens"]) / 3)
        assert row["frames_per_video"] == len(video["video"]["frames"])
        assert row["accuracy"] is None and row["prompt_tokens_per_item"] is None  # preview: the cost side alone
        groups = {(g["by"], g["name"]): g for g in row["groups"]}
        assert groups["tag", "video"]["media_tokens_per_item"] == tokens and groups["tag", "video"]["items"] == 2
        assert groups["duration", "short"]["media_tokens_per_item"] == tokens
        assert groups["tag", "image"]["media_tokens_per_item"] == image["image"]["tokens"]
    # the budget changes the plan: the test would pass for any one plan otherwise
    assert len({v["video"]["prompt_tokens"] for v in videos}) == len(SEQS)
    assert len({len(v["video"]["frames"]) for v in videos}) > 1
    # stdout: a line per value, and the plans made once: the picture once for all values, each clip once per value
    lines = stdout.splitlines()
    assert lines[0].startswith("eval: sweep of seq over 3 value(s) (preview: the plans only, nothing answered); "
                               "4 media plan(s) made, 5 reused")
    for seq, video, line in zip(SEQS, videos, lines[2:5], strict=True):
        cells = line.removeprefix("eval: ").split()
        assert cells[:4] == [str(seq), "3/3", "0", "—"]
        assert cells[4] == f"{(2 * video['video']['prompt_tokens'] + image['image']['tokens']) / 3:,.1f}"
    assert "sweep.json" in lines[-1] and "sweep.html" in lines[-1]
    for seq in SEQS:
        assert (out / f"seq={seq}" / "report.html").is_file()
        (run,) = json.loads((out / f"seq={seq}" / "run.json").read_text())["runs"]
        assert run["defaults"]["seq"] == seq and run["defaults"]["sweep"] == {"name": "seq", "value": seq}


def test_rerunning_a_sweep_skips_what_is_done_and_adds_a_new_value(seq_sweep):
    _, _, _, out, set_path = seq_sweep
    before = {seq: results(out / f"seq={seq}") for seq in SEQS}
    status, stdout, stderr = run_eval(str(set_path), "--out", str(out), "--sweep",
                                      "seq=" + ",".join(map(str, (*SEQS, 8192))))
    assert status == 0, stderr[-3000:]
    assert stderr.count("3 of 3 items are done in") == len(SEQS)  # each earlier value: skipped
    for seq in SEQS:
        assert results(out / f"seq={seq}") == before[seq]  # the same rows, made by the first run
        runs = json.loads((out / f"seq={seq}" / "run.json").read_text())["runs"]
        assert [(r["ran"], r["earlier"]) for r in runs] == [(3, 0), (0, 3)]
    (new,) = json.loads((out / "seq=8192" / "run.json").read_text())["runs"]
    assert (new["ran"], new["earlier"]) == (3, 0)
    data = json.loads((out / "sweep.json").read_text())
    assert [r["value"] for r in data["rows"]] == ["1024", "2048", "4096", "8192"]
    assert data["rows"][3]["media_tokens"] > 0


def test_a_sampling_sweep_plans_each_file_once(tmp_path, picture):
    set_path = write_set(tmp_path / "set.jsonl", picture)
    status, stdout, stderr = run_eval(str(set_path), "--out", str(tmp_path / "out"), "--sweep", "temperature=0,0.7,1")
    assert status == 0, stderr[-3000:]
    # the clip (the item's own seq is the default's: one budget) and the picture, once; the other 7 plans reused
    assert "2 media plan(s) made, 7 reused" in stdout.splitlines()[0]
    rows = [json.loads((tmp_path / "out" / "sweep.json").read_text())["rows"][i] for i in range(3)]
    assert len({r["media_tokens"] for r in rows}) == 1  # sampling does not change the plans
    sampled = [results(tmp_path / "out" / f"temperature={t}")[0]["sampling"]["temperature"] for t in ("0", "0.7", "1")]
    assert sampled == [0.0, 0.7, 1.0]


# ---------------------------------------------------------------- sweep.json's figures, by hand
def video_plan(tokens: int, frames: int) -> dict:
    return {"file": "v.mp4", "kind": "video", "video": {"prompt_tokens": tokens, "frames": [{}] * frames}}


def image_plan(tokens: int) -> dict:
    return {"file": "p.png", "kind": "image", "image": {"tokens": tokens}}


def answered(value: float, prompt: int, ttft: float) -> dict:
    stats = TurnStats(ttft_s=ttft, prompt=PromptTokens(total=prompt, text=prompt))
    return {"answer": Answer(text="B", stats=stats), "score": Score(value, "why", "choice", extracted="B")}


def test_a_rows_figures_equal_a_hand_computation():
    made = [
        EvalResult(id="a", line=1, plan=(video_plan(300, 6),), tags=("ocr",), cluster="v1",
                   metadata=(("duration", "short"),), **answered(1.0, 400, 0.5)),
        EvalResult(id="b", line=2, plan=(video_plan(500, 10),), tags=("ocr", "count"), cluster="v1",
                   metadata=(("duration", "long"),), **answered(0.0, 620, 0.7)),
        EvalResult(id="c", line=3, plan=(image_plan(100),), tags=("count",), cluster="v2",
                   **answered(1.0, 150, 0.2)),
        EvalResult(id="d", line=4, plan=(), cluster="v3", **answered(1.0, 40, 0.1)),
        EvalResult(id="e", line=5, plan=(video_plan(999, 99),), error="the engine failed"),  # left out of the means
    ]
    row = sweep_row("2048", "seq=2048", made, items=6, cluster_key="video")
    # by hand: 4 scored items, x = 1, 0, 1, 1; mean 3/4; s² = (3·(1/4)² + (3/4)²)/3 = 1/4
    # clusters: v1 = {a, b} (deviations +1/4, −3/4), v2 = {c}, v3 = {d}; the cross term of v1 is 2·(1/4)(−3/4) = −3/8
    # SE² = s²/n + cross/n² = (1/4)/4 − (3/8)/16 = 1/16 − 3/128 = 5/128
    se = math.sqrt(5 / 128)
    assert (row.items, row.ran, row.planned, row.errors, row.scored) == (6, 5, 4, 1, 4)
    assert row.accuracy is not None and row.accuracy.n == 4 and row.accuracy.clusters == 3
    assert row.accuracy.mean == pytest.approx(0.75) and row.accuracy.se == pytest.approx(se)
    assert row.accuracy.low == pytest.approx(0.75 - 1.959963984540054 * se) and row.accuracy.high == 1.0  # clipped
    assert row.media_tokens == 300 + 500 + 100 + 0
    assert row.media_tokens_per_item == pytest.approx(900 / 4)
    assert row.frames_per_video == pytest.approx((6 + 10) / 2)
    assert row.prompt_tokens_per_item == pytest.approx((400 + 620 + 150 + 40) / 4)
    assert row.median_ttft_s == pytest.approx((0.2 + 0.5) / 2)
    groups = {(g.by, g.name): g for g in row.groups}
    assert list(groups)[:3] == [("modality", "image"), ("modality", "text"), ("modality", "video")]
    ocr, count = groups["tag", "ocr"], groups["tag", "count"]
    assert (ocr.items, ocr.media_tokens_per_item, ocr.accuracy.mean) == (2, 400.0, 0.5)
    # ocr: a and b, one cluster: s² = 1/2; SE² = (1/2)/2 + 2·(1/2)(−1/2)/2² = 1/4 − 1/8 = 1/8
    assert ocr.accuracy.se == pytest.approx(math.sqrt(1 / 8)) and ocr.accuracy.clusters == 1
    assert (count.items, count.media_tokens_per_item, count.accuracy.mean) == (2, 300.0, 0.5)
    # count: b (v1) and c (v2), two clusters, no cross term: SE² = s²/n = (1/2)/2
    assert count.accuracy.se == pytest.approx(math.sqrt(0.25)) and count.accuracy.clusters == 2
    assert (groups["duration", "long"].items, groups["duration", "long"].accuracy.n) == (1, 1)
    assert groups["duration", "long"].accuracy.se is None  # one item: no interval
    report = SweepReport(name="seq", values=("2048",), set="set.jsonl", preview=False, cluster="video", rows=(row,))
    data = json.loads(json.dumps(sweep_json(report)))
    assert (data["format"], data["name"], data["values"], data["cluster"]) == (1, "seq", ["2048"], "video")
    (written,) = data["rows"]
    assert written["accuracy"] == {"n": 4, "mean": 0.75, "se": pytest.approx(se),
                                   "low": pytest.approx(0.75 - 1.96 * se, abs=1e-4), "high": 1.0, "clusters": 3}
    assert (written["value"], written["folder"], written["scored"]) == ("2048", "seq=2048", 4)
    assert written["media_tokens_per_item"] == 225.0 and written["frames_per_video"] == 8.0
    (ocr_written,) = [g for g in written["groups"] if (g["by"], g["name"]) == ("tag", "ocr")]
    assert ocr_written == {"by": "tag", "name": "ocr", "items": 2, "media_tokens_per_item": 400.0,
                           "accuracy": {"n": 2, "mean": 0.5, "se": pytest.approx(math.sqrt(1 / 8)), "low": 0.0,
                                        "high": 1.0, "clusters": 1}}


# ---------------------------------------------------------------- with an engine (the scripted double)
def test_an_engine_sweep_starts_the_engine_once_and_each_value_reaches_vllms_sampling(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from dots3_demo.cli import engine as cli_engine
    from dots3_demo.engine.inprocess import InProcessEngine
    from dots3_demo.profiles import PREVIEW_PROFILE_DIR
    from support.doubles import ScriptedAsyncLLM

    double = ScriptedAsyncLLM(["A"])
    starts: list[object] = []

    def factory(args: object) -> ScriptedAsyncLLM:
        starts.append(args)
        return double

    args = SimpleNamespace(model="scripted", mm_processor_cache_gb=0, max_model_len=32768, max_num_seqs=2)
    monkeypatch.setattr(cli_engine, "build_engine", lambda _ns: InProcessEngine(args, engine_factory=factory))
    items = [{"id": "q1", "media": [], "prompt": "A or B?", "score": "choice", "target": "A", "tags": ["x"]},
             {"id": "q2", "media": [], "prompt": "A or B?", "score": "choice", "target": "B", "tags": ["x"],
              "sampling": {"temperature": 0.3}}]  # its own temperature: the sweep's replaces it
    set_path = tmp_path / "set.jsonl"
    set_path.write_text("".join(json.dumps(item) + "\n" for item in items))
    status, stdout, stderr = run_eval(str(set_path), "--out", str(tmp_path / "out"), "--engine", "inprocess",
                                      "--model", str(PREVIEW_PROFILE_DIR), "--sweep", "temperature=0,1")
    assert status == 1, stderr[-3000:]  # q2 scored 0
    assert len(starts) == 1 and double.shutdown_called  # one engine for both values, shut down at the end
    assert stderr.count("starting the engine…") == 1
    assert [params.temperature for _, params, _ in double.generated] == [0.0, 0.0, 1.0, 1.0]
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert data["preview"] is False
    for row in data["rows"]:
        assert row["accuracy"]["mean"] == 0.5 and row["accuracy"]["n"] == 2 and row["scored"] == 2
        assert row["prompt_tokens_per_item"] > 0 and row["median_ttft_s"] is not None
        (tag,) = [g for g in row["groups"] if g["by"] == "tag"]
        assert tag["accuracy"]["mean"] == 0.5
    cells = [line.removeprefix("eval: ").split() for line in stdout.splitlines()[2:4]]
    assert [c[:5] for c in cells] == [["0", "2/2", "0", "50.0%", "[0.0%,"], ["1", "2/2", "0", "50.0%", "[0.0%,"]]
