"""The chat's plain functions over RemoteEngine, against the tests' local OpenAI-style SSE server.

The same chat code drives both adapters; here the tool panel comes from the server's
``tool_calls`` deltas (no DotsToolParser on our side), the tool-result round trip sends a
``tool`` message back, and an abandoned reply closes the HTTP stream.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import initial_state, new_session
from dots3_demo.engine.remote import RemoteEngine
from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui import chat
from tests.engine.test_remote import Server, _chunk, _serve

SEQ = 32768
TOOL_REPLY = [
    _chunk({"role": "assistant", "content": "Checking the "}),
    _chunk({"content": "weather."}),
    _chunk({"tool_calls": [{"index": 0, "id": "call_7", "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]}),
    _chunk({}, finish="tool_calls"),
    _chunk(usage={"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}),
]
ANSWER = [_chunk({"role": "assistant", "content": "It is 4 °C in Oslo."}), _chunk({}, finish="stop"),
          _chunk(usage={"prompt_tokens": 60, "completion_tokens": 8, "total_tokens": 68})]


class _TwoTurnServer(Server):
    """First request: the tool call; every later request: the answer."""

    def __init__(self):
        super().__init__(TOOL_REPLY)

    async def chat(self, request):
        self.chunks = TOOL_REPLY if not self.requests else ANSWER
        return await super().chat(request)


def _settings(**kwargs) -> ChatSettings:
    return replace(ChatSettings(min_interval_s=0.0), **kwargs)


async def _collect(agen) -> list[chat.ChatView]:
    return [view async for view in agen]


def test_remote_tool_call_round_trip_through_the_chat():
    async def main():
        server = _TwoTurnServer()
        runner, url = await _serve(server)
        try:
            engine = RemoteEngine(url)
            settings = _settings(tools_json=json.dumps(EXAMPLE_TOOLS))
            studio = initial_state(SEQ)
            first = await _collect(chat.send_message(engine, studio, new_session(), "weather in Oslo?",
                                                     settings))
            called = first[-1]
            second = await _collect(chat.send_tool_results(engine, studio, called.session, settings,
                                                           result='{"temperature_c": 4}'))
            await engine.shutdown()
            return server, first, called, second
        finally:
            await runner.cleanup()

    server, first, called, second = asyncio.run(main())
    assert called.done and "finish `tool_calls`" in called.figures
    assert called.tool_rows == [["get_weather", '{"city": "Oslo"}', "waiting for result", ""]]
    # while the server's stream is open the call is still being written (one status vocabulary, server to panel)
    assert any(row[:1] + row[2:3] == ["get_weather", "writing…"] for view in first[:-1] for row in view.tool_rows)
    assert called.session.messages[-1]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                                       "arguments": '{"city": "Oslo"}'}
    assert any(m.get("metadata", {}).get("title") == "🛠 get_weather" for m in called.session.display)
    final = second[-1]
    assert final.done and final.tool_rows[0][2] == "✓ answered"
    assert final.session.messages[-1] == {"role": "assistant", "content": "It is 4 °C in Oslo."}
    _, body = server.requests[1]  # what the server got back: the call and its result, in order
    assert body["messages"][-2]["tool_calls"][0]["id"] == "call_7"
    assert body["messages"][-1] == {"role": "tool", "tool_call_id": "call_7", "content": '{"temperature_c": 4}'}
    assert body["tools"] == EXAMPLE_TOOLS


def test_stopping_a_remote_reply_closes_the_stream_and_keeps_the_session():
    async def main():
        server = Server([_chunk({"role": "assistant", "content": "partial"})], hold_after=0)
        runner, url = await _serve(server)
        try:
            engine = RemoteEngine(url)
            agen = chat.send_message(engine, initial_state(SEQ), new_session(), "go", _settings())
            seen = []
            async for view in agen:
                seen.append(view)
                if any(m.get("content") == "partial" for m in view.session.display):
                    break
            await agen.aclose()  # what Stop / a closed tab does to the event's generator
            await asyncio.wait_for(server.disconnected.wait(), 10)
            await engine.shutdown()
            return seen
        finally:
            await runner.cleanup()

    seen = asyncio.run(main())
    assert seen[-1].session.display[0] == {"role": "user", "content": "go"}
    assert not seen[-1].done
