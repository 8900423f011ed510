"""``app.py eval`` into the same ``--out`` again, and what one run says about itself: results keyed so that two
lines are never confused (a duplicate id's line is keyed by its line), a rerun that never replaces an answer
with an error unless asked (and says what it kept and replaced), ``run.json`` with each run's settings, items
without ``expect`` strings that are answered, not passed, ``tags``, eval's own advice for media the engine
takes none of, and stdout that holds the studio's summary only. The engine is the studio's ``InProcessEngine``
over the scripted double of vLLM's ``AsyncLLM``, built where the command builds it; last, an OpenAI-style
server: its model and version named, a prompt count it does not split left unknown, an errored item's checks
not run."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import vllm
from aiohttp import web

from dots3_demo.cli import engine as cli_engine
from dots3_demo.cli.eval import main_eval
from dots3_demo.engine.inprocess import InProcessEngine
from dots3_demo.engine.protocol import DEFAULT_REMOTE_CAPACITY
from dots3_demo.profiles import PREVIEW_PROFILE_DIR
from dots3_demo.workbench.batch import Progress, evaluate
from dots3_demo.workbench.eval_results import BatchSettings
from support import media_factory
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.engine.test_remote import Server, _chunk
from tests.workbench.test_eval_engine import prompt_of, results, write_set

MODEL = str(PREVIEW_PROFILE_DIR)  # what the inspector reads; the engine is the double (build_engine replaced)


def eval_with(monkeypatch: pytest.MonkeyPatch, engine, set_path: Path, out: Path, *flags: str) -> tuple[int, str, str]:
    """``app.py eval SET --out OUT --engine inprocess`` with ``engine`` as the engine it builds: (exit status,
    stdout, stderr)."""
    monkeypatch.setattr(cli_engine, "build_engine", lambda _ns: engine)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = main_eval([str(set_path), "--out", str(out), "--engine", "inprocess", "--model", MODEL, *flags])
    return status, stdout.getvalue(), stderr.getvalue()


def answering(text: str, max_num_seqs: int = 4) -> ScriptedAsyncLLM:
    return ScriptedAsyncLLM(lambda engine_input: [f"{text} to {prompt_of(engine_input)}"], max_num_seqs=max_num_seqs)


QUESTIONS = [{"id": "q1", "media": [], "prompt": "first", "expect": ["answer"]},
             {"id": "q2", "media": [], "prompt": "second", "expect": ["answer"]},
             {"id": "q1", "media": [], "prompt": "third", "expect": ["answer"]}]


def test_a_duplicate_id_is_keyed_by_its_line_and_a_rerun_keeps_the_first_lines_answer(tmp_path, monkeypatch):
    set_path = write_set(tmp_path / "set.jsonl", QUESTIONS)
    out = tmp_path / "out"
    status, first_stdout, _ = eval_with(monkeypatch, scripted_engine(answering("answer")), set_path, out)
    assert status == 2  # line 3's duplicate id is an error
    rows = results(out)
    assert [(r["key"], r["id"], r["line"]) for r in rows] == [("q1", "q1", 1), ("q2", "q2", 2), ("line 3", None, 3)]
    assert rows[0]["answer"] == "answer to first" and rows[2]["error"] == "duplicate id 'q1' (first on line 1)"

    again = answering("again")
    status, stdout, stderr = eval_with(monkeypatch, scripted_engine(again), set_path, out)
    assert status == 2 and again.generated == []  # q1 and q2 were done; line 3 never reaches the engine
    rows = results(out)
    assert [(r["key"], r["error"] is None, r["answer"]) for r in rows] == [
        ("q1", True, "answer to first"), ("q2", True, "answer to second"), ("line 3", False, None)]
    assert "2 of 3 items are done" in stderr
    summary = [line for line in first_stdout.splitlines() if "items ran" in line]
    assert summary == [line for line in stdout.splitlines() if "items ran" in line]  # the same outcome
    assert "2 of these result(s) come from earlier runs" in stdout and "replaced" not in stdout


def test_an_answer_is_kept_over_a_later_error_unless_asked_and_the_terminal_says_which(tmp_path, monkeypatch):
    set_path = write_set(tmp_path / "set.jsonl", QUESTIONS[:2])
    out = tmp_path / "out"
    assert eval_with(monkeypatch, scripted_engine(answering("answer")), set_path, out)[0] == 0
    # line 1 is edited into one that cannot run (a misspelt key): its earlier answer stays
    write_set(set_path, [{**QUESTIONS[0], "expcet": ["x"]}, QUESTIONS[1]])
    status, stdout, _ = eval_with(monkeypatch, scripted_engine(answering("again")), set_path, out)
    assert status == 2  # this run had an error, and says so
    first = results(out)[0]
    assert first["answer"] == "answer to first" and first["error"] is None
    assert first["kept_over"].startswith("unknown key(s) 'expcet'")
    kept = [line for line in stdout.splitlines() if "kept the earlier answer of q1" in line]
    assert len(kept) == 1 and "--replace-answers" in kept[0] and "unknown key(s) 'expcet'" in kept[0]
    assert "this run gave an error for this id, and the earlier answer was kept" in (out / "report.html").read_text()
    runs = json.loads((out / "run.json").read_text())["runs"]
    assert [r["kept"] for r in runs] == [[], ["q1"]]

    status, stdout, _ = eval_with(monkeypatch, scripted_engine(answering("again")), set_path, out,
                                  "--replace-answers")
    first = results(out)[0]
    assert status == 2 and first["answer"] is None and first["error"].startswith("unknown key(s) 'expcet'")
    assert "replaced the earlier result of q1 (line 1): passed → error" in stdout


def test_a_results_file_that_gave_a_duplicate_its_id_keeps_the_answer(tmp_path, monkeypatch):
    """A results.jsonl written before rows were keyed: line 3's duplicate error under the id 'q1'."""
    set_path = write_set(tmp_path / "set.jsonl", QUESTIONS)
    out = tmp_path / "out"
    eval_with(monkeypatch, scripted_engine(answering("answer")), set_path, out)
    rows = results(out)
    rows[2] = {key: value for key, value in rows[2].items() if key not in ("key", "run", "tags", "sampling", "budget",
                                                                         "kept_over")} | {"id": "q1"}
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    again = answering("again")
    eval_with(monkeypatch, scripted_engine(again), set_path, out)
    assert again.generated == []
    assert [(r["key"], r["answer"]) for r in results(out)] == [("q1", "answer to first"), ("q2", "answer to second"),
                                                               ("line 3", None)]


def test_items_without_expect_are_answered_without_checks_not_passed_and_carry_their_tags(tmp_path, monkeypatch):
    set_path = write_set(tmp_path / "set.jsonl", [
        {"id": "a", "media": [], "prompt": "one", "tags": ["smoke", "text"]},
        {"id": "b", "media": [], "prompt": "two"},
        {"id": "c", "media": [], "prompt": "three", "expect": ["answer"], "tags": ["checked"]},
    ])
    out = tmp_path / "out"
    status, stdout, _ = eval_with(monkeypatch, scripted_engine(answering("answer")), set_path, out)
    assert status == 0
    assert ("3 of 3 items ran: 1 passed, 0 failed, 0 errors, 2 answered without checks (no expect strings: not "
            "counted as passed)") in stdout
    assert [r["tags"] for r in results(out)] == [["smoke", "text"], [], ["checked"]]
    report = (out / "report.html").read_text()
    assert "answered without checks" in report and "smoke, text" in report and "answered (no checks)" in report


def test_run_json_and_each_result_record_the_settings_they_ran_with(tmp_path, monkeypatch):
    set_path = write_set(tmp_path / "set.jsonl", [
        {"id": "a", "media": [], "prompt": "one", "sampling": {"temperature": 0, "seed": 7, "max_tokens": 64},
         "seq": 2048},
        {"id": "b", "media": [], "prompt": "two"},
    ])
    out = tmp_path / "out"
    status, stdout, _ = eval_with(monkeypatch, scripted_engine(answering("answer", 3), max_num_seqs=3), set_path, out,
                                  "--audio-cap", "0.5")
    assert status == 0
    (run,) = json.loads((out / "run.json").read_text())["runs"]
    rows = results(out)
    assert {r["run"] for r in rows} == {run["run"]} and run["run"] in stdout
    assert run["engine"]["kind"] == "inprocess" and run["engine"]["model"] == "scripted"
    assert run["engine"]["vllm_version"] == vllm.__version__ and run["engine"]["capacity"] == 3
    assert run["argv"][-2:] == ["--audio-cap", "0.5"] and run["defaults"]["audio_cap"] == 0.5
    assert run["set"] == str(set_path) and run["duration_s"] >= 0 and run["started"].endswith("+00:00")
    assert (run["items"], run["ran"], run["earlier"], run["interrupted"]) == (2, 2, 0, False)
    assert rows[0]["sampling"] == {"temperature": 0.0, "top_p": 0.95, "top_k": -1, "max_tokens": 64, "seed": 7,
                                   "repetition_penalty": 1.0, "structured_outputs": None}
    assert rows[0]["budget"] == {"seq": 2048, "max_new_tokens": 64, "audio_cap": 0.5, "k_mode": "eval_ek"}
    assert rows[1]["sampling"]["max_tokens"] == 1024 and rows[1]["budget"]["seq"] == 32768  # the engine's context
    eval_with(monkeypatch, scripted_engine(answering("answer")), set_path, out)
    runs = json.loads((out / "run.json").read_text())["runs"]
    assert len(runs) == 2 and (runs[1]["ran"], runs[1]["earlier"]) == (0, 2)
    assert {r["run"] for r in results(out)} == {runs[0]["run"]}  # the results still name the run that made them


def test_an_image_on_a_text_only_engine_gets_evals_advice(tmp_path, monkeypatch):
    picture = media_factory.make_image(tmp_path / "photo.png", width=64, height=48)
    args = SimpleNamespace(model="scripted", mm_processor_cache_gb=0, max_model_len=4096, max_num_seqs=2,
                           language_model_only=True)
    engine = InProcessEngine(args, engine_factory=lambda _args: answering("answer"))
    set_path = write_set(tmp_path / "set.jsonl", [{"id": "pic", "media": [str(picture)], "prompt": "?",
                                                   "expect": ["x"]}])
    status, _, _ = eval_with(monkeypatch, engine, set_path, tmp_path / "out")
    (row,) = results(tmp_path / "out")
    assert status == 2 and row["answer"] is None and row["checks"] == [{"expect": "x", "found": None}]
    assert row["error"].startswith("this engine takes no image input")
    assert "drop the item's media, or serve a multimodal model" in row["error"]
    assert "upload panels" not in row["error"] and "new chat" not in row["error"]


def test_stdout_holds_the_studios_summary_and_the_engines_log_lines_go_to_stderr(tmp_path, monkeypatch, capfd):
    def logging_script(engine_input):
        os.write(1, b"INFO 12-04 10:00:00 [core.py:98] a log line of vLLM's engine\n")
        return ["an answer"]

    def build(_ns):
        os.write(1, b"INFO 12-04 10:00:00 [arg_utils.py:1] vLLM builds its engine\n")
        return scripted_engine(ScriptedAsyncLLM(logging_script))

    monkeypatch.setattr(cli_engine, "build_engine", build)
    set_path = write_set(tmp_path / "set.jsonl", [{"id": "a", "media": [], "prompt": "?"}])
    assert main_eval([str(set_path), "--out", str(tmp_path / "out"), "--engine", "inprocess", "--model", MODEL]) == 0
    captured = capfd.readouterr()
    assert "vLLM builds its engine" in captured.err and "a log line of vLLM's engine" in captured.err
    lines = captured.out.splitlines()
    assert lines and all(line.startswith("eval: ") for line in lines), captured.out
    assert "engine: in-process vLLM · scripted · model scripted" in captured.err


class VersionedServer(Server):
    """An OpenAI-style server like vLLM's: ``/version`` beside ``/v1``, and a context-length refusal (HTTP 400)
    for a question that asks for one."""

    async def version(self, _request):
        return web.json_response({"version": "0.32.0+served"})

    async def chat(self, request):
        body = await request.json()
        if "REFUSE" in json.dumps(body["messages"][-1]):
            self.requests.append(({}, body))
            message = "This model's maximum context length is 512 tokens. However, you requested 1024 output tokens"
            return web.json_response({"error": {"message": message, "type": "BadRequestError", "param": None,
                                                "code": 400}}, status=400)
        return await super().chat(request)


def test_against_a_server_the_run_names_its_model_and_version_and_unknowns_stay_unknown(tmp_path, profile):
    from dots3_demo.engine.remote import RemoteEngine

    set_path = write_set(tmp_path / "set.jsonl", [
        {"id": "ok", "media": [], "prompt": "Hello?", "expect": ["bar"]},
        {"id": "refused", "media": [], "prompt": "REFUSE this", "expect": ["bar"]},
    ])
    chunks = [_chunk({"role": "assistant", "content": "A white bar grows."}), _chunk({}, finish="stop"),
              _chunk(usage={"prompt_tokens": 321, "completion_tokens": 5, "total_tokens": 326})]
    said = io.StringIO()

    async def scenario() -> None:
        server = VersionedServer(chunks)
        app = web.Application()
        app.router.add_get("/v1/models", server.models)
        app.router.add_post("/v1/chat/completions", server.chat)
        app.router.add_get("/version", server.version)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
        try:
            settings = BatchSettings(set_path=set_path, out_dir=tmp_path / "out", profile=profile)
            await evaluate(settings, RemoteEngine(url), Progress(said))
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
    terminal = said.getvalue()
    assert "engine: remote · dots3 at http://127.0.0.1:" in terminal and "· vLLM 0.32.0+served" in terminal
    # nothing is unknown (the model named, not "remote · ? at …"); tqdm's meter says "?" before its first rate
    assert not any("?" in line for line in terminal.splitlines() if not line.startswith("eval: ["))
    ok, refused = results(tmp_path / "out")
    # the server reports the total only: the split is unknown (null), not 0
    assert ok["prompt_tokens"]["total"] == 321 and ok["prompt_tokens"]["by_modality"] is False
    assert all(ok["prompt_tokens"][key] is None for key in ("text", "image", "audio", "video"))
    assert ok["checks"] == [{"expect": "bar", "found": True}]
    # an errored item is not checked (None), as in-process; its advice is eval's, not the chat's tabs
    assert refused["answer"] is None and refused["checks"] == [{"expect": "bar", "found": None}]
    assert "maximum context length" in refused["error"] and "Lower the item's max_new_tokens" in refused["error"]
    assert "Budget tab" not in refused["error"] and "Clear the chat" not in refused["error"]
    (run,) = json.loads((tmp_path / "out" / "run.json").read_text())["runs"]
    assert run["engine"]["kind"] == "remote" and run["engine"]["model"] == "dots3"
    assert run["engine"]["vllm_version"] == "0.32.0+served" and run["engine"]["endpoint"].endswith("/v1")
    assert run["engine"]["max_model_len"] == 4096 and run["defaults"]["seq"] == 4096
    assert run["defaults"]["max_concurrency"] == DEFAULT_REMOTE_CAPACITY  # a server does not say its own
