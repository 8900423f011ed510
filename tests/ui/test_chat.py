"""The chat's plain functions over an InProcessEngine built on the scripted AsyncLLM double."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import gradio as gr
import pytest

from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import ChatSession, initial_state, new_session
from dots3_demo.engine.inprocess import InProcessEngine
from dots3_demo.inspection import inspect_file
from dots3_demo.tools import EXAMPLE_TOOLS, ToolCall
from dots3_demo.ui import build_interface, chat, chat_views
from dots3_demo.ui.app import chat_concurrency, queue_size
from support.doubles import ScriptedAsyncLLM
from tests.engine.media import make_clip, make_png

SEQ = 32768
TOOL_SCRIPT = ["Let me check. <dots_", "function_call>\n<invoke name=\"get_weather\">\n",
               "<parameter name=\"city\">Paris</parameter>\n</invoke>\n</dots_function_call>",
               " One", " moment", " please."]


class _Args:
    model = "stub"
    mm_processor_cache_gb = 0
    max_model_len = SEQ
    max_num_seqs = 4


def _engine(double: ScriptedAsyncLLM) -> InProcessEngine:
    return InProcessEngine(_Args(), engine_factory=lambda args: double)


def _settings(**kwargs) -> ChatSettings:
    return replace(ChatSettings(min_interval_s=0.0), **kwargs)


def _run(agen) -> list[chat.ChatView]:
    async def main():
        return [view async for view in agen]

    return asyncio.run(main())


def _answer(view: chat.ChatView) -> str:
    """The assistant's plain-text bubbles of the last reply."""
    texts = [m["content"] for m in view.session.display if m["role"] == "assistant" and not m.get("metadata")]
    return texts[-1] if texts else ""


@pytest.fixture
def studio():
    return initial_state(SEQ)


@pytest.fixture(scope="module")
def png(tmp_path_factory):
    return make_png(tmp_path_factory.mktemp("chat") / "photo.png")


def test_text_streams_progressively(studio):
    double = ScriptedAsyncLLM(["Hel", "lo", " wor", "ld", "!"], delay_s=0.005)
    views = _run(chat.send_message(_engine(double), studio, new_session(), "hi", _settings()))
    answers = [_answer(v) for v in views if _answer(v)]
    assert answers[-1] == "Hello world!"
    assert len(answers) >= 5 and all(b.startswith(a) for a, b in zip(answers, answers[1:], strict=False))
    final = views[-1]
    assert final.done and final.session.messages[-1] == {"role": "assistant", "content": "Hello world!"}
    assert final.session.messages[0] == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert "finish `stop`" in final.figures and "TTFT **0.25 s**" in final.figures
    assert "prompt **16**" in final.figures and "output **5** tok" in final.figures
    assert views[0].clear_input and double.aborted == []


def test_coalescing_limits_updates(studio):
    double = ScriptedAsyncLLM([f"w{i} " for i in range(200)])
    views = _run(chat.send_message(_engine(double), studio, new_session(), "hi",
                                   _settings(min_interval_s=10.0)))
    assert len(views) <= 4  # sending…, first text, final (nothing lost)
    assert _answer(views[-1]) == "".join(f"w{i} " for i in range(200))


def test_tool_call_in_panel_while_text_streams(studio):
    double = ScriptedAsyncLLM(TOOL_SCRIPT, delay_s=0.002)
    settings = _settings(tools_json=json.dumps(EXAMPLE_TOOLS))
    views = _run(chat.send_message(_engine(double), studio, new_session(), "weather in Paris?", settings))
    writing = [v for v in views if any(r[2].startswith("writing") for r in v.tool_rows)]
    assert writing and any(m.get("metadata", {}).get("status") == "pending" for m in writing[0].session.display)
    mid = [v for v in views if not v.done and any(r[0] == "get_weather" for r in v.tool_rows)]
    assert mid, "the tool call must reach the panel before the reply ends"
    assert _answer(mid[0]) != _answer(views[-1])  # text was still streaming
    row = mid[0].tool_rows[0]
    assert json.loads(row[1]) == {"city": "Paris"} and row[2] == "waiting for result"
    bubble = next(m for m in mid[0].session.display if m.get("metadata", {}).get("title") == "🛠 get_weather")
    assert bubble["metadata"]["status"] == "done" and '"city": "Paris"' in bubble["content"]
    final = views[-1]
    assert "finish `tool_calls`" in final.figures and "Send tool result" in final.figures
    assert final.session.messages[-1]["tool_calls"][0]["function"]["name"] == "get_weather"
    (call,) = final.session.tools  # the parser's ToolCall, as the engine delta carried it
    assert isinstance(call, ToolCall) and (call.name, call.status) == ("get_weather", "called")
    assert final.session.messages[-1]["tool_calls"] == [call.as_openai()]


def test_stop_cancels_and_aborts(studio):
    async def main():
        double = ScriptedAsyncLLM(["a", "b", "c", "d"], hold_at=2)
        seen = []

        async def consume():
            async for view in chat.send_message(_engine(double), studio, new_session(), "hi", _settings()):
                seen.append(view)

        task = asyncio.create_task(consume())
        await double.reached_hold.wait()
        task.cancel()  # what Gradio's Stop (cancels=[...]) does
        with pytest.raises(asyncio.CancelledError):
            await task
        (_, _, request_id), = double.generated
        assert double.aborted == [request_id]
        assert _answer(seen[-1]) == "ab"  # the session keeps what was shown

    asyncio.run(main())


def test_a_ready_engine_gets_the_request_while_the_sending_step_is_out_and_a_close_there_aborts_it(studio):
    """The first view ("⏳ sending…") is what Gradio post-processes and sends before it asks for the next; the
    request is already with the engine by then (``core.turns.asked_ahead``), and a closed tab at that view aborts it."""

    async def main():
        double = ScriptedAsyncLLM(["a", "b"], hold_at=0)
        engine = _engine(double)
        await engine.start()
        agen = chat.send_message(engine, studio, new_session(), "hi", _settings())
        first = await anext(agen)
        assert first.figures == "⏳ sending…"
        await asyncio.wait_for(double.reached_hold.wait(), 5)  # reached while the caller holds the first view
        (_, _, request_id), = double.generated
        await agen.aclose()  # GeneratorExit at the "sending…" yield (tab closed)
        assert double.aborted == [request_id] and double.closed_streams == [request_id]
        # and the reply, run to its end, is the same as ever
        double.released.set()
        views = [view async for view in chat.send_message(engine, studio, new_session(), "hi", _settings())]
        assert views[0].figures == "⏳ sending…" and _answer(views[-1]) == "ab" and len(double.generated) == 2

    asyncio.run(main())


def test_closed_tab_aborts_at_a_yield(studio):
    async def main():
        double = ScriptedAsyncLLM(["a", "b", "c", "d"])
        agen = chat.send_message(_engine(double), studio, new_session(), "hi", _settings())
        async for view in agen:
            if _answer(view) == "a":
                break
        await agen.aclose()  # GeneratorExit at the yield (tab closed)
        (_, _, request_id), = double.generated
        assert double.aborted == [request_id]

    asyncio.run(main())


def test_video_with_image_is_refused_before_sending(studio, profile, png, tmp_path):
    double = ScriptedAsyncLLM(["Sure."])
    engine = _engine(double)
    first = _run(chat.send_message(engine, studio, new_session(), "hello", _settings()))[-1].session
    clip = make_clip(tmp_path / "v.mp4", seconds=1, audio=False)
    mixed = replace(studio, video_path=str(clip),
                    images=((str(png), inspect_file(str(png), profile, expected="image")),))
    views = _run(chat.send_message(engine, mixed, first, "compare them", _settings()))
    final = views[-1]
    assert final.done and "cannot mix a video" in final.figures
    notice = final.session.display[-1]
    assert notice["metadata"]["title"] == "⚠ Not sent to the model" and "cannot mix a video" in notice["content"]
    assert "Traceback" not in notice["content"]
    assert final.session.display[: len(first.display)] == first.display  # history kept
    assert final.session.messages == first.messages and final.session.media == ()  # nothing was sent
    assert len(double.generated) == 1  # only the first turn reached the engine


def test_tool_result_round_trip(studio):
    def script(engine_input):
        last = engine_input["conversation"][-1]
        return ["It is 21 °C", " in Paris."] if last["role"] == "tool" else TOOL_SCRIPT

    double = ScriptedAsyncLLM(script)
    engine = _engine(double)
    settings = _settings(tools_json=json.dumps(EXAMPLE_TOOLS))
    called = _run(chat.send_message(engine, studio, new_session(), "weather in Paris?", settings))[-1]
    (call,) = chat.pending_calls(called.session)
    views = _run(chat.send_tool_results(engine, studio, called.session, settings, run_examples=True))
    final = views[-1]
    conversation = double.renderer.calls[-1]["conversations"][0]
    assistant, tool = conversation[-2], conversation[-1]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == call.id
    assert tool["role"] == "tool" and tool["tool_call_id"] == call.id
    assert json.loads(tool["content"])["city"] == "Paris"
    assert _answer(final) == "It is 21 °C in Paris."
    assert final.tool_rows[0][2] == "✓ answered" and chat.pending_calls(final.session) == []
    titles = [m.get("metadata", {}).get("title") for m in final.session.display]
    assert "🛠 get_weather" in titles and "↩ get_weather result (sent to the model)" in titles

    assert not any(view.clear_input for view in views)  # the examples answered: the box keeps what it holds

    # a result typed by the user goes the same way, and the box does not get it back (its first view takes it)
    typed = _run(chat.send_tool_results(engine, studio, called.session, settings, result='{"temp": 3}'))
    manual = typed[-1]
    assert typed[0].clear_input
    assert double.renderer.calls[-1]["conversations"][0][-1] == {
        "role": "tool", "tool_call_id": call.id, "content": '{"temp": 3}'}
    assert manual.session.tools == (call.answered('{"temp": 3}'),)
    assert final.session.tools == (call.answered(tool["content"]),)


def test_media_multi_turn_budget_and_system_prompt(studio, profile, png):
    double = ScriptedAsyncLLM(["ok"])
    engine = _engine(double)
    report = inspect_file(str(png), profile, expected="image")
    with_image = replace(studio, images=((str(png), report),),
                         settings=replace(studio.settings, seq=8192, output_reserve=512, audio_cap=0.5, k_mode="whole"))
    settings = _settings(system_prompt="Be brief.", sampling=replace(ChatSettings().sampling, max_tokens=300))
    one = _run(chat.send_message(engine, with_image, new_session(), "what is this?", settings))[-1]
    shown_user = [m for m in one.session.display if m["role"] == "user"]
    assert shown_user[0]["content"]["path"] == str(png) and shown_user[1]["content"] == "what is this?"
    two = _run(chat.send_message(engine, with_image, one.session, "and its colours?", settings))[-1]
    conversation = double.renderer.calls[-1]["conversations"][0]
    assert conversation[0] == {"role": "system", "content": "Be brief."}
    assert [p["type"] for p in conversation[1]["content"]] == ["image_url", "text"]  # image stays in history
    assert conversation[-1]["content"] == [{"type": "text", "text": "and its colours?"}]  # not re-attached
    assert double.renderer.calls[-1]["prompt_extras"]["mm_processor_kwargs"] == {
        "max_new_tokens": 300, "seq": 8192, "output_reserve": 512, "audio_cap": 0.5, "k_mode": "whole"}
    assert len(two.session.media) == 1


def test_reasoning_bubble_pending_then_done(studio):
    double = ScriptedAsyncLLM(["<think>Let me", " think.</think>", "Four."])
    views = _run(chat.send_message(_engine(double), studio, new_session(), "2+2?", _settings()))
    statuses = [m["metadata"]["status"] for v in views for m in v.session.display
                if m.get("metadata", {}).get("title") == "Thinking"]
    assert statuses[0] == "pending" and statuses[-1] == "done"
    assert _answer(views[-1]) == "Four."
    assert views[-1].session.messages[-1] == {"role": "assistant", "content": "Four."}


def test_regenerate_reruns_last_user_turn(studio):
    double = ScriptedAsyncLLM(["first"])
    engine = _engine(double)
    one = _run(chat.send_message(engine, studio, new_session(), "hi", _settings()))[-1]
    double.script = ["second"]
    two = _run(chat.regenerate(engine, studio, one.session, _settings()))[-1]
    assert [m["content"] for m in two.session.display] == ["hi", "second"]
    assert double.renderer.calls[0]["conversations"] == double.renderer.calls[1]["conversations"]


def test_bad_tools_and_failed_engine_are_notices(studio):
    double = ScriptedAsyncLLM(["x"])
    bad = _run(chat.send_message(_engine(double), studio, new_session(), "hi", _settings(tools_json="[{")))[-1]
    assert "tools JSON is not usable" in bad.session.display[-1]["content"] and double.generated == []
    assert bad.session.messages == ()

    def boom(args):
        raise RuntimeError("no GPU here")

    broken = InProcessEngine(_Args(), engine_factory=boom)
    failed = _run(chat.send_message(broken, studio, new_session(), "hi", _settings()))[-1]
    assert "no GPU here" in failed.session.display[-1]["content"]
    assert "engine failed" in chat_views.engine_status(broken)


def test_engine_status_line(studio):
    engine = _engine(ScriptedAsyncLLM(["x"]))
    assert chat_views.engine_status(engine).startswith("○ **engine idle**")
    _run(chat.send_message(engine, studio, new_session(), "hi", _settings()))
    assert chat_views.engine_status(engine).startswith("● **engine ready**")
    assert "up to 4 concurrent" in chat_views.engine_status(engine)


def test_prompt_tokens_match_the_inspector_real_renderer(studio, profile, png):
    """vLLM's real renderer + Dots processor give the engine's counts; the inspector must agree."""
    from tests.engine.real_renderer import build_preview_renderer

    double = ScriptedAsyncLLM(["A gradient."])
    double.renderer = build_preview_renderer({"image": 8, "audio": 4, "video": 1})
    report = inspect_file(str(png), profile, expected="image")
    with_image = replace(studio, images=((str(png), report),))
    final = _run(chat.send_message(_engine(double), with_image, new_session(), "what is this?", _settings()))[-1]
    prompt = double.generated[0][0]
    assert final.done and f"image {report.tokens + 2:,}" in final.figures
    expected = (f"engine: image {report.tokens + 2:,} · inspector: {report.tokens + 2:,} "
                f"({report.tokens:,} + 2 markers) ✓")
    assert expected in final.figures, final.figures
    assert len(prompt["prompt_token_ids"]) > report.tokens


def test_chat_wiring(profile):
    class Six(_Args):
        max_num_seqs = 6

    engine = InProcessEngine(Six(), engine_factory=lambda args: ScriptedAsyncLLM(["x"]))
    demo = build_interface(profile, engine, seq=SEQ)
    fns = {f.api_name: f for f in demo.fns.values() if f.api_name}
    for name in ("chat", "chat_submit", "regenerate", "tool_result", "run_example_tool"):
        assert fns[name].concurrency_limit == engine.capacity == 6
        assert fns[name].concurrency_id == "chat"
    assert chat_concurrency(None) is None and queue_size(engine) == 48 and queue_size(None) == 32
    stop = next(f for f in demo.fns.values() if f.cancels and f.fn is None)
    assert {demo.fns[i].api_name for i in stop.cancels} >= {"chat", "regenerate", "tool_result"}
    by_id = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    assert by_id["chat-send"].interactive is True
    # One gr.State holds the chat session, built per browser session by the factory (never one shared
    # ChatSession), and every chat event both reads and writes it.
    sessions = [b for b in demo.blocks.values() if isinstance(b, gr.State) and b.value is new_session]
    assert len(sessions) == 1
    session_state = sessions[0]
    first, second = session_state.value(), session_state.value()
    assert isinstance(first, ChatSession) and first.session_id != second.session_id
    for name in ("chat", "regenerate", "tool_result", "run_example_tool"):
        assert session_state in fns[name].inputs and session_state in fns[name].outputs, name


def test_views_postprocess_through_chatbot(studio, png, profile):
    """Every history the chat yields is valid Gradio 6 Chatbot data (files, metadata bubbles)."""
    double = ScriptedAsyncLLM(["<think>hm</think>", *TOOL_SCRIPT])
    with_image = replace(studio, images=((str(png), inspect_file(str(png), profile, expected="image")),))
    views = _run(chat.send_message(_engine(double), with_image, new_session(), "weather?",
                                   _settings(tools_json=json.dumps(EXAMPLE_TOOLS))))
    bot = gr.Chatbot()
    panel = gr.Dataframe(headers=chat_views.TOOL_PANEL_COLUMNS)
    for view in views:
        data = bot.postprocess(view.history)
        panel.postprocess(view.tool_rows)
    kinds = [m.content[0].type if isinstance(m.content, list) else None for m in data.root]
    assert data.root[0].role == "user" and "file" in str(kinds[0])


def test_a_replys_folds_are_made_once_and_its_figures_are_what_they_were(studio, monkeypatch):
    """The prompt fold and the request fold do not change while a reply streams: each is made once per reply, not
    at every streamed step (the stopped line of every step holds the request fold), and every step's figures and
    stopped line are what making the folds afresh at each step gives."""
    from dots3_demo.ui import prompt_view

    def stream() -> list[chat.ChatView]:
        double = ScriptedAsyncLLM([f"word{i} " for i in range(12)])
        return _run(chat.send_message(_engine(double), studio, new_session(), "hello", _settings()))

    made = {"fold": 0, "request": 0}
    real_fold, real_request = prompt_view.fold_md, prompt_view.request_md

    def fold(view):
        made["fold"] += view is not None
        return real_fold(view)

    def request(req):
        made["request"] += req is not None
        return real_request(req)

    monkeypatch.setattr(prompt_view, "fold_md", fold)
    monkeypatch.setattr(prompt_view, "request_md", request)
    views = stream()
    assert len(views) >= 12 and views[-1].done
    assert made == {"fold": 1, "request": 1}, made
    assert "the request as sent" in views[-1].figures and "the request as sent" in views[-2].session.figures

    class Afresh(chat_views.Folds):  # what the line was before: both folds made at every step
        def fold_md(self, view):
            return prompt_view.fold_md(view)

        def request_md(self, request):
            return prompt_view.request_md(request)

    monkeypatch.setattr(chat_views, "Folds", Afresh)
    made.update(fold=0, request=0)
    again = stream()
    assert made["request"] >= 12 and made["fold"] >= 12
    assert [v.figures for v in again] == [v.figures for v in views]
    assert [v.session.figures for v in again] == [v.session.figures for v in views]


def test_the_streamed_steps_are_post_processed_as_gradio_would(studio, png, profile):
    """The streaming events run with ``postprocess=False``: ``chat_page.StreamedOutputs`` post-processes each step
    itself. Every step of a reply with an image, reasoning, a tool call and a figures line, through Gradio's
    ``postprocess_data`` of the chat event, gives what Gradio's own post-processing of the same views gives through
    the settle step (whose outputs begin with the same components, post-processed by Gradio): files moved to the
    cache, messages and rows serialized."""
    from gradio.state_holder import SessionState

    from dots3_demo.ui import chat_page, layout

    engine = InProcessEngine(_Args(), engine_factory=lambda args: ScriptedAsyncLLM(["<think>hm</think>", *TOOL_SCRIPT]))
    demo = build_interface(profile, engine, seq=SEQ)
    fns = {f.api_name: f for f in demo.fns.values() if f.api_name}
    event = fns["chat"]
    settle = next(f for f in demo.fns.values() if f.trigger_after == event._id)
    assert event.postprocess is False and settle.postprocess is True
    outputs = layout.ChatStream(*event.outputs)
    shown = chat_page.StreamedOutputs(outputs)
    assert list(settle.outputs[:len(event.outputs)]) == list(event.outputs)
    with_image = replace(studio, images=((str(png), inspect_file(str(png), profile, expected="image")),))
    views = _run(chat.send_message(_engine(ScriptedAsyncLLM(["<think>hm</think>", *TOOL_SCRIPT])), with_image,
                                   new_session(), "weather?", _settings(tools_json=json.dumps(EXAMPLE_TOOLS))))
    rest = [gr.skip()] * (len(settle.outputs) - len(event.outputs))

    async def main():
        for view in views:
            step = layout.ChatStream(chatbot=view.history, session=view.session, taken=True,
                                     tool_panel=view.tool_rows, figures=view.figures, engine_status="ready")
            ours = await demo.postprocess_data(event, list(shown.values(step)), SessionState(demo))
            gradios = await demo.postprocess_data(settle, [*step.components(), *rest], SessionState(demo))
            assert ours == gradios[:len(event.outputs)]
        return ours

    last = asyncio.run(main())
    files = [part for m in last[0] for part in (m["content"] if isinstance(m["content"], list) else [])
             if part.get("type") == "file"]
    assert files and files[0]["file"]["url"]  # the image moved to Gradio's cache, as it would have been
    assert any("get_weather" in str(row) for row in last[3]["data"])
