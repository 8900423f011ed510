"""``ToolCall``: one shape from the parser to the panel, and the OpenAI dicts it gives the engine."""

from __future__ import annotations

import dataclasses
import json

import pytest
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from dots3_demo.engine.protocol import ToolCall as ProtocolToolCall
from dots3_demo.tools import EXAMPLE_TOOLS, StreamingToolCallParser, ToolCall, ToolCallAccumulator


def _vllm_delta(index: int, *, id: str | None = None, name: str | None = None, arguments: str | None = None):
    from vllm.entrypoints.generate.base.protocol import DeltaFunctionCall, DeltaToolCall

    return DeltaToolCall(index=index, id=id, function=DeltaFunctionCall(name=name, arguments=arguments))


def _openai_delta(index: int, *, id: str | None = None, name: str | None = None, arguments: str | None = None):
    function = {k: v for k, v in (("name", name), ("arguments", arguments)) if v is not None}
    return ChoiceDeltaToolCall.model_validate({"index": index, "id": id, "function": function})


def test_the_protocol_and_the_tools_layer_share_one_type():
    assert ProtocolToolCall is ToolCall


def test_a_call_is_frozen_and_answered_by_a_copy():
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Oslo"}')
    assert (call.status, call.result, call.complete) == ("called", "", True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.status = "answered"  # type: ignore[misc]
    done = call.answered('{"temp": 3}')
    assert (done.status, done.result, done.id, done.arguments) == ("answered", '{"temp": 3}', "call_1", call.arguments)
    assert call.status == "called" and not ToolCall(id="", name="…", status="writing").complete


def test_the_openai_dicts_the_engine_reads():
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Oslo"}')
    assert call.as_openai() == {"id": "call_1", "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    assert call.answered("sunny").result_message() == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


@pytest.mark.parametrize("make", [_vllm_delta, _openai_delta], ids=["vllm-DeltaToolCall", "openai-ChoiceDeltaToolCall"])
def test_deltas_of_vllm_and_of_an_openai_server_assemble_alike(make):
    calls = ToolCallAccumulator()
    assert calls.add(make(0, id="call_a", name="search", arguments="")) is True
    assert calls.add(make(0, arguments='{"query": ')) is False
    assert calls.add(make(1, name="calculator", arguments='{"expression": "1+1"}')) is True
    assert calls.add(make(0, arguments='"q"}')) is False
    assert len(calls) == 2
    assert calls.calls == (
        ToolCall(id="call_a", name="search", arguments='{"query": "q"}', status="writing"),
        ToolCall(id="call_1", name="calculator", arguments='{"expression": "1+1"}', status="writing"),  # no id sent
    )
    calls.settle()
    assert [c.status for c in calls.calls] == ["called", "called"]


def test_a_delta_outside_an_open_block_completes_every_call():
    calls = ToolCallAccumulator()
    calls.add(_vllm_delta(0, id="a", name="search", arguments="{}"))
    calls.add(_vllm_delta(1, id="b", name="search", arguments="{}"), writing=False)
    assert [c.status for c in calls.calls] == ["called", "called"]


def test_a_json_call_is_writing_until_the_generation_ends():
    parser = StreamingToolCallParser(EXAMPLE_TOOLS)
    shown = parser.feed('Sure <dots_function_call>{"name": "calculator", "arguments": {"expression": "6*7"}}')
    assert shown == "Sure " and parser.calls_in_open_block()
    (call,) = parser.calls
    assert (call.name, json.loads(call.arguments), call.status) == ("calculator", {"expression": "6*7"}, "writing")
    parser.feed("</dots_function_call>")
    parser.finish()
    assert [c.status for c in parser.calls] == ["called"]
