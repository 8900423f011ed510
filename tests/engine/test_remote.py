"""RemoteEngine against a tiny OpenAI-style SSE server on 127.0.0.1 (aiohttp, tests only)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from dots3_demo.engine import ChatEngine, ToolCall, TurnRequest
from dots3_demo.engine.remote import RemoteEngine
from dots3_demo.tools import EXAMPLE_TOOLS
from tests.engine.media import png_bytes


def _chunk(delta=None, finish=None, usage=None):
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n".encode()


class Server:
    def __init__(self, chunks, hold_after=None):
        self.chunks, self.hold_after = chunks, hold_after
        self.requests, self.disconnected = [], asyncio.Event()

    async def models(self, request):
        return web.json_response({"object": "list", "data": [{"id": "dots3", "object": "model", "created": 0,
                                                              "owned_by": "x", "max_model_len": 4096}]})

    async def chat(self, request):
        self.requests.append(({k.lower(): v for k, v in request.headers.items()}, await request.json()))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for i, chunk in enumerate(self.chunks):
                await response.write(chunk)
                if self.hold_after is not None and i == self.hold_after:
                    for _ in range(200):  # keep-alive comments until the client goes away
                        await asyncio.sleep(0.05)
                        await response.write(b": keep-alive\n\n")
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnected.set()
            raise
        return response


async def _serve(server):
    app = web.Application()
    app.router.add_get("/v1/models", server.models)
    app.router.add_post("/v1/chat/completions", server.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}/v1"


def test_stream_with_reasoning_tool_calls_and_usage(tmp_path):
    chunks = [
        _chunk({"role": "assistant", "content": "<think>hmm"}),
        _chunk({"content": "</think>Let me look."}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "search", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"query\": \"q\"}"}}]}),
        _chunk({}, finish="tool_calls"),
        _chunk(usage={"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51}),
    ]

    async def main():
        server = Server(chunks)
        runner, url = await _serve(server)
        try:
            engine = RemoteEngine(url)
            await engine.start()
            assert engine.model == "dots3" and engine.max_model_len == 4096
            image = tmp_path / "x.png"
            image.write_bytes(png_bytes())
            turn = TurnRequest(session_id="r", tools=EXAMPLE_TOOLS, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": str(image)}}, {"type": "text", "text": "hi"}]}])
            deltas = [d async for d in engine.stream_turn(turn)]
            await engine.shutdown()
        finally:
            await runner.cleanup()
        assert "".join(d.reasoning for d in deltas) == "hmm"
        assert "".join(d.text for d in deltas) == "Let me look."
        final = deltas[-1]
        assert final.finished and final.finish_reason == "tool_calls"
        assert final.tool_calls == (ToolCall(id="call_1", name="search", arguments="{\"query\": \"q\"}",
                                             status="called"),)
        streamed = [c.status for d in deltas[:-1] for c in d.tool_calls]
        assert streamed and set(streamed) == {"writing"}  # until the stream ends
        assert final.stats.prompt.total == 42 and final.stats.output_tokens == 9
        headers, body = server.requests[0]
        assert headers["x-request-id"] == turn.request_id
        assert headers["x-session-id"] == turn.session_id  # a router keeps the conversation on one server
        assert body["tools"] == EXAMPLE_TOOLS and body["stream"] is True
        url_sent = body["messages"][0]["content"][0]["image_url"]["url"]
        assert url_sent.startswith("data:image/png;base64,")
        # No video in the turn: the video budget is not sent (vLLM's server refuses it by default).
        assert "mm_processor_kwargs" not in body

    asyncio.run(main())


def test_the_adapter_is_a_chat_engine():
    engine = RemoteEngine("http://127.0.0.1:9/v1", model="dots3")
    assert isinstance(engine, ChatEngine)  # every hook the UI uses
    assert (engine.model, engine.mm_limits, engine.unfinished_requests()) == ("dots3", None, None)


def test_the_video_budget_goes_only_with_a_video():
    from dots3_demo.budget import VideoSettings

    engine = RemoteEngine("http://127.0.0.1:9/v1")
    text = TurnRequest(session_id="v", messages=[{"role": "user", "content": "x"}], video=VideoSettings(seq=8192))
    video = TurnRequest(session_id="v", video=VideoSettings(seq=8192, k_mode="whole"), messages=[{"role": "user",
        "content": [{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
                    {"type": "text", "text": "x"}]}])
    assert "mm_processor_kwargs" not in engine._request(text).extra
    sent = engine._request(video).extra["mm_processor_kwargs"]
    assert sent == {"max_new_tokens": video.sampling.max_tokens, "seq": 8192, "audio_cap": 1.0, "k_mode": "whole"}
    assert sent == video.mm_processor_kwargs()  # the one shape both adapters send
    assert "mm_processor_kwargs" not in engine._request(video, mm_kwargs=False).extra


class RefusingServer(Server):
    """Answers like vLLM's server without --trust-request-mm-kwargs, or with another 400."""

    def __init__(self, chunks, refuse_everything=False):
        super().__init__(chunks)
        self.refuse_everything = refuse_everything

    async def chat(self, request):
        body = await request.json()
        if self.refuse_everything or "mm_processor_kwargs" in body:
            self.requests.append(({}, body))
            message = ("This model's maximum context length is 512 tokens. However, you requested 1024 output "
                       "tokens" if self.refuse_everything else
                       "Per-request mm_processor_kwargs are disabled by default. Start the server with "
                       "--trust-request-mm-kwargs to allow them.")
            return web.json_response({"error": {"message": message, "type": "BadRequestError", "param": None,
                                                "code": 400}}, status=400)
        return await super().chat(request)


def test_a_server_that_refuses_the_video_budget_plans_with_its_own_and_says_so():
    from dots3_demo.engine.remote import MM_KWARGS_REFUSED

    async def main():
        server = RefusingServer([_chunk({"content": "ok"}), _chunk({}, finish="stop")])
        runner, url = await _serve(server)
        turns = []
        try:
            engine = RemoteEngine(url)
            await engine.start()
            video_url = {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AA"}}
            video = [{"role": "user", "content": [video_url]}]
            for _ in range(2):
                turns.append([d async for d in engine.stream_turn(TurnRequest(session_id="m", messages=video))])
            status_line = engine.status.message  # the status line says so too
            await engine.shutdown()
        finally:
            await runner.cleanup()
        first, second = turns
        assert "".join(d.text for d in first) == "ok" and first[-1].finished
        assert [n for d in first for n in d.notices] == [MM_KWARGS_REFUSED]
        assert [n for d in second for n in d.notices] == []  # said once; the engine remembers
        assert engine.mm_kwargs_refused
        assert "not the Budget tab's (no --trust-request-mm-kwargs)" in status_line
        sent = [body for _, body in server.requests]
        # refused with the kwargs, then sent without them; the second turn goes without at once
        assert ["mm_processor_kwargs" in b for b in sent] == [True, False, False]

    asyncio.run(main())


def test_a_refusal_is_not_an_engine_failure():
    from dots3_demo.engine import RequestRefused

    async def main():
        server = RefusingServer([], refuse_everything=True)
        runner, url = await _serve(server)
        try:
            engine = RemoteEngine(url)
            await engine.start()
            with pytest.raises(RequestRefused) as refused:
                [d async for d in engine.stream_turn(TurnRequest(session_id="m", messages=[
                    {"role": "user", "content": "x"}]))]
            assert engine.status.state == "ready"
            await engine.shutdown()
        finally:
            await runner.cleanup()
        message = str(refused.value)
        assert message.startswith("The server refused this request (HTTP 400): This model's maximum context length")
        assert "lower max tokens" in message and "BadRequestError" not in message

    asyncio.run(main())


def test_abort_closes_the_stream():
    async def main():
        server = Server([_chunk({"content": "a"}), _chunk({"content": "b"})], hold_after=0)
        runner, url = await _serve(server)
        try:
            engine = RemoteEngine(url)
            await engine.start()
            stream = engine.stream_turn(TurnRequest(session_id="r", messages=[{"role": "user", "content": "x"}]))
            first = await stream.__anext__()
            assert first.text == "a"
            await stream.aclose()
            await asyncio.wait_for(server.disconnected.wait(), 10)
            await engine.shutdown()
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_unreachable_endpoint_fails_cleanly():
    from dots3_demo.engine import EngineUnavailable

    async def main():
        engine = RemoteEngine("http://127.0.0.1:9/v1", timeout=2.0)
        with pytest.raises(EngineUnavailable):
            await engine.start()
        assert engine.status.state == "failed"

    asyncio.run(main())


def test_api_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    captured = {}

    async def main():
        server = Server([_chunk({"content": "ok"}), _chunk({}, finish="stop")])
        runner, url = await _serve(server)
        try:
            engine = RemoteEngine(url)
            await engine.start()
            [d async for d in engine.stream_turn(TurnRequest(session_id="k", messages=[
                {"role": "user", "content": "x"}]))]
            await engine.shutdown()
            captured.update(server.requests[0][0])
        finally:
            await runner.cleanup()

    asyncio.run(main())
    assert captured["authorization"] == "Bearer sk-from-env"
