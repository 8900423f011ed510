"""The Blocks layout and event wiring, checked in-process (no server)."""

from __future__ import annotations

import gradio as gr
import pytest

from dots3_demo.core.settings import chat_settings_from_controls, video_settings_from_controls
from dots3_demo.core.state import initial_state
from dots3_demo.inspection.session import default_workers
from dots3_demo.ui import build_interface, chat_views, handlers
from dots3_demo.ui.app import on_settings, on_video

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


def test_video_event_outputs_postprocess(demo, profile, clip_with_audio, text_as_video):
    """Run the wired callback and push every output through its component's postprocess."""
    fn = _fn(demo, "inspect_video")
    session = handlers.new_inspections(initial_state(SEQ))
    result = fn.fn(session, str(clip_with_audio), SEQ, True, 0, 0, 1.0, "eval_ek")
    assert len(result) == len(fn.outputs)
    new_state = result[0]
    assert new_state.video is not None
    for block, value in zip(fn.outputs, result, strict=True):
        if isinstance(block, gr.State) or isinstance(value, dict) and value.get("__type__"):
            continue
        if isinstance(value, gr.components.Component):
            continue
        block.postprocess(value)
    gallery = next(b for b in fn.outputs if getattr(b, "elem_id", None) == "frames-gallery")
    gallery_value = result[fn.outputs.index(gallery)]
    assert len(gallery.postprocess(gallery_value).root) == len(new_state.video.frames)

    bad = fn.fn(session, str(text_as_video), SEQ, True, 0, 0, 1.0, "eval_ek")
    assert bad[0] is new_state
    assert text_as_video.name in bad[1]
    skipped = [v for v in bad[2:] if isinstance(v, dict) and v.get("__type__") == "update" and len(v) == 1]
    assert len(skipped) == len(bad) - 2  # every view output is gr.skip()


def test_partials_are_bound_to_the_profile(demo, profile):
    assert _fn(demo, "inspect_video").fn.func is on_video
    assert _fn(demo, "set_seq").fn.func is on_settings
    assert _fn(demo, "inspect_video").fn.args == (profile,)


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
def _parameters(fn) -> list[str]:
    import inspect

    return list(inspect.signature(fn).parameters)


def test_budget_callbacks_take_the_budget_controls_by_their_names():
    """Gradio passes an event's inputs in order: the order of ``BudgetControls``' fields, which are also
    the parameter names of the callbacks and of ``video_settings_from_controls``."""
    from dots3_demo.ui.layout import BudgetControls

    names = list(BudgetControls.names())
    assert _parameters(on_video)[3:3 + len(names)] == names  # after profile, state, the video
    assert _parameters(on_settings)[2:2 + len(names)] == names  # after profile, state
    assert _parameters(video_settings_from_controls) == names


def test_chat_controls_are_read_by_name(demo):
    from dots3_demo.core.pacing import StreamPacer
    from dots3_demo.ui.app import _chat_settings
    from dots3_demo.ui.layout import ChatControls, ChatStream

    assert list(ChatControls.names()) == _parameters(chat_settings_from_controls)[:len(ChatControls.names())]
    values = {"system_prompt": "be brief", "tools_json": "", "temperature": 0.3, "top_p": 0.9, "top_k": 5,
              "max_tokens": 77, "seed": 11, "repetition_penalty": 1.1, "tool_choice": "required"}
    settings = _chat_settings(StreamPacer(), tuple(values[name] for name in ChatControls.names()))
    assert (settings.system_prompt, settings.tool_choice) == ("be brief", "required")
    assert (settings.sampling.temperature, settings.sampling.top_k, settings.sampling.max_tokens,
            settings.sampling.seed) == (0.3, 5, 77, 11)
    with pytest.raises(TypeError):
        ChatControls.named(tuple(values.values()) + ("one too many",))
    assert ChatControls.ordered(values) == tuple(values[name] for name in ChatControls.names())
    with pytest.raises(TypeError):
        ChatControls.ordered({**values, "temprature": 0.1})  # a misspelt name fails loudly
    chat_inputs = [getattr(b, "elem_id", None) for b in _fn(demo, "chat").inputs]
    assert chat_inputs[3:] == ["system-prompt", "tools-json", "temperature", "top-p", "top-k", "max-tokens", "seed",
                               "rep-penalty", "tool-choice"]  # the /chat API's order after the message
    for name in ("chat", "regenerate", "tool_result", "run_example_tool"):
        assert len(_fn(demo, name).outputs) == len(ChatStream.names())


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
