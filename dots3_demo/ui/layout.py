"""The studio's layout: small ``render_*`` functions that place components and return them as records.

Layout only — no events. ``dots3_demo.ui.app`` calls these inside its ``gr.Blocks`` and wires the
records' components in one step (``_setup_events``), the way Gradio's own ``ChatInterface`` keeps
``_render_*`` apart from ``_setup_events``.

Controls that reach a callback together are one record whose field names are the keyword names of
the function that reads them (:class:`BudgetControls` → ``video_settings_from_controls``,
:class:`ChatControls` → ``chat_settings_from_controls``). The record gives the event its input list
(:meth:`Record.components`, in field order) and the callback turns the values back into keywords
(:meth:`Record.named`), so the order lives in one place and a renamed field fails loudly. Gradio's
set-style inputs (``inputs={…}``) would name them too, but a set has no order, and the public
``/chat`` API (Gradio clients, the benchmarks) takes its parameters in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

import gradio as gr

from dots3_demo.core.state import new_session
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.inspection.video import K_MODES
from dots3_demo.tools.forcing import TOOL_CHOICES
from dots3_demo.ui import chat_views, handlers, views

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


# The detail tabs of what the model sees (``render_model_views``): tab id → label.
DETAIL_TABS: dict[str, str] = {"frames": "Frames", "budget": "Budget", "interleave": "Interleave",
                               "images": "Image grid", "mel": "Audio mel"}


@dataclass(frozen=True)
class Glance:
    """What the model sees at a glance (the work layout): the examples (``app`` fills ``examples``), the frame
    strip, the summary, the tab links."""

    examples: gr.Column
    strip: gr.HTML
    summary: gr.HTML
    links: Mapping[str, gr.Button]  # keyed by ``DETAIL_TABS``' ids


@dataclass(frozen=True)
class QuickSampling:
    """The sampling controls a researcher changes most (``ChatControls``' fields of the same names): in the
    work layout, in the first screen (``render_quick_sampling``); in preview, in the Sampling accordion."""

    temperature: gr.Slider
    max_tokens: gr.Number
    seed: gr.Number


@dataclass(frozen=True)
class BudgetControls(Record):
    """The Budget tab's controls; field names = ``video_settings_from_controls``'s parameters."""

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
    """What a chat turn is sent with; field names = ``chat_settings_from_controls``'s parameters.
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
class HeldByReply(Record, Generic[T]):
    """What cannot be used while a reply streams (its last step would undo it): disabled before the reply
    starts (``app.lock_send``), enabled once it ends or is stopped (``app.on_chat_settle``)."""

    send: T
    rate_up: T
    rate_down: T
    rate_note: T
    save_note: T
    regenerate_from: T
    import_file: T


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
    rating: RatingPanel
    record: RecordPanel

    @property
    def held(self) -> HeldByReply[Any]:
        return HeldByReply(send=self.send, rate_up=self.rating.up, rate_down=self.rating.down,
                           rate_note=self.rating.note, save_note=self.rating.save_note,
                           regenerate_from=self.rating.regenerate_from, import_file=self.record.import_file)


@dataclass(frozen=True)
class RatingPanel:
    """Rate a reply (👍/👎 and a note) and generate a reply again from there; ``reply`` picks which."""

    reply: gr.Dropdown  # value: the 0-based reply number (``chat_views.reply_choices``)
    up: gr.Button
    down: gr.Button
    note: gr.Textbox
    save_note: gr.Button
    regenerate_from: gr.Button
    status: gr.Markdown


@dataclass(frozen=True)
class RecordPanel:
    """Export the session (a zip and an HTML report, as downloads) and import one."""

    export: gr.Button
    zip_file: gr.DownloadButton
    report_file: gr.DownloadButton
    import_file: gr.UploadButton
    status: gr.Markdown


@dataclass(frozen=True)
class ToolsPanel:
    example: gr.Dropdown
    status: gr.Markdown
    panel: gr.Dataframe
    result: gr.Textbox
    send: gr.Button
    run: gr.Button


# ---------------------------------------------------------------- render
# The two layouts (``app._render_body``). Preview (no engine): the examples and the inspector first, the chat
# below it. Work (an engine attached): in the first screen of a 1440×900 or 1280×720 window, the upload panels
# with temperature, max tokens and seed under them (``render_quick_sampling``); the examples and what the model
# sees at a glance (``render_glance``); the conversation as tall as the window leaves room for (``style.CSS``:
# its column ends at the window's bottom, the chat takes what the question box, figures and rating row leave),
# with the rating row. The detail tabs below, a click away (the glance's tab links), next to the rest of what a
# turn is sent with.
VIDEO_HEIGHT = {"preview": 210, "work": 136}
CHATBOT_HEIGHT = {"preview": 520, "work": 372}  # work: the least it gets (a short window scrolls)
Mode = Literal["preview", "work"]


def render_uploads(initial: Mapping[str, Any], *, mode: Mode = "preview",
                   summary: gr.HTML | None = None) -> UploadPanels:
    """The upload panels and the status line; the summary under them unless ``summary`` is given (made with
    ``render=False``: the work layout shows it in its glance)."""
    video = gr.Video(label="Video (one per prompt)", sources=["upload"], height=VIDEO_HEIGHT[mode],
                     elem_id="video-input")
    images = gr.File(label="Images (up to 8)", file_count="multiple", file_types=["image"], elem_id="images-input",
                     height=64 if mode == "work" else None)
    with gr.Tabs(elem_id="audio-tabs"):
        with gr.Tab("Audio file", id="audio-file-tab", elem_id="audio-file-tab"):
            audio_file = gr.Audio(sources=["upload"], type="filepath", show_label=False, elem_id="audio-input")
        with gr.Tab("Microphone", id="audio-mic-tab", elem_id="audio-mic-tab"):
            audio_mic = gr.Audio(sources=["microphone"], type="filepath", show_label=False, elem_id="audio-mic")
    status = gr.Markdown("Upload media to see what the model sees.", elem_id="status")
    if summary is None:
        summary = render_summary(initial)
    return UploadPanels(video=video, images=images, audio_file=audio_file, audio_mic=audio_mic, status=status,
                        summary=summary)


def render_summary(initial: Mapping[str, Any], *, render: bool = True) -> gr.HTML:
    """Tokens by modality against the budget (``views.summary_html``)."""
    return gr.HTML(initial["summary"], elem_id="summary", render=render)


def render_frame_strip(initial: Mapping[str, Any], *, visible: bool = True) -> gr.HTML:
    """The frames vLLM samples, small, with their timestamps and tokens (``views.frame_strip_html``)."""
    return gr.HTML(initial["frame_strip"], elem_id="frame-strip", visible=visible)


def render_glance(initial: Mapping[str, Any], summary: gr.HTML) -> Glance:
    """What the model sees, at a glance (work layout): a place for the examples, the frame strip (each frame
    vLLM samples, its timestamp and tokens; with nothing uploaded, what appears here), ``summary`` (tokens by
    modality; made with ``render=False``) and one link per detail tab."""
    with gr.Column(elem_id="glance", elem_classes=["d3-glance"]):
        examples = gr.Column(elem_id="examples-slot")
        strip = render_frame_strip(initial)
        summary.render()
        with gr.Row(elem_id="glance-links", elem_classes=["d3-links"]):
            links = {tab: gr.Button(f"{label} ↓", size="sm", variant="secondary", elem_id=f"goto-{tab}",
                                    min_width=60)
                     for tab, label in DETAIL_TABS.items()}
    return Glance(examples=examples, strip=strip, summary=summary, links=links)


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


def render_model_views(initial: Mapping[str, Any], seq: int, summary: gr.HTML, strip: gr.HTML) -> ModelViews:
    """The tabs that show what the model sees; ``summary`` and the frame ``strip`` (placed by the layout)
    are among their outputs."""
    outputs: dict[str, Any] = {"summary": summary, "frame_strip": strip}
    label = DETAIL_TABS
    with gr.Tabs(elem_id="views") as tabs:
        with gr.Tab(label["frames"], id="frames", elem_id="tab-frames"):
            outputs["frames_info"] = gr.Markdown(initial["frames_info"], elem_id="frames-info")
            outputs["frames_gallery"] = gr.Gallery(
                value=initial["frames_gallery"], label="Sampled frames (as the vision tower gets them)",
                columns=4, height=500, object_fit="contain", allow_preview=True, elem_id="frames-gallery")
        with gr.Tab(label["budget"], id="budget", elem_id="tab-budget"):
            budget, budget_outputs = _render_budget_tab(initial, seq)
            outputs.update(budget_outputs)
        with gr.Tab(label["interleave"], id="interleave", elem_id="tab-interleave"):
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
        with gr.Tab(label["images"], id="images", elem_id="tab-images"):
            outputs["grid_info"] = gr.Markdown(initial["grid_info"], elem_id="grid-info")
            outputs["grid_gallery"] = gr.Gallery(
                value=initial["grid_gallery"], label="Patch and token grids", columns=3, height=440,
                object_fit="contain", elem_id="grid-gallery")
        with gr.Tab(label["mel"], id="mel", elem_id="tab-mel"):
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
    """The chat accordion's body (preview layout): the conversation (left) and what a turn is sent with
    (right)."""
    with gr.Row(equal_height=False):
        with gr.Column(scale=7, min_width=480):
            panel = render_conversation(engine, chat_on=chat_on, engine_status=engine_status,
                                        watch_engine=watch_engine)
        with gr.Column(scale=4, min_width=320):
            controls, tools = render_turn_settings(engine, chat_on=chat_on, max_tokens=max_tokens)
    return panel, controls, tools


def render_conversation(engine: ChatEngine | None, *, chat_on: bool, engine_status: str, watch_engine: bool,
                        mode: Mode = "preview") -> ChatPanel:
    """The engine line, the conversation, the question box and what acts on the replies (rate, regenerate
    from one, export and import the session), the figures line last."""
    session = gr.State(new_session)
    status = gr.Markdown(engine_status, elem_id="engine-status")
    timer = gr.Timer(1.0, active=watch_engine)
    conversation = _render_conversation(engine, chat_on=chat_on, height=CHATBOT_HEIGHT[mode])
    return ChatPanel(session=session, engine_status=status, engine_timer=timer, **conversation)


def _render_conversation(engine: ChatEngine | None, *, chat_on: bool, height: int) -> dict[str, Any]:
    welcome: list[MessageDict | Message] = list(chat_views.chat_welcome(engine))  # the Chatbot's own value type
    chatbot = gr.Chatbot(welcome, show_label=False, height=height, elem_id="chatbot",
                         buttons=["copy"],
                         placeholder="The request the model gets = the media in the upload panels + your message, "
                                     "planned with the Budget tab.")
    figures = gr.Markdown("", elem_id="chat-figures")  # the reply's figures, under it
    with gr.Row(equal_height=True, elem_id="chat-input-row"):
        box = gr.Textbox(
            show_label=False, scale=8, interactive=chat_on, elem_id="chat-input", lines=1,
            placeholder="Ask about the uploads (they go with your next message)"
            if chat_on else "Attach an engine to chat (see above)",
        )
        send = gr.Button("Send", variant="primary", scale=1, min_width=80, interactive=chat_on, elem_id="chat-send")
        stop = gr.Button("Stop", variant="stop", scale=1, min_width=70, elem_id="chat-stop", interactive=chat_on)
    with gr.Row(elem_id="chat-actions", elem_classes=["d3-actions"]):
        regenerate = gr.Button("↻ Regenerate", size="sm", min_width=90, elem_id="chat-regen", interactive=chat_on)
        clear = gr.Button("Clear chat", size="sm", min_width=80, elem_id="chat-clear")
        record_buttons = _render_record_buttons()
    record = RecordPanel(**record_buttons, status=gr.Markdown("", elem_id="record-status"))
    rating = _render_rating(chat_on=chat_on)
    return dict(chatbot=chatbot, box=box, send=send, stop=stop, regenerate=regenerate, clear=clear, figures=figures,
                rating=rating, record=record)


def _render_rating(*, chat_on: bool) -> RatingPanel:
    # 👍/👎 show the picked reply's verdict pressed, and picking a reply marks it in the chat and scrolls to it
    # (``style.PAGE_JS``, from what ``chat_views.rating_md`` says); "↻ from this reply" asks first when it would
    # drop a rating or a note (``style.CONFIRM_REGENERATE_FROM_JS``).
    with gr.Row(equal_height=True, elem_id="rating-row", elem_classes=["d3-rating"]):
        reply = gr.Dropdown(choices=[], value=None, show_label=False, container=False, scale=5, min_width=170,
                            elem_id="rate-reply", info=None, allow_custom_value=False)
        up = gr.Button("👍", size="sm", scale=0, min_width=40, elem_id="rate-up")
        down = gr.Button("👎", size="sm", scale=0, min_width=40, elem_id="rate-down")
        note = gr.Textbox(show_label=False, container=False, scale=3, min_width=110, lines=1, max_lines=1,
                          placeholder="note on this reply", elem_id="rate-note")
        save_note = gr.Button("Save note", size="sm", scale=0, min_width=70, elem_id="rate-save")
        regenerate_from = gr.Button("↻ from this reply", size="sm", scale=0, min_width=110, interactive=chat_on,
                                    elem_id="regen-from")
    status = gr.Markdown("", elem_id="rate-status")
    return RatingPanel(reply=reply, up=up, down=down, note=note, save_note=save_note, regenerate_from=regenerate_from,
                       status=status)


def _render_record_buttons() -> dict[str, Any]:
    export = gr.Button("⇩ Export session", size="sm", min_width=90, elem_id="export-session")
    zip_file = gr.DownloadButton("session .zip", size="sm", visible=False, elem_id="export-zip")
    report_file = gr.DownloadButton("report .html", size="sm", visible=False, elem_id="export-html")
    import_file = gr.UploadButton("⇧ Import session", size="sm", file_types=[".zip"], file_count="single",
                                  min_width=90, elem_id="import-session")
    return dict(export=export, zip_file=zip_file, report_file=report_file, import_file=import_file)


def render_quick_sampling(engine: ChatEngine | None, *, max_tokens: int) -> QuickSampling:
    """Temperature, max tokens and seed (work layout: under the upload panels, in the first screen)."""
    with gr.Group(elem_id="quick-sampling", elem_classes=["d3-quick"]):
        temperature = gr.Slider(0, 2, value=0.7, step=0.05, label="temperature", elem_id="temperature")
        with gr.Row():
            max_tokens_box = gr.Number(max_tokens, label="max tokens", precision=0, minimum=1,
                                       maximum=engine.max_model_len if engine else None, elem_id="max-tokens",
                                       min_width=90)
            seed = gr.Number(-1, label="seed (-1 = random)", precision=0, elem_id="seed", min_width=90)
    return QuickSampling(temperature=temperature, max_tokens=max_tokens_box, seed=seed)


def render_turn_settings(engine: ChatEngine | None, *, chat_on: bool, max_tokens: int,
                         quick: QuickSampling | None = None) -> tuple[ChatControls, ToolsPanel]:
    """What a turn is sent with: the system prompt, sampling, tools; the tool calls and their results.
    ``quick``: temperature, max tokens and seed placed elsewhere (work layout); else they open the Sampling
    accordion."""
    system_prompt = gr.Textbox(DEFAULT_SYSTEM_PROMPT, label="System prompt", lines=2, max_lines=6,
                               elem_id="system-prompt")
    title = "Sampling" if quick is None else "More sampling (top-p, top-k, repetition penalty)"
    with gr.Accordion(title, open=False, elem_id="sampling-accordion"):
        if quick is None:
            quick = render_quick_sampling(engine, max_tokens=max_tokens)
        with gr.Row():
            top_p = gr.Slider(0.05, 1, value=0.95, step=0.01, label="top-p", elem_id="top-p")
            top_k = gr.Number(-1, label="top-k (-1 = off)", precision=0, elem_id="top-k")
        repetition_penalty = gr.Slider(0.8, 2, value=1.0, step=0.01, label="repetition penalty",
                                       elem_id="rep-penalty")
    temperature, max_tokens_box, seed = quick.temperature, quick.max_tokens, quick.seed
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
