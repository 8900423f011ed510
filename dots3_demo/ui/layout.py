"""The studio's layout: small ``render_*`` functions that place components and return them as records.

Layout only — no events. ``dots3_demo.ui.app`` calls these inside its ``gr.Blocks`` and wires the
records' components in one step (``_setup_events``), the way Gradio's own ``ChatInterface`` keeps
``_render_*`` apart from ``_setup_events``.

Controls that reach a callback together are one record whose field names are the keyword names of
the function that reads them (:class:`BudgetControls` → ``handlers.settings_from_controls``,
:class:`ChatControls` → ``chat.settings_from_controls``). The record gives the event its input list
(:meth:`Record.components`, in field order) and the callback turns the values back into keywords
(:meth:`Record.named`), so the order lives in one place and a renamed field fails loudly. Gradio's
set-style inputs (``inputs={…}``) would name them too, but a set has no order, and the public
``/chat`` API (Gradio clients, the benchmarks) takes its parameters in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import gradio as gr

from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.inspection.video import K_MODES
from dots3_demo.tools.forcing import TOOL_CHOICES
from dots3_demo.ui import chat, chat_views, handlers, views
from dots3_demo.ui.state import new_session

if TYPE_CHECKING:
    from gradio.components.chatbot import Message, MessageDict

T = TypeVar("T")


class Record:
    """A frozen dataclass of components (or of their values): one order, named fields."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # set by @dataclass on each record (what fields() reads)

    def components(self) -> list[Any]:
        """The fields' values in field order (an event's inputs or outputs)."""
        return [getattr(self, f.name) for f in fields(self)]

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def named(cls, values: Sequence[Any]) -> dict[str, Any]:
        """Values an event passed in field order, as keywords (fewer values: the rest keep defaults)."""
        if len(values) > len(cls.names()):
            raise TypeError(f"{cls.__name__} takes {len(cls.names())} values, got {len(values)}")
        return dict(zip(cls.names()[:len(values)], values, strict=True))

    @classmethod
    def ordered(cls, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """Values by field name, in field order: what a Gradio client sends to an event taking them."""
        unknown = set(values) - set(cls.names())
        if unknown:
            raise TypeError(f"{cls.__name__} has no {sorted(unknown)}")
        return tuple(values[name] for name in cls.names())


# ---------------------------------------------------------------- records
@dataclass(frozen=True)
class UploadPanels(Record):
    video: gr.Video
    images: gr.File
    audio_file: gr.Audio
    audio_mic: gr.Audio
    status: gr.Markdown
    summary: gr.HTML


@dataclass(frozen=True)
class BudgetControls(Record):
    """The Budget tab's controls; field names = ``handlers.settings_from_controls``'s parameters."""

    seq: gr.Slider
    reserve_auto: gr.Checkbox
    reserve: gr.Slider
    max_new_tokens: gr.Slider
    audio_cap: gr.Slider
    k_mode: gr.Dropdown


@dataclass(frozen=True)
class ModelViews:
    """The "what the model sees" tabs: ``outputs`` keyed by ``handlers.VIEW_KEYS``."""

    tabs: gr.Tabs
    budget: BudgetControls
    outputs: Mapping[str, Any]


@dataclass(frozen=True)
class ChatControls(Record):
    """What a chat turn is sent with; field names = ``chat.settings_from_controls``'s parameters.
    The ``/chat`` API takes them in this order after the message."""

    system_prompt: gr.Textbox
    tools_json: gr.Code
    temperature: gr.Slider
    top_p: gr.Slider
    top_k: gr.Number
    max_tokens: gr.Number
    seed: gr.Number
    repetition_penalty: gr.Slider
    tool_choice: gr.Radio


@dataclass(frozen=True)
class ChatStream(Record, Generic[T]):
    """What a streaming chat event updates, in its output order: the components when wired, the values
    of one step when a callback yields (``ChatStream(...).components()`` is then the output tuple)."""

    chatbot: T
    session: T
    box: T  # the chat box, or the tool-result box for the tool events: cleared once sent
    tool_panel: T
    figures: T
    engine_status: T


@dataclass(frozen=True)
class ChatPanel:
    session: gr.State
    engine_status: gr.Markdown
    engine_timer: gr.Timer
    chatbot: gr.Chatbot
    box: gr.Textbox
    send: gr.Button
    stop: gr.Button
    regenerate: gr.Button
    clear: gr.Button
    figures: gr.Markdown


@dataclass(frozen=True)
class ToolsPanel:
    example: gr.Dropdown
    status: gr.Markdown
    panel: gr.Dataframe
    result: gr.Textbox
    send: gr.Button
    run: gr.Button


# ---------------------------------------------------------------- render
def render_uploads(initial: Mapping[str, Any]) -> UploadPanels:
    video = gr.Video(label="Video (one per prompt)", sources=["upload"], height=210, elem_id="video-input")
    images = gr.File(label="Images (up to 8)", file_count="multiple", file_types=["image"], elem_id="images-input")
    with gr.Tabs(elem_id="audio-tabs"):
        with gr.Tab("Audio file", id="audio-file-tab", elem_id="audio-file-tab"):
            audio_file = gr.Audio(sources=["upload"], type="filepath", show_label=False, elem_id="audio-input")
        with gr.Tab("Microphone", id="audio-mic-tab", elem_id="audio-mic-tab"):
            audio_mic = gr.Audio(sources=["microphone"], type="filepath", show_label=False, elem_id="audio-mic")
    status = gr.Markdown("Upload media to see what the model sees.", elem_id="status")
    summary = gr.HTML(initial["summary"], elem_id="summary")
    return UploadPanels(video=video, images=images, audio_file=audio_file, audio_mic=audio_mic, status=status,
                        summary=summary)


def _plot(value: Any, elem_id: str) -> gr.Plot:
    return gr.Plot(value, show_label=False, format="png", elem_id=elem_id, elem_classes=["d3-plot"])


def _render_budget_tab(initial: Mapping[str, Any], seq: int) -> tuple[BudgetControls, dict[str, Any]]:
    with gr.Row():
        seq_slider = gr.Slider(min(handlers.SEQ_MIN, seq), max(handlers.SEQ_MAX, seq), value=seq,
                               step=handlers.SEQ_STEP, label="seq (context budget)", elem_id="seq-slider", scale=3)
        max_new = gr.Slider(0, handlers.MAX_NEW_TOKENS_MAX, value=0, step=64, label="max new tokens",
                            elem_id="max-new-slider", scale=2)
        k_mode = gr.Dropdown(list(K_MODES), value=K_MODES[0], label="k_mode (grouping)", elem_id="k-mode",
                             scale=1, min_width=120)
    with gr.Row():
        reserve = gr.Slider(0, max(handlers.SEQ_MAX, seq), value=initial["reserve"], step=64,
                            label="output reserve", interactive=False, elem_id="reserve-slider", scale=3)
        reserve_auto = gr.Checkbox(True, label="auto reserve (seq ÷ 4)", elem_id="reserve-auto", scale=1,
                                   min_width=120)
        audio_cap = gr.Slider(0, 1, value=1.0, step=0.05, label="audio cap (share of input)",
                              elem_id="audio-cap-slider", scale=2)
    outputs: dict[str, Any] = {"reserve": reserve, "budget_plot": _plot(initial["budget_plot"], "budget-plot")}
    with gr.Row():
        outputs["cost_plot"] = _plot(initial["cost_plot"], "cost-plot")
        outputs["fps_plot"] = _plot(initial["fps_plot"], "fps-plot")
    with gr.Accordion("Solver inputs and outputs", open=False, elem_id="solver-accordion"):
        outputs["solver_md"] = gr.Markdown(initial["solver_md"], elem_id="solver-md")
    budget = BudgetControls(seq=seq_slider, reserve_auto=reserve_auto, reserve=reserve, max_new_tokens=max_new,
                            audio_cap=audio_cap, k_mode=k_mode)
    return budget, outputs


def render_model_views(initial: Mapping[str, Any], seq: int, summary: gr.HTML) -> ModelViews:
    """The tabs that show what the model sees; ``summary`` (under the uploads) is one of their outputs."""
    outputs: dict[str, Any] = {"summary": summary}
    with gr.Tabs(elem_id="views") as tabs:
        with gr.Tab("Frames", id="frames", elem_id="tab-frames"):
            outputs["frames_info"] = gr.Markdown(initial["frames_info"], elem_id="frames-info")
            outputs["frames_gallery"] = gr.Gallery(
                value=initial["frames_gallery"], label="Sampled frames (as the vision tower gets them)",
                columns=4, height=500, object_fit="contain", allow_preview=True, elem_id="frames-gallery")
        with gr.Tab("Budget", id="budget", elem_id="tab-budget"):
            budget, budget_outputs = _render_budget_tab(initial, seq)
            outputs.update(budget_outputs)
        with gr.Tab("Interleave", id="interleave", elem_id="tab-interleave"):
            outputs["timeline_plot"] = _plot(initial["timeline_plot"], "timeline-plot")
            outputs["stream_html"] = gr.HTML(initial["stream_html"], elem_id="stream-html")
            with gr.Row(equal_height=False):
                outputs["groups_df"] = gr.Dataframe(
                    value=initial["groups_df"], headers=views.GROUP_COLUMNS, interactive=False,
                    label="Groups (click a row to hear its audio)", max_height=260, elem_id="groups-df", scale=3)
                with gr.Column(scale=2, min_width=260):
                    outputs["segment_pick"] = gr.Dropdown(choices=[], value=None, label="Audio segment",
                                                          elem_id="segment-pick")
                    outputs["segment_audio"] = gr.Audio(label="What the model hears (16 kHz mono)",
                                                        interactive=False, elem_id="segment-audio")
        with gr.Tab("Image grid", id="images", elem_id="tab-images"):
            outputs["grid_info"] = gr.Markdown(initial["grid_info"], elem_id="grid-info")
            outputs["grid_gallery"] = gr.Gallery(
                value=initial["grid_gallery"], label="Patch and token grids", columns=3, height=440,
                object_fit="contain", elem_id="grid-gallery")
        with gr.Tab("Audio mel", id="mel", elem_id="tab-mel"):
            outputs["mel_plot"] = _plot(initial["mel_plot"], "mel-plot")
            with gr.Row(equal_height=False):
                outputs["mel_info"] = gr.Markdown(initial["mel_info"], elem_id="mel-info")
                outputs["heard_audio"] = gr.Audio(label="What the model hears (16 kHz mono)", interactive=False,
                                                  elem_id="heard-audio")
    missing = set(handlers.VIEW_KEYS) ^ set(outputs)
    if missing:  # every view the handlers fill has exactly one component
        raise RuntimeError(f"views and components disagree: {sorted(missing)}")
    return ModelViews(tabs=tabs, budget=budget, outputs=outputs)


def render_chat(engine: ChatEngine | None, *, chat_on: bool, engine_status: str, watch_engine: bool,
                max_tokens: int) -> tuple[ChatPanel, ChatControls, ToolsPanel]:
    """The chat accordion's body: the conversation (left) and what a turn is sent with (right)."""
    session = gr.State(new_session)
    status = gr.Markdown(engine_status, elem_id="engine-status")
    timer = gr.Timer(1.0, active=watch_engine)
    with gr.Row(equal_height=False):
        with gr.Column(scale=7, min_width=480):
            conversation = _render_conversation(engine, chat_on=chat_on)
        with gr.Column(scale=4, min_width=320):
            controls, tools = _render_turn_settings(engine, chat_on=chat_on, max_tokens=max_tokens)
    panel = ChatPanel(session=session, engine_status=status, engine_timer=timer, **conversation)
    return panel, controls, tools


def _render_conversation(engine: ChatEngine | None, *, chat_on: bool) -> dict[str, Any]:
    welcome: list[MessageDict | Message] = list(chat_views.chat_welcome(engine))  # the Chatbot's own value type
    chatbot = gr.Chatbot(welcome, show_label=False, height=520, elem_id="chatbot",
                         buttons=["copy"],
                         placeholder="The request the model gets = the media in the upload panels + your message, "
                                     "planned with the Budget tab.")
    with gr.Row(equal_height=True, elem_id="chat-input-row"):
        box = gr.Textbox(
            show_label=False, scale=8, interactive=chat_on, elem_id="chat-input", lines=1,
            placeholder="Ask about the uploads… (new uploads are attached to your next message)"
            if chat_on else "Attach an engine to chat (see above)",
        )
        send = gr.Button("Send", variant="primary", scale=1, min_width=80, interactive=chat_on, elem_id="chat-send")
        stop = gr.Button("Stop", variant="stop", scale=1, min_width=70, elem_id="chat-stop", interactive=chat_on)
    with gr.Row():
        regenerate = gr.Button("↻ Regenerate", size="sm", elem_id="chat-regen", interactive=chat_on)
        clear = gr.Button("Clear chat", size="sm", elem_id="chat-clear")
    figures = gr.Markdown("", elem_id="chat-figures")
    return dict(chatbot=chatbot, box=box, send=send, stop=stop, regenerate=regenerate, clear=clear, figures=figures)


def _render_turn_settings(engine: ChatEngine | None, *, chat_on: bool,
                          max_tokens: int) -> tuple[ChatControls, ToolsPanel]:
    system_prompt = gr.Textbox(chat.DEFAULT_SYSTEM_PROMPT, label="System prompt", lines=2, max_lines=6,
                               elem_id="system-prompt")
    with gr.Accordion("Sampling", open=False, elem_id="sampling-accordion"):
        with gr.Row():
            temperature = gr.Slider(0, 2, value=0.7, step=0.05, label="temperature", elem_id="temperature")
            top_p = gr.Slider(0.05, 1, value=0.95, step=0.01, label="top-p", elem_id="top-p")
        with gr.Row():
            top_k = gr.Number(-1, label="top-k (-1 = off)", precision=0, elem_id="top-k")
            max_tokens_box = gr.Number(max_tokens, label="max tokens", precision=0, minimum=1,
                                       maximum=engine.max_model_len if engine else None, elem_id="max-tokens")
        with gr.Row():
            seed = gr.Number(-1, label="seed (-1 = random)", precision=0, elem_id="seed")
            repetition_penalty = gr.Slider(0.8, 2, value=1.0, step=0.01, label="repetition penalty",
                                           elem_id="rep-penalty")
    with gr.Accordion("Tools", open=True, elem_id="tools-accordion"):
        example = gr.Dropdown(list(chat_views.EXAMPLE_CHOICES), value=None, label="Load example tools",
                              elem_id="tool-examples")
        tools_json = gr.Code("", language="json", label="tools (OpenAI function schemas)", lines=4, max_lines=9,
                             elem_id="tools-json")
        tools_status = gr.Markdown(chat_views.validate_tools_md(""), elem_id="tools-status")
        tool_choice = gr.Radio(list(TOOL_CHOICES), value="auto", label="tool choice",
                               info="required: the reply is one call of these tools, forced by vLLM's structured "
                                    "outputs", elem_id="tool-choice")
    panel = gr.Dataframe(value=[], headers=chat_views.TOOL_PANEL_COLUMNS, interactive=False, wrap=True,
                         label="Tool calls", max_height=220, elem_id="tool-panel",
                         column_widths=["22%", "34%", "20%", "24%"])
    result = gr.Textbox(label="Tool result (answers the first waiting call)", lines=2,
                        placeholder='{"temperature": 21}', elem_id="tool-result", interactive=chat_on)
    with gr.Row():
        send = gr.Button("Send tool result", size="sm", elem_id="tool-send", interactive=chat_on)
        run = gr.Button("Run example tool", size="sm", elem_id="tool-run", interactive=chat_on)
    controls = ChatControls(system_prompt=system_prompt, tools_json=tools_json, temperature=temperature, top_p=top_p,
                            top_k=top_k, max_tokens=max_tokens_box, seed=seed, repetition_penalty=repetition_penalty,
                            tool_choice=tool_choice)
    tools = ToolsPanel(example=example, status=tools_status, panel=panel, result=result, send=send, run=run)
    return controls, tools
