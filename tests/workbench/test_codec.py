"""The strict JSON codec of the session record: dataclasses round-trip; anything else is refused, saying where."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from dots3_demo.core.records import Answer
from dots3_demo.engine.protocol import PromptTokens, ToolCall, TurnStats
from dots3_demo.workbench.codec import DecodeError, from_json, to_json


@dataclass(frozen=True)
class Sample:
    name: str
    count: int
    ratio: float
    flag: bool
    mode: Literal["a", "b"]
    pair: tuple[int, int] | None
    items: tuple[Answer, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    runtime: object = field(default=None, compare=False)  # not recorded


def _sample() -> Sample:
    stats = TurnStats(ttft_s=0.5, tokens_per_s=None, prompt=PromptTokens(total=3, cached=None), mtp={"k": [1, 2]})
    answer = Answer(text="hi", tool_calls=(ToolCall(id="1", name="f", arguments="{}"),), stats=stats)
    return Sample("x", 3, 0.5, True, "b", (1, 2), (answer,), {"nested": {"list": [1, "two"]}}, runtime=object())


def test_round_trip_through_json_text():
    sample = _sample()
    data = json.loads(json.dumps(to_json(sample)))
    assert "runtime" not in data
    assert from_json(Sample, data) == sample  # runtime is compare=False: equal without it
    assert from_json(Sample, {**data, "ratio": 2}).ratio == 2.0  # a whole number is a number


@pytest.mark.parametrize(("change", "message"), [
    ({"count": True}, "document.count: expected a whole number, got True"),
    ({"count": 1.5}, "document.count: expected a whole number, got 1.5"),
    ({"flag": 1}, "document.flag: expected true or false, got 1"),
    ({"mode": "c"}, "document.mode: expected one of 'a', 'b', got 'c'"),
    ({"pair": [1, 2, 3]}, "document.pair: expected 2 items, got 3"),
    ({"pair": "12"}, "document.pair: expected a list, got '12'"),
    ({"extra": [1]}, "document.extra: expected an object, got [1]"),
    ({"items": [{"text": 5}]}, "document.items[0].text: expected a string, got 5"),
    ({"items": [{"stats": {"prompt": {"totl": 1}}}]}, "document.items[0].stats.prompt: unknown field 'totl'"),
    ({"items": [{"tool_calls": [{"id": "1"}]}]}, "document.items[0].tool_calls[0]: missing field 'name'"),
    ({"items": [{"tool_calls": [{"id": "1", "name": "f", "status": "done"}]}]},
     "document.items[0].tool_calls[0].status: expected one of 'writing', 'called', 'answered', got 'done'"),
    ({"runtime": 1}, "document: unknown field 'runtime'"),
])
def test_wrong_shapes_say_where(change, message):
    data = {**to_json(_sample()), **change}
    with pytest.raises(DecodeError) as caught:
        from_json(Sample, data)
    assert str(caught.value) == message


def test_missing_required_field():
    data = to_json(_sample())
    del data["name"]
    with pytest.raises(DecodeError, match=r"^document: missing field 'name'$"):
        from_json(Sample, data)
    with pytest.raises(DecodeError, match="expected an object"):
        from_json(Sample, [])
