"""Batch evaluation against the studio's ``InProcessEngine`` over the scripted double of vLLM's ``AsyncLLM``
(``support/doubles.py``): the answers and checks, the request the chat would send, requests in parallel up to
``--max-concurrency`` (by default the engine's capacity), and Ctrl-C (a real SIGINT) leaving a valid
``results.jsonl`` with the requests in flight aborted."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dots3_demo import vllm_compat
from dots3_demo.cli import engine as cli_engine
from dots3_demo.cli.eval import main_eval
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT
from dots3_demo.profiles import PREVIEW_PROFILE_DIR
from dots3_demo.workbench.batch import Progress, evaluate
from dots3_demo.workbench.eval_results import BatchSettings, EvalResult, EvalRun
from support import media_factory
from support.doubles import ScriptedAsyncLLM, scripted_engine

MODEL = str(PREVIEW_PROFILE_DIR)  # what the inspector reads; the engine is the double (build_engine replaced)
TOOL_SCRIPT = ["Let me check. <dots_", "function_call>\n<invoke name=\"get_weather\">\n",
               "<parameter name=\"city\">Paris</parameter>\n</invoke>\n</dots_function_call>"]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def prompt_of(engine_input: dict[str, Any]) -> str:
    """The user's text in the conversation the engine rendered."""
    parts = engine_input["conversation"][-1]["content"]
    return next(p["text"] for p in parts if p.get("type") == "text")


def write_set(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def results(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def evaluate_now(set_path: Path, out: Path, profile, engine) -> EvalRun:
    settings = BatchSettings(set_path=set_path, out_dir=out, profile=profile, seq=8192)
    return asyncio.run(evaluate(settings, engine, Progress(io.StringIO())))


@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return media_factory.make_image(tmp_path_factory.mktemp("eval-engine") / "photo.png", width=320, height=200)


def test_answers_checks_and_the_request_the_chat_would_send(tmp_path, profile, picture):
    def script(engine_input):
        return TOOL_SCRIPT if "weather" in prompt_of(engine_input) else ["The password is ", "Blue Falcon."]

    double = ScriptedAsyncLLM(script)
    set_path = write_set(tmp_path / "set.jsonl", [
        {"id": "found", "media": [str(picture)], "prompt": "Which password?", "expect": ["blue falcon", "PASSWORD"]},
        {"id": "missed", "media": [], "prompt": "Which room?", "expect": ["room 4"], "system": "Be brief.",
         "sampling": {"temperature": 0, "max_tokens": 64}, "seq": 2048},
        {"id": "tool", "media": [], "prompt": "What is the weather in Paris?", "tools": WEATHER,
         "expect": ["get_weather", "paris"]},
    ])
    run = evaluate_now(set_path, tmp_path / "out", profile, scripted_engine(double))
    assert run.summary.exit_status == 1 and (run.summary.passed, run.summary.failed, run.summary.errors) == (2, 1, 0)
    found, missed, tool = results(tmp_path / "out")
    assert found["answer"] == "The password is Blue Falcon." and found["finish_reason"] == "stop"
    assert found["checks"] == [{"expect": "blue falcon", "found": True}, {"expect": "PASSWORD", "found": True}]
    assert missed["checks"] == [{"expect": "room 4", "found": False}] and missed["error"] is None
    # the figures are the engine's: the double's prompt (10 text + 6 image tokens) and its request metrics
    assert found["prompt_tokens"]["total"] == 16 and found["prompt_tokens"]["image"] == 6
    # and the prompt itself, token by token (issue 21 §1): the double's ids, its image pad run one chip
    spans = found["prompt_view"]["spans"]
    assert found["prompt_view"]["source"] == "engine" and sum(s["repeat"] * len(s["token_ids"]) for s in spans) == 16
    assert [s["kind"] for s in spans] == ["text", "image", "image", "image"] and spans[2]["repeat"] == 4
    assert EvalResult.from_json(found).answer.stats.prompt_view.total == 16
    assert found["ttft_s"] == 0.25 and found["tokens_per_s"] == 2.0 and found["output_tokens"] == 2
    assert tool["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert tool["finish_reason"] == "tool_calls" and tool["answer"] == "Let me check. "
    assert [c["found"] for c in tool["checks"]] == [True, True]  # found in the call, not in the text
    # what was sent: the chat's system prompt (or the item's), the media first, then the prompt; the video
    # budget for the reply's max tokens; the tools to the chat template
    sent = {prompt_of(call["prompt_extras"] | {"conversation": call["conversations"][0]}): call
            for call in double.renderer.calls}
    first = sent["Which password?"]["conversations"][0]
    assert first[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert [p["type"] for p in first[1]["content"]] == ["image_url", "text"]
    assert sent["Which room?"]["conversations"][0][0] == {"role": "system", "content": "Be brief."}
    assert sent["Which room?"]["prompt_extras"]["mm_processor_kwargs"] == {
        "seq": 2048, "max_new_tokens": 64, "audio_cap": 1.0, "k_mode": "eval_ek"}
    assert double.generated[[prompt_of(g[0]) for g in double.generated].index("Which room?")][1].temperature == 0
    tools_sent = sent["What is the weather in Paris?"]["chat_params"].chat_template_kwargs["tools"]
    assert tools_sent == vllm_compat.served_tools(WEATHER)  # as vLLM's server hands them to the template
    assert double.aborted == []  # every request ran to its end
    report = (tmp_path / "out" / "report.html").read_text()
    assert "Blue Falcon." in report and "NOT found" in report and "get_weather" in report


def test_an_item_the_engine_refuses_is_its_error(tmp_path, profile, picture):
    double = ScriptedAsyncLLM(["fine"])
    set_path = write_set(tmp_path / "set.jsonl", [
        {"id": "too-many", "media": [str(picture)] * 9, "prompt": "?"},  # the double's engine takes 8 images
        {"id": "ok", "media": [], "prompt": "?"},
    ])
    run = evaluate_now(set_path, tmp_path / "out", profile, scripted_engine(double))
    too_many, ok = results(tmp_path / "out")
    assert "at most 8 image item(s)" in too_many["error"] and too_many["answer"] is None
    assert ok["answer"] == "fine" and ok["error"] is None
    assert run.summary.exit_status == 2 and len(double.generated) == 1


@pytest.mark.parametrize("max_concurrency", [None, 1, 3])
def test_requests_run_in_parallel_up_to_max_concurrency_by_default_the_engine_capacity(tmp_path, profile,
                                                                                        max_concurrency):
    """``--max-concurrency`` below and above the engine's 2 sequences (above: vLLM queues the rest); none given:
    the engine's capacity."""
    limit = max_concurrency or 2
    in_flight: list[int] = []

    def script(_engine_input):
        in_flight.append(len(double.generated) - len(double.closed_streams))
        return ["a", "b"]

    double = ScriptedAsyncLLM(script, hold_at=0, max_num_seqs=2)
    engine = scripted_engine(double, max_num_seqs=2)
    set_path = write_set(tmp_path / "set.jsonl", [{"id": f"q{i}", "media": [], "prompt": f"question {i}"}
                                                  for i in range(6)])
    said = io.StringIO()

    async def scenario() -> EvalRun:
        settings = BatchSettings(set_path=set_path, out_dir=tmp_path / "out", profile=profile, seq=8192,
                                 max_concurrency=max_concurrency)
        task = asyncio.ensure_future(evaluate(settings, engine, Progress(said)))
        deadline = time.monotonic() + 10
        while len(double.generated) < limit and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for _ in range(20):  # give one more request every chance to start
            await asyncio.sleep(0.01)
        assert len(double.generated) == limit
        double.released.set()
        return await task

    run = asyncio.run(scenario())
    assert max(in_flight) == limit and len(double.generated) == 6
    assert [prompt_of(g[0]) for g in double.generated] == [f"question {i}" for i in range(6)]  # the set's order
    assert [r["answer"] for r in results(tmp_path / "out")] == ["ab"] * 6 and run.summary.exit_status == 0
    assert f"at most {limit} requests at once" in said.getvalue()
    (record,) = json.loads((tmp_path / "out" / "run.json").read_text())["runs"]
    assert record["defaults"]["max_concurrency"] == limit


@pytest.mark.parametrize("bad", ["0", "-3", "two"])
def test_a_bad_max_concurrency_is_a_clear_usage_error(tmp_path, bad, capsys):
    set_path = write_set(tmp_path / "set.jsonl", [{"id": "q", "media": [], "prompt": "?"}])
    with pytest.raises(SystemExit) as exited:
        main_eval([str(set_path), "--out", str(tmp_path / "out"), "--max-concurrency", bad])
    assert exited.value.code == 2 and not (tmp_path / "out").exists()
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == "app.py eval: error: argument --max-concurrency: " + (
        f"not a whole number: {bad!r}" if bad == "two" else f"must be 1 or more, not {bad}")


def test_ctrl_c_keeps_what_finished_aborts_what_was_in_flight_and_a_rerun_does_the_rest(tmp_path, profile,
                                                                                        monkeypatch):
    def script(engine_input):
        return ["quick."] if prompt_of(engine_input) == "a" else ["slow ", "reply"]

    double = ScriptedAsyncLLM(script, hold_at=1, max_num_seqs=2)  # replies of two steps wait at their second
    monkeypatch.setattr(cli_engine, "build_engine", lambda _ns: scripted_engine(double, max_num_seqs=2))
    set_path = write_set(tmp_path / "set.jsonl", [{"id": p, "media": [], "prompt": p} for p in "abcd"])
    out = tmp_path / "out"

    def waiting() -> bool:  # "a" is written, and "b" and "c" (sent once "a" freed its slot) wait in the engine
        written = (out / "results.jsonl").is_file() and '"a"' in (out / "results.jsonl").read_text()
        return written and len(double.generated) == 3 and len(double.generated) - len(double.closed_streams) == 2

    def interrupt() -> None:  # Ctrl-C once "a" is done and two replies wait in the engine
        deadline = time.monotonic() + 60
        while not waiting() and time.monotonic() < deadline:  # never reached: Ctrl-C all the same, and the
            time.sleep(0.01)                                    # test fails on what was kept, never hangs
        os.kill(os.getpid(), signal.SIGINT)

    # Ctrl-C as in a terminal: a shell's background job (`cmd &` without job control) starts with SIGINT
    # ignored, Python then keeps it so, and the eval waited forever on the held replies (seen so).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt, daemon=True).start()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            status = main_eval([str(set_path), "--out", str(out), "--engine", "inprocess", "--model", MODEL])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 130, stderr.getvalue()
    assert "interrupted" in stderr.getvalue()
    rows = results(out)  # every line is a whole JSON object
    assert [(r["id"], r["answer"]) for r in rows] == [("a", "quick.")]
    held = [rid for _, _, rid in double.generated[1:]]
    assert len(held) == 2 and sorted(double.aborted) == sorted(held)  # b and c, aborted; d never sent
    assert double.shutdown_called
    assert "interrupted (Ctrl-C)" in (out / "report.html").read_text()

    again = ScriptedAsyncLLM(["done"])
    monkeypatch.setattr(cli_engine, "build_engine", lambda _ns: scripted_engine(again))
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main_eval([str(set_path), "--out", str(out), "--engine", "inprocess", "--model", MODEL]) == 0
    assert [prompt_of(g[0]) for g in again.generated] == ["b", "c", "d"]  # "a" was done
    assert [(r["id"], r["answer"]) for r in results(out)] == [("a", "quick."), ("b", "done"), ("c", "done"),
                                                              ("d", "done")]


def test_an_engine_run_answers_what_a_preview_only_planned(tmp_path, profile):
    set_path = write_set(tmp_path / "set.jsonl", [{"id": "a", "media": [], "prompt": "?", "expect": ["yes"]}])
    evaluate_now(set_path, tmp_path / "out", profile, None)
    assert results(tmp_path / "out")[0]["answer"] is None
    double = ScriptedAsyncLLM(["yes"])
    run = evaluate_now(set_path, tmp_path / "out", profile, scripted_engine(double))
    assert len(double.generated) == 1 and run.summary.exit_status == 0
    assert results(tmp_path / "out")[0]["checks"] == [{"expect": "yes", "found": True}]
    # and a preview after it keeps the answers (nothing to redo)
    evaluate_now(set_path, tmp_path / "out", profile, None)
    assert results(tmp_path / "out")[0]["answer"] == "yes"


def test_against_a_server_the_budget_follows_its_context_and_a_refused_budget_is_noted(tmp_path, profile):
    from dots3_demo.engine.remote import MM_KWARGS_REFUSED, RemoteEngine
    from tests.engine.test_remote import RefusingServer, _chunk, _serve

    clip = media_factory.make_video(tmp_path / "clip.mp4", seconds=2, width=320, height=240, fps=10)
    set_path = write_set(tmp_path / "set.jsonl", [
        {"id": "clip", "media": [str(clip)], "prompt": "What moves?", "expect": ["bar"],
         "sampling": {"max_tokens": 256}},
        {"id": "text", "media": [], "prompt": "Hello?", "sampling": {"max_tokens": 256}},
    ])
    chunks = [_chunk({"role": "assistant", "content": "A white bar grows."}), _chunk({}, finish="stop"),
              _chunk(usage={"prompt_tokens": 321, "completion_tokens": 5, "total_tokens": 326})]

    async def scenario() -> tuple[EvalRun, RefusingServer]:
        server = RefusingServer(chunks)  # vLLM's server without --trust-request-mm-kwargs
        runner, url = await _serve(server)
        try:
            settings = BatchSettings(set_path=set_path, out_dir=tmp_path / "out", profile=profile)  # no --seq
            return await evaluate(settings, RemoteEngine(url), Progress(io.StringIO())), server
        finally:
            await runner.cleanup()

    run, server = asyncio.run(scenario())
    assert run.default_seq == 4096  # the server's max_model_len (its /v1/models)
    clip_row, text_row = results(tmp_path / "out")
    assert clip_row["plan"][0]["video"]["budget"]["seq"] == 4096
    assert clip_row["answer"] == "A white bar grows." and clip_row["checks"] == [{"expect": "bar", "found": True}]
    assert clip_row["prompt_tokens"]["total"] == 321 and clip_row["prompt_tokens"]["by_modality"] is False
    assert clip_row["notices"] == [MM_KWARGS_REFUSED] and text_row["notices"] == []
    assert "how it was served" in (tmp_path / "out" / "report.html").read_text()
    sent = [body for _, body in server.requests]
    assert sent[0]["mm_processor_kwargs"] == {"seq": 4096, "max_new_tokens": 256, "audio_cap": 1.0,
                                              "k_mode": "eval_ek"}
    assert run.summary.exit_status == 0


def test_results_keep_the_sets_order_when_a_later_item_finishes_first(tmp_path, profile):
    def script(engine_input):
        return ["slow ", "reply"] if prompt_of(engine_input) == "slow" else ["fast"]

    double = ScriptedAsyncLLM(script, hold_at=1)  # the two-step reply waits at its second step
    set_path = write_set(tmp_path / "set.jsonl", [{"id": "slow", "media": [], "prompt": "slow"},
                                                  {"id": "fast", "media": [], "prompt": "fast"}])
    out = tmp_path / "out"

    async def scenario() -> EvalRun:
        settings = BatchSettings(set_path=set_path, out_dir=out, profile=profile, seq=8192)
        task = asyncio.ensure_future(evaluate(settings, scripted_engine(double), Progress(io.StringIO())))
        while not (out / "results.jsonl").exists():
            await asyncio.sleep(0.01)
        assert [r["id"] for r in results(out)] == ["fast"]  # written as it finished, a whole line
        double.released.set()
        return await task

    asyncio.run(scenario())
    assert [(r["id"], r["answer"]) for r in results(out)] == [("slow", "slow reply"), ("fast", "fast")]
