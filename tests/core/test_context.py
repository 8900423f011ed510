"""The context meter (``core.context``) counts what vLLM's renderer and Dots processor build: its count equals the
length of the ``prompt_token_ids`` vLLM's real renderer gives for the same turn (text, an image, an audio clip, a
video, a history with tools and a tool call), and the chat refuses a turn that will not fit before sending it.
The real engine's own refusal point is tested in ``tests/real_engine/test_context_meter_real_engine.py``."""

from __future__ import annotations

import asyncio

import pytest

from dots3_demo.core import context
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import StudioState, initial_state, new_session
from dots3_demo.core.turns import build_turn, panel_media, user_message
from dots3_demo.engine.inprocess import render_turn
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.inspection import inspect_file
from dots3_demo.inspection.video import VideoSettings
from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui import chat_page, context_meter, layout
from support.doubles import ScriptedAsyncLLM, scripted_engine
from support.texts import text_of
from tests.engine.media import make_clip, make_png, make_wav

LIMITS = {"image": 8, "audio": 4, "video": 1}


@pytest.fixture(scope="module")
def renderer():
    from tests.engine.real_renderer import build_preview_renderer

    return build_preview_renderer(LIMITS)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("meter")
    return {"png": make_png(folder / "a.png"), "png2": make_png(folder / "b.png", width=300, height=200),
            "wav": make_wav(folder / "a.wav"), "clip": make_clip(folder / "a.mp4")}


def _engine_prompt(renderer, messages, tools=(), video=None) -> int:
    turn = build_turn(session_id="t", messages=messages, tools=tools, video=video,
                      sampling=SamplingSettings(max_tokens=64))
    engine_input = asyncio.run(render_turn(renderer, turn, LIMITS))
    return len(engine_input["prompt_token_ids"])


def _meter(profile, messages, media, tools=(), max_model_len=32768) -> context.ContextCount:
    turn = build_turn(session_id="t", messages=messages, tools=tools)
    return context.measure(profile.tokenizer, turn.messages, media, tools=turn.tools, max_tokens=64,
                           max_model_len=max_model_len)


def _studio(profile, files, *names) -> StudioState:
    images = tuple((str(files[n]), inspect_file(files[n], profile, expected="image")) for n in names if "png" in n)
    studio = StudioState(images=images)
    if "wav" in names:
        studio = StudioState(images=images, audio_path=str(files["wav"]),
                             audio=inspect_file(files["wav"], profile, expected="audio"))
    return studio


def test_text_turn_counts_as_the_renderer(profile, renderer):
    messages = [{"role": "system", "content": "Be brief."}, user_message("How tall is the Eiffel tower?", [])]
    counted = _meter(profile, messages, [])
    assert counted.prompt == _engine_prompt(renderer, messages) and counted.media == 0


def test_images_and_audio_count_as_the_renderer(profile, renderer, files):
    media = panel_media(_studio(profile, files, "png", "png2", "wav"))  # the inspector's tokens, as the chat sends
    messages = [user_message("What do you see and hear?", media)]
    counted = _meter(profile, messages, media)
    engine = _engine_prompt(renderer, messages)
    assert counted.prompt == engine
    assert counted.media > 300  # the images' and the clip's expansions, not one placeholder each


def test_video_counts_as_the_renderer(profile, renderer, files):
    settings = VideoSettings(seq=32768)
    report = inspect_file(files["clip"], profile, settings, expected="video")
    media = panel_media(StudioState(settings=settings, video_path=str(files["clip"]), video=report))
    messages = [user_message("What happens?", media)]
    assert _meter(profile, messages, media).prompt == _engine_prompt(renderer, messages, video=settings)


def test_history_with_tools_and_a_tool_call_counts_as_the_renderer(profile, renderer, files):
    media = panel_media(_studio(profile, files, "png"))
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        user_message("Look at this.", media),
        {"role": "assistant", "content": "A chart of rain."},
        user_message("And the weather in Paris?", []),
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
        user_message("Thanks. Anything else?", []),
    ]
    counted = _meter(profile, messages, media, tools=EXAMPLE_TOOLS)
    assert counted.prompt == _engine_prompt(renderer, messages, tools=EXAMPLE_TOOLS)


def test_fit_is_the_engines_refusal_point():
    limit = 100
    assert context.ContextCount(99, 99, 0, 1, limit).fit == "fits"
    assert context.ContextCount(99, 99, 0, 2, limit).fit == "reply cut"  # served: the reply ends at the context
    assert context.ContextCount(100, 100, 0, 1, limit).fit == "will not fit"  # vLLM: no room for one token
    assert "will not fit" in context.ContextCount(100, 100, 0, 1, limit).message()


CONTROLS = layout.ChatControls.ordered({
    "system_prompt": "", "tools_json": "", "temperature": 0.8, "top_p": 0.95, "top_k": -1, "max_tokens": 8,
    "seed": -1, "repetition_penalty": 1.0, "tool_choice": "auto"})


def test_a_turn_that_will_not_fit_is_refused_before_sending_and_stays_in_the_box(profile):
    """The chat's Send event with the meter: over the context, nothing reaches the engine, the box is not cleared
    (``gr.skip()``), the conversation is unchanged and the figures line says why; one under, it is sent."""
    import gradio as gr

    limit = 64
    session = new_session()
    studio = initial_state(limit)
    settings = ChatSettings(system_prompt="", sampling=SamplingSettings(max_tokens=8))

    def count(text: str) -> int:
        counted = context.next_turn(profile.tokenizer, studio, session, text, settings, limit)
        assert counted is not None
        return counted.prompt

    over, under = text_of(count, limit), text_of(count, limit - 1)  # exactly at the refusal point, one under

    async def send(text: str):
        double = ScriptedAsyncLLM(["ok"])
        engine = scripted_engine(double, max_model_len=limit)
        meter = context_meter.Meter(profile, engine)
        steps = [dict(zip(layout.ChatStream.names(), out, strict=True))
                 async for out in chat_page.on_chat(engine, _pacer(), studio, session, text, *CONTROLS, meter=meter)]
        return double, steps

    double, steps = asyncio.run(send(over))
    assert double.renderer.calls == []
    assert len(steps) == 1 and isinstance(steps[0]["taken"], type(gr.skip()))
    assert "will not fit" in steps[0]["figures"] and "still in the box" in steps[0]["figures"]
    assert steps[0]["session"].messages == ()
    double, steps = asyncio.run(send(under))
    assert len(double.renderer.calls) == 1 and steps[-1]["session"].messages[-1]["content"] == "ok"


def _pacer():
    from dots3_demo.core.pacing import StreamPacer

    return StreamPacer(min_interval_s=0.0, max_updates_per_s=float("inf"), render_chars_per_s=float("inf"))
