"""Compare on the page, in-process with real Gradio: the wiring, a preset filling both columns, Preview and Run
through the app's own callbacks with every output post-processed by its component, Stop, the ratings."""

from __future__ import annotations

import asyncio
import contextlib

import gradio as gr
import pytest

from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.state import initial_state
from dots3_demo.inspection import inspect_file
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.video import VideoSettings
from dots3_demo.ui import build_interface, layout
from dots3_demo.ui import compare as compare_ui
from dots3_demo.ui.compare import CompareStream, SettingControls
from dots3_demo.workbench import compare
from support.doubles import ScriptedAsyncLLM, scripted_engine
from support.uploads import Page
from tests.ui.test_wiring import _by_id, _fn
from tests.workbench.stopping import stop_and_wait_for_aborts

SEQ = 4096
CHAT = layout.ChatControls.ordered({
    "system_prompt": "You are terse.", "tools_json": "", "temperature": 0.3, "top_p": 0.9, "top_k": -1,
    "max_tokens": 200, "seed": 5, "repetition_penalty": 1.0, "tool_choice": "auto"})


def every_step() -> StreamPacer:
    return StreamPacer(min_interval_s=0.0, max_updates_per_s=float("inf"), render_chars_per_s=float("inf"))


def side(seq: int, system: str = "Answer as alpha") -> tuple:
    return SettingControls.ordered({
        "seq": seq, "reserve_auto": True, "reserve": 0, "max_new_tokens": 128, "audio_cap": 1.0,
        "k_mode": "eval_ek", "temperature": 0.7, "top_p": 0.95, "top_k": -1, "seed": -1,
        "repetition_penalty": 1.0, "system_prompt": system})


@pytest.fixture(scope="module")
def studio(profile, clip_with_audio):
    outcome = Page(profile, initial_state(SEQ)).video(str(clip_with_audio), VideoSettings(seq=SEQ))
    return outcome.state


@pytest.fixture(scope="module")
def demo(profile):
    return build_interface(profile, None, seq=SEQ)


def _named(outputs) -> dict:
    return dict(zip(CompareStream.names(), outputs, strict=True))


def _postprocessed(demo, named: dict) -> None:
    """Every output value goes through its component, as Gradio does before sending it to the page."""
    ids = {"status": "compare-status", "rounds": "compare-rounds", "diff": "compare-diff",
           "plan_a": "compare-plan-a", "plan_b": "compare-plan-b", "answer_a": "compare-answer-a",
           "answer_b": "compare-answer-b", "figures_a": "compare-figures-a", "figures_b": "compare-figures-b"}
    for name, elem_id in ids.items():
        value = named[name]
        if not isinstance(value, dict) or value.get("__type__") != "update":
            _by_id(demo, elem_id).postprocess(value)


def test_wiring(demo):
    preview, run = _fn(demo, "compare_preview"), _fn(demo, "compare_run")
    assert preview.concurrency_id == "inspect" and run.concurrency_id == "chat"
    assert [b.elem_id for b in run.outputs if getattr(b, "elem_id", None)] == [
        "compare-status", "compare-rounds", "compare-diff", "compare-plan-a", "compare-plan-b", "compare-answer-a",
        "compare-answer-b", "compare-figures-a", "compare-figures-b", "compare-verdict-a", "compare-verdict-b",
        "compare-note-a", "compare-note-b", "compare-preference", "compare-round-pick"]
    names = [b.elem_id for b in run.inputs if getattr(b, "elem_id", None)]
    assert names[:2] == ["compare-question", "compare-preset"]
    assert names[2:] == [f"compare-{k}-{n}" for k in "ab" for n in (
        "seq", "reserve-auto", "reserve", "max-new", "audio-cap", "k-mode", "temperature", "top-p", "top-k", "seed",
        "rep-penalty", "system")]  # in SettingControls' order, which read_setting takes by name
    assert _by_id(demo, "compare-run").interactive is False  # preview mode: Preview works, Run needs an engine
    assert _by_id(demo, "compare-preview").interactive is not False


def test_a_preset_fills_both_columns_from_the_studio(studio):
    status, *values = compare_ui.on_preset(studio, "half", *CHAT)
    n = len(SettingControls.names())
    a, b = (dict(zip(SettingControls.names(), values[i * n:(i + 1) * n], strict=True)) for i in (0, 1))
    assert a["seq"] == SEQ and b["seq"] == SEQ // 2 and "half the budget" in status
    assert a["max_new_tokens"] == b["max_new_tokens"] == 200 and a["temperature"] == b["temperature"] == 0.3
    assert a["system_prompt"] == b["system_prompt"] == "You are terse." and a["seed"] == 5
    read_a, read_b = compare_ui._split(values)  # what a round reads back from the filled controls
    base = compare.base_setting(studio, read_a.setting.sampling, "You are terse.")
    assert (read_a.setting, read_b.setting) == compare.preset("half").make(base)
    status, *values = compare_ui.on_preset(studio, "temperature", *CHAT)
    assert values[SettingControls.names().index("temperature")] == 0.0
    assert values[n + SettingControls.names().index("temperature")] == 0.8
    status, *values = compare_ui.on_preset(studio, None, *CHAT)
    assert status == "" and all(isinstance(v, dict) and v.get("__type__") == "update" for v in values)


def test_preview_through_the_page(demo, profile, studio, clip_with_audio):
    outputs = asyncio.run(compare_ui.on_preview(profile, UploadLimits(), studio, compare.new_compare_session(),
                                                "What happens?", "half", *side(SEQ), *side(SEQ // 2)))
    named = _named(outputs)
    _postprocessed(demo, named)
    for key, seq in (("plan_a", SEQ), ("plan_b", SEQ // 2)):
        report = inspect_file(clip_with_audio, profile, VideoSettings(seq=seq, max_new_tokens=128), expected="video")
        html = named[key]
        assert html.count("<img ") == len(report.frames)
        for frame in report.frames:
            assert f"{frame.timestamp.removeprefix('00:')}<br>≈{frame.tokens} tok" in html
        assert f"<b>{len(report.frames)}</b> frames" in html and f"patch cap <b>{report.solver.patch_cap}</b>" in html
        assert f"<b>{report.solver.effective_fps:.2f}</b> fps" in html
        assert f"image <b>≈{report.image_pad_tokens:,}</b>" in html
        assert f"audio <b>{report.audio_pad_tokens:,}</b>" in html
    assert "B − A" in named["diff"] and named["answer_a"] == named["answer_b"] == []
    session = named["session"]
    assert session.last.preset == "half" and session.last.question == "What happens?"
    assert named["verdict_a"] is None and named["note_b"] == "" and "1 round(s)" in named["rounds"]


def test_a_round_streams_both_columns_through_the_page(demo, profile, studio):
    def script(engine_input):
        word = engine_input["conversation"][0]["content"].split()[-1]
        return [f"<think>{word} thinks</think>", *[f"{word}-{i} " for i in range(1, 4)]]

    async def main():
        double = ScriptedAsyncLLM(script)
        steps = compare_ui.on_run(scripted_engine(double), profile, UploadLimits(), StreamPacer(), studio,
                                  compare.new_compare_session(), "Why?", "", *side(SEQ), *side(SEQ // 2, "as beta"))
        async with contextlib.aclosing(steps) as stream:
            return double, [_named(o) async for o in stream]

    double, steps = asyncio.run(main())
    for step in steps:
        _postprocessed(demo, step)
    assert steps[0]["plan_a"] == steps[0]["plan_b"] == '<div class="d3-cmp-empty">⏳ planning…</div>'
    assert sum(1 for s in steps if isinstance(s["plan_a"], str)) == 2  # "planning", then the plan once
    final = steps[-1]
    assert final["status"] == "✓ Both answered."
    a, b = final["answer_a"], final["answer_b"]
    assert a[0]["metadata"]["title"] == "Thinking" and a[0]["content"] == "alpha thinks"
    assert a[-1]["content"] == "alpha-1 alpha-2 alpha-3 " and b[-1]["content"] == "beta-1 beta-2 beta-3 "
    assert "finish `stop`" in final["figures_a"] and "TTFT **0.25 s**" in final["figures_b"]
    session = final["session"]
    assert session.last.a.answer.reasoning == "alpha thinks" and len(double.generated) == 2
    settled = _named(compare_ui.on_settle(None, session)[:len(CompareStream.names())])
    assert all(isinstance(v, dict) and v.get("__type__") == "update" for v in settled.values())  # nothing stopped


def test_stop_aborts_both_and_settle_says_so(demo, profile, studio):
    async def main():
        double = ScriptedAsyncLLM(lambda i: [f"w{n} " for n in range(50)], hold_at=3)
        seen = []

        async def consume():
            steps = compare_ui.on_run(scripted_engine(double), profile, UploadLimits(), every_step(), studio,
                                      compare.new_compare_session(), "Why?", "", *side(SEQ), *side(SEQ // 2))
            async with contextlib.aclosing(steps) as stream:
                async for outputs in stream:
                    seen.append(_named(outputs))

        task = asyncio.create_task(consume())
        while len(double.generated) < 2 or not seen or "w2" not in str(seen[-1]["answer_b"]) \
                or "w2" not in str(seen[-1]["answer_a"]):
            await asyncio.sleep(0.01)
        aborted = await stop_and_wait_for_aborts(task, double)  # Stop: Gradio cancels the event's task
        return double, seen, aborted

    double, seen, aborted = asyncio.run(main())
    assert sorted(aborted) == sorted(r for _, _, r in double.generated)
    outputs = compare_ui.on_settle(None, seen[-1]["session"])
    settled = _named(outputs[:len(CompareStream.names())])
    _postprocessed(demo, settled)
    assert settled["status"].startswith("⏹ Stopped")
    assert settled["answer_a"][-1]["metadata"]["title"] == "⏹ Stopped" and "w0 w1 w2" in str(settled["answer_a"])
    assert settled["figures_b"].startswith("⏹ stopped · ")
    # one way to say it, as the chat says it: no "finish —" and no "streaming…" after Stop
    assert "finish —" not in settled["figures_b"] and "streaming…" not in settled["figures_b"]
    locks = outputs[len(CompareStream.names()):]
    assert [getattr(u, "interactive", None) for u in locks] == [False, True, True, True, True, True, True, True]


def test_ratings_through_the_page(profile, studio):
    session, status, rounds, _ = compare_ui.on_rate("A", compare.new_compare_session(), None, "up", "good")
    assert session.rounds == () and status == compare.NO_ROUND
    view = asyncio.run(compare.preview_round(profile, studio, session, "q", *compare_ui._split(
        [*side(SEQ), *side(SEQ // 2)])))
    session, status, rounds, _ = compare_ui.on_rate("B", view.session, 0, "down", " blurry ")
    session, _, _, _ = compare_ui.on_rate("A", session, 0, "up", "")
    session, status, rounds, picker = compare_ui.on_prefer(session, 0, "tie")
    assert picker.choices == [("round 1 · q · preview · tie", 0)] and picker.value == 0
    last = session.last
    assert (last.a.verdict, last.b.verdict, last.b.note, last.preference) == ("up", "down", "blurry", "tie")
    assert rounds == "1 round(s) in this session · 1 rated · ratings apply to the round shown"
    assert isinstance(status, dict)  # no message: the status line is left alone


def test_the_reserve_box_follows_seq_while_auto():
    follows = compare_ui.on_reserve(6000, True, 123)
    assert isinstance(follows, gr.Number) and follows.value == 1500 and follows.interactive is False
    assert compare_ui.on_reserve(6000, False, 123).interactive is True
