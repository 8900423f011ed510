"""The one reply accumulator (issue 20 §1): deltas as the engine adapters send them (text and reasoning are
increments, tool calls all so far, stats the figures so far) → the reply the chat, compare, eval and the smoke
test keep; what counts as a change to show at once."""

from __future__ import annotations

from dots3_demo.budget import VideoSettings
from dots3_demo.core.records import Answer, TurnSetting
from dots3_demo.core.reply import Reply
from dots3_demo.engine.protocol import SamplingSettings, ToolCall, TurnDelta, TurnStats
from dots3_demo.ui import chat_views

SETTING = TurnSetting(video=VideoSettings(), sampling=SamplingSettings(max_tokens=9))
CALL = ToolCall(id="c1", name="lookup", arguments='{"q": "x"}')


def _play(*deltas: TurnDelta) -> list[tuple[Reply, bool]]:
    reply, steps = Reply(Answer(setting=SETTING), "streaming"), []
    for delta in deltas:
        before, reply = reply, reply.add(delta)
        steps.append((reply, reply.structural(before)))
    return steps


def test_deltas_accumulate_into_the_answer_with_its_setting():
    steps = _play(
        TurnDelta("r", reasoning="Let me ", stats=TurnStats(output_tokens=1)),
        TurnDelta("r", reasoning="think.", stats=TurnStats(output_tokens=2)),
        TurnDelta("r", text="It is ", stats=TurnStats(output_tokens=3)),
        TurnDelta("r", text="a ", stats=TurnStats(output_tokens=4)),
        TurnDelta("r", text="cat.", stats=TurnStats(output_tokens=5), notices=("served from cache",)),
        TurnDelta("r", writing_tool_call=True, stats=TurnStats(output_tokens=6)),
        TurnDelta("r", tool_calls=(CALL,), finished=True, finish_reason="tool_calls",
                  stats=TurnStats(output_tokens=9, ttft_s=0.1)),
    )
    reply = steps[-1][0]
    assert (reply.text, reasoning := reply.reasoning) == ("It is a cat.", "Let me think.") and reasoning
    assert reply.tool_calls == (CALL,) and reply.finish_reason == "tool_calls" and reply.state == "done"
    assert reply.finished and not reply.writing_tool_call and reply.notices == ("served from cache",)
    assert reply.stats == TurnStats(output_tokens=9, ttft_s=0.1) and reply.answer.setting == SETTING
    assert reply.engine_message() == {"role": "assistant", "content": "It is a cat.",
                                      "tool_calls": [CALL.as_openai()]}
    # shown at once: the first words, the thinking done, a notice, a call begun, the end; not more of the same
    assert [structural for _, structural in steps] == [True, False, True, False, True, True, True]
    assert steps[5][0].tool_records()[-1].status == "writing" and steps[1][0].engine_message() is None


def test_a_reply_that_ends_early_keeps_what_arrived():
    streaming = _play(TurnDelta("r", text="Half", stats=TurnStats(output_tokens=1)))[-1][0]
    assert not streaming.finished and streaming.finish_reason is None
    failed = streaming.failed("the engine stopped")
    assert failed.finished and failed.state == "failed" and failed.text == "Half"
    assert failed.answer.error == "the engine stopped"
    assert Reply().stats == TurnStats() and Reply().engine_message() is None


def test_the_chat_and_compare_show_a_reply_with_the_same_bubbles():
    reply = _play(TurnDelta("r", reasoning="Hm.", notices=("note",)),
                  TurnDelta("r", tool_calls=(CALL,), writing_tool_call=False))[-1][0]
    bubbles = chat_views.answer_bubbles(reply)
    titles = [b.get("metadata", {}).get("title") for b in bubbles]
    assert titles == ["ℹ How this request was served", "Thinking", "🛠 lookup"]
    assert bubbles[1]["metadata"]["status"] == "done"  # a call came: the thinking is over
    thinking = _play(TurnDelta("r", reasoning="Hm."))[-1][0]
    assert chat_views.answer_bubbles(thinking)[0]["metadata"]["status"] == "pending"
    from dots3_demo.ui import compare as compare_ui

    assert compare_ui.answer_messages(reply) == bubbles
    assert compare_ui.answer_messages(reply.failed("gone"))[-1]["content"] == "gone"
