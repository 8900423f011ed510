"""The Blocks layout and event wiring, checked in-process (no server)."""

from __future__ import annotations

import asyncio
import itertools

import gradio as gr
import pytest

from dots3_demo.budget import VideoSettings
from dots3_demo.core.state import initial_state, new_session
from dots3_demo.inspection import inspect_file
from dots3_demo.inspection.session import default_workers
from dots3_demo.ui import build_interface, chat_views, handlers
from dots3_demo.ui.layout import BudgetControls, ChatControls, ChatStream

SEQ = 12288


@pytest.fixture(scope="module")
def demo(profile):
    return build_interface(profile, None, seq=SEQ)


def _fn(demo, name):
    return next(f for f in demo.fns.values() if f.api_name == name)


def _by_id(demo, elem_id):
    return next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def test_event_names_and_concurrency(demo):
    names = {f.api_name for f in demo.fns.values()}
    for name in ("inspect_video", "set_seq", "set_reserve", "set_max_new_tokens", "set_audio_cap",
                 "set_k_mode", "inspect_images", "inspect_audio", "inspect_recording", "segment_audio", "chat"):
        assert name in names
    for name in ("inspect_video", "set_seq", "inspect_images", "inspect_audio"):
        assert _fn(demo, name).concurrency_limit == default_workers()  # no --inspect-workers: one per core
        assert _fn(demo, name).concurrency_id == "inspect"
    assert _fn(demo, "chat").concurrency_limit is None


def test_every_component_has_an_elem_id(demo):
    missing = [
        type(b).__name__ for b in demo.blocks.values()
        if isinstance(b, gr.components.Component) and not isinstance(b, (gr.State, gr.Timer)) and not b.elem_id
    ]  # a State and a Timer are never shown (gr.Timer takes no elem_id)
    assert missing == []
    ids = [b.elem_id for b in demo.blocks.values() if getattr(b, "elem_id", None)]
    assert len(ids) == len(set(ids))
    for elem_id in ("video-input", "images-input", "audio-input", "audio-mic", "status", "summary",
                    "frames-gallery", "seq-slider", "reserve-slider", "reserve-auto", "max-new-slider",
                    "audio-cap-slider", "k-mode", "budget-plot", "cost-plot", "fps-plot", "timeline-plot",
                    "groups-df", "segment-audio", "grid-gallery", "mel-plot", "chatbot", "chat-input", "chat-send"):
        _by_id(demo, elem_id)


def test_defaults_follow_arguments(demo, profile):
    assert _by_id(demo, "seq-slider").value == SEQ
    assert _by_id(demo, "reserve-slider").value == SEQ // 4
    header = _by_id(demo, "d3-header").value
    assert "preview: numbers marked ≈ depend on assumptions" in header
    assert "no engine attached — preview mode" in header
    assert _by_id(demo, "chat-send").interactive is False
    assert _by_id(demo, "chat-input").interactive is False
    assert _by_id(demo, "chatbot").value[0]["content"][0]["text"] == chat_views.ENGINE_HELP


def _last(steps):
    """The outputs an inspection event ends on (it may show the frames before them)."""
    return list(steps)[-1]


def test_the_frames_gallery_gets_each_frame_at_the_size_it_shows_it():
    """A column of the gallery is at most 264 px wide: a 1092×616 frame goes as 546×308 (2 device pixels per
    CSS pixel), each pixel the mean of the four it replaces; a frame already that small goes as it is."""
    from PIL import Image

    from dots3_demo.ui.inspect_page import FRAMES_GALLERY_CELL, GALLERY_PIXEL_RATIO, gallery_picture

    frame = Image.new("RGB", (1092, 616), (10, 200, 30))
    shown = gallery_picture(frame)
    assert shown.size == (546, 308) and max(shown.size) >= GALLERY_PIXEL_RATIO * FRAMES_GALLERY_CELL
    assert shown.getpixel((100, 100)) == (10, 200, 30)
    small = Image.new("RGB", (320, 180))
    assert gallery_picture(small) is small


def test_video_event_outputs_postprocess(demo, profile, clip_with_audio, text_as_video):
    """Run the wired callback and push every output through its component's postprocess: first the frames
    gallery alone as vLLM makes the frames (vLLM's frames so far, in its order, with its timestamps; each picture
    keeps its file from one step to the next), then every output."""
    fn = _fn(demo, "inspect_video")
    gallery = next(b for b in fn.outputs if getattr(b, "elem_id", None) == "frames-gallery")
    at = fn.outputs.index(gallery)
    session = handlers.new_inspections(initial_state(SEQ))
    steps = list(fn.fn(session, str(clip_with_audio), SEQ, True, 0, 0, 1.0, "eval_ek"))
    assert len(steps) >= 2 and all(len(step) == len(fn.outputs) for step in steps)
    *galleries, result = steps
    expected = inspect_file(str(clip_with_audio), profile, VideoSettings(seq=SEQ), expected="video")
    stamps = [f.timestamp for f in expected.frames]
    shown = [gallery.postprocess(step[at]).root for step in galleries]
    for items in shown:
        assert [item.caption.split(" · ")[0] for item in items] == stamps[:len(items)]
    assert len(shown[-1]) == len(stamps) and all(len(items) < len(stamps) for items in shown[:-1])  # all, once
    for before, after in itertools.pairwise(shown):
        assert 0 < len(before) <= len(after)
        assert [item.image.path for item in before] == [item.image.path for item in after[:len(before)]]
    assert all(isinstance(v, dict) and v.get("__type__") == "update" and len(v) == 1
               for step in galleries for i, v in enumerate(step) if i != at)  # the rest waits: gr.skip()
    assert result[at] is galleries[-1][at]  # the same pictures, not encoded twice
    new_state = result[0]
    assert new_state.video is not None
    for block, value in zip(fn.outputs, result, strict=True):
        if isinstance(block, gr.State) or isinstance(value, dict) and value.get("__type__"):
            continue
        if isinstance(value, gr.components.Component):
            continue
        block.postprocess(value)
    assert len(gallery.postprocess(result[at]).root) == len(new_state.video.frames)

    bad = _last(fn.fn(session, str(text_as_video), SEQ, True, 0, 0, 1.0, "eval_ek"))
    assert bad[0] is new_state
    assert text_as_video.name in bad[1]
    skipped = [v for v in bad[2:] if isinstance(v, dict) and v.get("__type__") == "update" and len(v) == 1]
    assert len(skipped) == len(bad) - 2  # every view output is gr.skip()


def test_each_inspection_event_outputs_its_own_panels_views_and_no_other(demo, clip_with_audio, photo, tone,
                                                                        text_as_video):
    """An inspection event's outputs are the state, the status line and its panel's views (``EVENT_KEYS``): Gradio
    rebuilds a component for every ``gr.skip()`` an event yields, so none is spent on another panel's views. Every
    result of the wired callbacks (an upload, a bad file, a clear, a Budget move) fits the event's outputs."""
    shown = {"video": ["reserve-slider", "frames-gallery"], "images": ["grid-info", "grid-gallery"],
             "audio": ["mel-info", "heard-audio"]}
    assert {panel: len(keys) for panel, keys in handlers.EVENT_KEYS.items()} == {k: len(v) for k, v in shown.items()}
    for name, panel in (("inspect_video", "video"), ("set_seq", "video"), ("sync_max_new_tokens", "video"),
                        ("inspect_images", "images"), ("inspect_audio", "audio"), ("inspect_recording", "audio")):
        state, status, *views = _fn(demo, name).outputs
        assert isinstance(state, gr.State) and status is _by_id(demo, "status"), name
        assert [b.elem_id for b in views] == shown[panel], name
    session = handlers.new_inspections(initial_state(SEQ))
    budget = (SEQ, True, 0, 0, 1.0, "eval_ek")
    runs = [("inspect_video", (str(clip_with_audio), *budget)), ("inspect_video", (str(text_as_video), *budget)),
            ("set_seq", budget), ("inspect_video", (None, *budget)), ("set_seq", budget),
            ("inspect_images", ([str(photo)],)), ("inspect_images", ([str(text_as_video)],)),
            ("inspect_images", (None,)),
            ("inspect_audio", (str(tone),)), ("inspect_audio", (str(text_as_video),)), ("inspect_audio", (None,)),
            ("inspect_recording", (str(tone),))]
    for name, args in runs:
        fn = _fn(demo, name)
        result = fn.fn(session, *args)
        steps = list(result) if name in ("inspect_video", "set_seq") else [result]
        assert steps and all(len(step) == len(fn.outputs) for step in steps), (name, args)
        assert steps[-1][1] == handlers.status_md(session), (name, args)  # the status line of every panel


def test_the_wired_video_and_budget_events_inspect_with_the_apps_profile(demo, profile, clip_with_audio):
    """The upload and a Budget control, as wired: the state they leave holds the inspector's report for this app's
    profile and the settings the Budget controls give, read by name (``BudgetControls``' order)."""
    session = handlers.new_inspections(initial_state(SEQ))
    budget = BudgetControls.ordered({"seq": 8192, "reserve_auto": False, "reserve": 1024, "max_new_tokens": 256,
                                     "audio_cap": 0.5, "k_mode": "whole"})
    state = _last(_fn(demo, "inspect_video").fn(session, str(clip_with_audio), *budget))[0]
    settings = VideoSettings(seq=8192, output_reserve=1024, max_new_tokens=256, audio_cap=0.5, k_mode="whole")
    assert state.settings == settings
    expected = inspect_file(str(clip_with_audio), profile, settings, expected="video")
    assert (state.video.prompt_tokens, len(state.video.frames)) == (expected.prompt_tokens, len(expected.frames))
    reserve_auto = BudgetControls.ordered({"seq": 4096, "reserve_auto": True, "reserve": 0, "max_new_tokens": 0,
                                           "audio_cap": 1.0, "k_mode": "eval_ek"})
    again = _last(_fn(demo, "set_seq").fn(session, *reserve_auto))[0]
    assert again.settings == VideoSettings(seq=4096) and again.video.settings == VideoSettings(seq=4096)
    assert again.video.prompt_tokens == inspect_file(str(clip_with_audio), profile, VideoSettings(seq=4096),
                                                     expected="video").prompt_tokens


def test_preview_mode_greys_out_every_chat_control(demo):
    """No engine: nothing in the chat can be pressed (the chat explains how to attach one)."""
    for elem_id in ("chat-input", "chat-send", "chat-stop", "chat-regen", "tool-result", "tool-send", "tool-run"):
        assert _by_id(demo, elem_id).interactive is False, elem_id


def test_with_an_engine_the_chat_controls_are_live(profile):
    from support.doubles import ScriptedAsyncLLM, scripted_engine

    live = build_interface(profile, scripted_engine(ScriptedAsyncLLM(["x"])), seq=SEQ)
    for elem_id in ("chat-input", "chat-send", "chat-stop", "chat-regen", "tool-result", "tool-send", "tool-run"):
        assert _by_id(live, elem_id).interactive is not False, elem_id


# ---------------------------------------------------------------- inputs wired by name
def test_the_wired_chat_sends_the_controls_by_their_names(profile):
    """The /chat event as wired, its controls given in ``ChatControls``' order (the API's, after the message): the
    request vLLM gets carries each control where its name says."""
    from support.doubles import ScriptedAsyncLLM, scripted_engine

    double = ScriptedAsyncLLM(["ok"])
    live = build_interface(profile, scripted_engine(double), seq=SEQ)
    fn = _fn(live, "chat")
    assert [getattr(b, "elem_id", None) for b in fn.inputs][3:] == [
        "system-prompt", "tools-json", "temperature", "top-p", "top-k", "max-tokens", "seed", "rep-penalty",
        "tool-choice"]  # the page's components, in the same order
    values = {"system_prompt": "be brief", "tools_json": "", "temperature": 0.3, "top_p": 0.9, "top_k": 5,
              "max_tokens": 77, "seed": 11, "repetition_penalty": 1.1, "tool_choice": "auto"}

    async def run():
        return [step async for step in fn.fn(initial_state(SEQ), new_session(), "hi", *ChatControls.ordered(values))]

    steps = asyncio.run(run())
    assert len(steps[-1]) == len(ChatStream.names()) == len(fn.outputs)
    (_, params, _), = double.generated
    assert (params.temperature, params.top_p, params.top_k, params.max_tokens, params.seed,
            params.repetition_penalty) == (0.3, 0.9, 5, 77, 11, 1.1)
    assert double.renderer.calls[0]["conversations"][0][0] == {"role": "system", "content": "be brief"}
    with pytest.raises(TypeError):
        ChatControls.named(tuple(values.values()) + ("one too many",))
    with pytest.raises(TypeError):
        ChatControls.ordered({**values, "temprature": 0.1})  # a misspelt name fails loudly
    for name in ("chat", "regenerate", "tool_result", "run_example_tool"):
        assert len(_fn(live, name).outputs) == len(ChatStream.names())


def test_the_work_layout_has_the_same_components_and_the_glance(profile, demo):
    """With an engine the page is laid out for work (uploads, the glance, the chat in one window): the same
    components and ids as the preview layout, plus the glance's links, each selecting its detail tab."""
    from support.doubles import ScriptedAsyncLLM, scripted_engine

    work = build_interface(profile, scripted_engine(ScriptedAsyncLLM(["x"])), seq=SEQ)
    ids = [b.elem_id for b in work.blocks.values() if getattr(b, "elem_id", None)]
    assert len(ids) == len(set(ids))
    assert not [type(b).__name__ for b in work.blocks.values() if isinstance(b, gr.components.Component)
                and not isinstance(b, (gr.State, gr.Timer)) and not b.elem_id]
    preview_ids = {b.elem_id for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    links = {f"goto-{tab}" for tab in ("frames", "budget", "interleave", "images", "mel")}
    assert set(ids) - preview_ids == links | {"glance", "glance-links", "work-row", "uploads-column", "glance-column",
                                              "chat-panel", "detail-row", "turn-settings", "examples-slot"}
    assert preview_ids - set(ids) == {"chat-accordion", "examples-row"}
    # the examples sit in the glance, above what the model sees; temperature, max tokens and seed under the uploads
    def inside(block, container) -> bool:
        return any(child is block or inside(block, child) for child in getattr(container, "children", ()))

    assert inside(_by_id(work, "examples"), _by_id(work, "examples-slot"))
    assert all(inside(_by_id(work, i), _by_id(work, "uploads-column")) for i in ("temperature", "max-tokens", "seed"))
    assert not inside(_by_id(work, "temperature"), _by_id(work, "sampling-accordion"))
    assert inside(_by_id(demo, "temperature"), _by_id(demo, "sampling-accordion"))  # preview: in the accordion
    assert _by_id(demo, "frame-strip").visible is False and _by_id(work, "frame-strip").visible is True
    tabs = _by_id(work, "views")
    for tab in ("budget", "mel"):
        link = next(f for f in work.fns.values() if f.targets and f.targets[0][0] == _by_id(work, f"goto-{tab}")._id)
        assert link.outputs == [tabs] and link.fn().selected == tab
