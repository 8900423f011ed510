"""The page's shared vocabulary: the records of components every slice renders and wires, and the listener
options they share.

Each feature is a slice with its layout and its events side by side (``inspect_page``, ``chat_page``,
``record_page``, ``compare``), as Gradio's own ``ChatInterface`` keeps ``_render_*`` next to ``_setup_events``:
a slice's ``render_*`` functions return these records, its ``setup_*_events`` wire their components by name, and
``app`` composes the slices into the two layouts.

Controls that reach a callback together are one record whose field names are the keyword names of
the function that reads them (:class:`BudgetControls` → ``video_settings_from_controls``,
:class:`ChatControls` → ``chat_settings_from_controls``). The record gives the event its input list
(:meth:`Record.components`, in field order) and the callback turns the values back into keywords
(:meth:`Record.named`), so the order lives in one place and a renamed field fails loudly. Gradio's
set-style inputs (``inputs={…}``) would name them too, but a set has no order, and the public
``/chat`` API (Gradio clients, the benchmarks) takes its parameters in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypedDict, TypeVar

import gradio as gr
from gradio.blocks import Block

if TYPE_CHECKING:
    pass

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
    taken: T  # the event's ``TakenInput.taken``: True once the turn has taken the text it was sent with
    tool_panel: T
    figures: T
    engine_status: T


@dataclass(frozen=True)
class TakenInput(Record, Generic[T]):
    """A box whose text a streaming event sends (the chat box, the tool-result box), emptied at once.

    The step before the event (``chat_page.take_input``) moves the box's text into ``sent`` (hidden: the event's
    input, and the ``/chat`` API's message) and sets ``taken`` False; the event sets ``taken`` once the turn has
    taken the text (it is in the chat), and the settle step after it puts back in ``box`` a text no turn took (a
    refusal, a Stop before the turn was sent). The box is no output of the streaming event: Gradio rebuilds a
    component for every skipped output of every streamed step."""

    box: T
    sent: T
    taken: T


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
    message: TakenInput[Any]  # the chat box, the text it sent, whether a turn took it
    send: gr.Button
    stop: gr.Button
    regenerate: gr.Button
    clear: gr.Button
    figures: gr.Markdown
    rating: RatingPanel
    record: RecordPanel
    meter: gr.HTML  # the context meter (``ui.context_meter``)

    @property
    def box(self) -> gr.Textbox:
        return self.message.box

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
    tool_result: TakenInput[Any]  # the tool-result box, the text it sent, whether a turn took it
    send: gr.Button
    run: gr.Button

    @property
    def result(self) -> gr.Textbox:
        return self.tool_result.box


# ---------------------------------------------------------------- the two layouts
# The two layouts (``app._render_body``). Preview (no engine): the examples and the inspector first, the chat
# below it. Work (an engine attached): in the first screen of a 1440×900 or 1280×720 window, the upload panels
# with temperature, max tokens and seed under them (``chat_page.render_quick_sampling``); the examples and what
# the model sees at a glance (``inspect_page.render_glance``); the conversation as tall as the window leaves room
# for (``style.CSS``: its column ends at the window's bottom, the chat takes what the question box, figures and
# rating row leave), with the rating row. The detail tabs below, a click away (the glance's tab links), next to
# the rest of what a turn is sent with.
VIDEO_HEIGHT = {"preview": 210, "work": 136}
CHATBOT_HEIGHT = {"preview": 520, "work": 372}  # work: the least it gets (a short window scrolls)
Mode = Literal["preview", "work"]


# ---------------------------------------------------------------- wiring
class Options(TypedDict, total=False):
    """Options several event listeners share (``**``-passed to ``.change``, ``.then``, ``.load`` …), with the
    types Gradio's listeners declare for them."""

    outputs: Block | Sequence[Block] | None
    queue: bool
    show_progress: Literal["full", "minimal", "hidden"]
    api_visibility: Literal["public", "private", "undocumented"]
    js: str | None
    concurrency_limit: int | None | Literal["default"]
    concurrency_id: str | None
    preprocess: bool
    postprocess: bool


class Listen(Options, total=False):
    """``Options`` with the function and its inputs: a whole listener's arguments."""

    fn: Callable[..., Any] | None
    inputs: Block | Sequence[Block] | None
    trigger_mode: Literal["once", "multiple", "always_last"] | None
