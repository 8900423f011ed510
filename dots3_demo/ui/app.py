"""The Gradio 6 Blocks app: layout and wiring only; the work is in ``handlers`` (plain functions).

Callbacks here are module-level functions bound to the profile/engine with ``functools.partial``;
they translate a handler's result into component updates (``gr.skip()`` for outputs it leaves alone)
and raise the ``gr.Warning`` toast for errors. No globals, no model loading at import.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal, TypedDict

import gradio as gr
import numpy as np
from gradio import processing_utils
from gradio.blocks import Block
from gradio.events import Dependency
from gradio.utils import get_upload_folder
from PIL import Image

from dots3_demo import ffmpeg
from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.settings import ChatSettings, chat_settings_from_controls, video_settings_from_controls
from dots3_demo.core.state import ChatSession, StudioState, clear_session, current_session, initial_state
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.inspection import keep_image_blocks
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.session import default_workers
from dots3_demo.inspection.video import Progress
from dots3_demo.profiles import Profile
from dots3_demo.serving.health import app_kwargs_with_health
from dots3_demo.serving.memory import start_periodic_trim, tune_allocator
from dots3_demo.serving.sessions import DEFAULT_CLOSED_SESSION_TTL_S, SessionReaper
from dots3_demo.ui import chat, chat_views, examples, handlers, layout, session_files, style, views
from dots3_demo.ui import compare as compare_ui
from dots3_demo.ui.handlers import Inspections
from dots3_demo.workbench.compare import CompareSession
from dots3_demo.workbench.record import RecordError

TITLE = "Dots3 NOTE Studio"
GALLERY_JPEG_QUALITY = 90
# Run in the browser before the steps after an inspection: wait (at most 3 s) until the galleries'
# pictures on screen are loaded, so the server draws the figures after the frames are shown, not while
# the browser is fetching them (a gallery in a tab not shown is not waited for). Returns the step's
# inputs unchanged.
AFTER_THE_PICTURES_JS = """async (...inputs) => {
  const frame = () => new Promise(resolve => requestAnimationFrame(() => resolve()));
  await frame(); await frame();  // the event's outputs are in the page
  const loaded = () => [...document.querySelectorAll('#frames-gallery img, #grid-gallery img')]
    .filter(img => img.offsetParent !== null).every(img => img.complete);
  for (let waited = 0; waited < 3000 && !loaded(); waited += 25) {
    await new Promise(resolve => setTimeout(resolve, 25));
  }
  return inputs;
}"""


# ---------------------------------------------------------------- inspection results → outputs
def _jpeg_file(picture: Image.Image, name: str, subsampling: int) -> str:
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, "JPEG", quality=GALLERY_JPEG_QUALITY, subsampling=subsampling)
    return processing_utils.save_bytes_to_cache(buffer.getvalue(), name, get_upload_folder())


def _jpeg_gallery(items: list[tuple[Any, str]], *, subsampling: int = 2) -> list[tuple[Any, str]]:
    """A gallery's pictures as JPEG files in Gradio's cache (quality 90), encoded side by side.

    Handed PIL images, Gradio encodes each as WebP: ~60 ms for one 720p frame, 20 times JPEG's
    3 ms, and for a video's frames most of a visitor's wait from dropping the file to seeing them.
    vLLM gives the vision tower JPEG-decoded frames already (``_jpeg_roundtrip``: quality 85, 4:2:0
    chroma, ``subsampling=2``); drawn grids keep full colour resolution (``subsampling=0``)."""
    names = [f"picture_{index:03d}.jpg" for index in range(len(items))]
    pictures = [picture for picture, _ in items]
    with ThreadPoolExecutor(max_workers=4) as pool:  # PIL's JPEG encoder lets go of the GIL
        files = list(pool.map(lambda p, n: _jpeg_file(p, n, subsampling) if isinstance(p, Image.Image) else p,
                              pictures, names))
    return [(file, caption) for file, (_, caption) in zip(files, items, strict=True)]


def _value_for(key: str, value: Any) -> Any:
    if key == "segment_pick":
        return gr.Dropdown(choices=value["choices"], value=value["value"])
    if key in ("frames_gallery", "grid_gallery"):
        return _jpeg_gallery(value, subsampling=2 if key == "frames_gallery" else 0)
    return value


def _with_note(status: str, engine: ChatEngine | None) -> str:
    """The status line; with uploads, it says so when the engine takes no media (``handlers.media_note``)."""
    note = handlers.media_note(engine) if status != handlers.IDLE_STATUS else ""
    return f"{status}  \n{note}" if note else status


def _emit(update: handlers.PanelUpdate | None, engine: ChatEngine | None = None) -> tuple[Any, ...]:
    """``(state, status, *PANEL_KEYS)`` for an inspection event; every one ``gr.skip()`` when a newer
    upload to the panel superseded it (its result never overwrites the newer one's)."""
    if update is None:
        return (gr.skip(),) * (2 + len(handlers.PANEL_KEYS))
    if update.error:
        gr.Warning(update.error, duration=8)
    updates = [
        _value_for(key, update.views[key]) if key in update.views else gr.skip() for key in handlers.PANEL_KEYS
    ]
    return (update.state, _with_note(update.status, engine), *updates)


def _progress_adapter(progress: gr.Progress) -> Progress:
    def report(fraction: float, text: str) -> None:
        progress(fraction, desc=text)

    return report


# ---------------------------------------------------------------- callbacks (bound with partial)
# ``limits`` is keyword-only and bound with ``partial``: Gradio fills only positional parameters.
# The Budget parameters of on_video/on_settings are named and ordered as layout.BudgetControls' fields
# (Gradio passes an event's inputs in order; tests/ui/test_wiring.py checks the names agree).
# ``inspections`` is the visitor's InspectionSession (a gr.State): see _setup_inspection.
def on_video(profile: Profile, inspections: Inspections, path: str | None, seq: float, reserve_auto: bool,
             reserve: float, max_new_tokens: float | str | None, audio_cap: float, k_mode: str,
             progress: gr.Progress = gr.Progress(), *, limits: UploadLimits = UploadLimits(),
             engine: ChatEngine | None = None) -> tuple[Any, ...]:
    settings = video_settings_from_controls(seq=seq, reserve_auto=reserve_auto, reserve=reserve,
                                               max_new_tokens=max_new_tokens, audio_cap=audio_cap, k_mode=k_mode)
    return _emit(handlers.inspect_video(inspections, profile, path, settings, _progress_adapter(progress),
                                        limits=limits), engine)


def on_settings(profile: Profile, inspections: Inspections, seq: float, reserve_auto: bool, reserve: float,
                max_new_tokens: float | str | None, audio_cap: float, k_mode: str,
                progress: gr.Progress = gr.Progress(), *, limits: UploadLimits = UploadLimits(),
                engine: ChatEngine | None = None) -> tuple[Any, ...]:
    settings = video_settings_from_controls(seq=seq, reserve_auto=reserve_auto, reserve=reserve,
                                               max_new_tokens=max_new_tokens, audio_cap=audio_cap, k_mode=k_mode)
    return _emit(handlers.inspect_settings(inspections, profile, settings, _progress_adapter(progress),
                                           limits=limits), engine)


def on_images(profile: Profile, inspections: Inspections, paths: Sequence[str] | str | None, *,
              limits: UploadLimits = UploadLimits(), engine: ChatEngine | None = None) -> tuple[Any, ...]:
    return _emit(handlers.inspect_images(inspections, profile, paths, limits=limits), engine)


def on_audio_file(profile: Profile, inspections: Inspections, path: str | None, *,
                  limits: UploadLimits = UploadLimits(), engine: ChatEngine | None = None) -> tuple[Any, ...]:
    return _emit(handlers.inspect_audio(inspections, profile, path, "file", limits=limits), engine)


def on_audio_mic(profile: Profile, inspections: Inspections, path: str | None, *,
                 limits: UploadLimits = UploadLimits(), engine: ChatEngine | None = None) -> tuple[Any, ...]:
    return _emit(handlers.inspect_audio(inspections, profile, path, "microphone", limits=limits), engine)


# An upload announced as it arrives (queue=False, before its inspection waits for a worker): the
# panel's job in flight is cancelled at once, and the status line shows the panel busy.
def on_video_arrives(engine: ChatEngine | None, inspections: Inspections, path: str | None) -> str:
    return _with_note(handlers.announce_video(inspections, path), engine)


def on_settings_arrive(engine: ChatEngine | None, inspections: Inspections) -> str:
    return _with_note(handlers.announce_settings(inspections), engine)


def on_images_arrive(engine: ChatEngine | None, inspections: Inspections, paths: Sequence[str] | str | None) -> str:
    return _with_note(handlers.announce_images(inspections, paths), engine)


def on_audio_arrives(source: str, engine: ChatEngine | None, inspections: Inspections, path: str | None) -> str:
    return _with_note(handlers.announce_audio(inspections, path, source), engine)


def on_inspected(profile: Profile, engine: ChatEngine | None, inspections: Inspections) -> tuple[Any, ...]:
    """After each inspection, one at a time app-wide (so the page ends on the latest): the status line
    of every panel and, once per new state, the state the chat reads and the views all panels share."""
    status = _with_note(handlers.status_md(inspections), engine)
    shared = handlers.shared_views(profile, inspections)
    if shared is None:
        return (gr.skip(), status, *(gr.skip() for _ in handlers.SHARED_KEYS))
    state, values = shared
    return (state, status, *(values[key] for key in handlers.SHARED_KEYS))


def on_figures(inspections: Inspections) -> tuple[Any, ...]:
    """After each inspection: the figures of the panels whose state is newer than their figures."""
    drawn = handlers.panel_figures(inspections)
    return tuple(drawn[key] if key in drawn else gr.skip() for key in handlers.FIGURE_KEYS)


def on_segment(state: StudioState, index: int | None) -> tuple[int, np.ndarray] | None:
    return handlers.segment_audio(state, index)


def on_group_select(state: StudioState, evt: gr.SelectData) -> int | dict[str, Any]:
    """A row of the groups table was clicked: pick that group's audio segment."""
    report = state.video
    if report is None or evt.index is None:
        return gr.skip()
    row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
    try:
        audio = report.groups[int(row)].audio
    except (IndexError, ValueError, TypeError):
        return gr.skip()
    return gr.skip() if audio is None else audio


def on_reserve_auto(auto: bool) -> gr.Slider:
    return gr.Slider(interactive=not auto)


async def _relay(engine: ChatEngine | None,
                 replies: AsyncGenerator[chat.ChatView, None]) -> AsyncGenerator[tuple[Any, ...], None]:
    """Chat views → one ``layout.ChatStream`` of values per step, in the event's output order.

    The Send button is not an output of the streaming event: ``lock_send`` disables it before the
    event starts and ``on_chat_settle`` enables it after. Gradio builds a new component object for
    every component update in every streamed step, so leaving it out keeps each step cheap.
    """
    async with contextlib.aclosing(replies) as stream:
        async for view in stream:
            if view.session.stale:  # cleared while it streamed: closing the reply aborts its engine request
                return
            step = layout.ChatStream(chatbot=view.history, session=view.session,
                                     box="" if view.clear_input else gr.skip(), tool_panel=view.tool_rows,
                                     figures=view.figures, engine_status=chat_views.engine_status(engine))
            yield tuple(step.components())


def _held(interactive: bool) -> tuple[Any, ...]:
    """``layout.HeldByReply``'s updates: all enabled or all disabled."""
    return tuple(gr.update(interactive=interactive) for _ in layout.HeldByReply.names())


def lock_send(engine: ChatEngine | None) -> tuple[Any, ...]:
    """Disable Send, and what a reply's last step would undo (rating it, regenerating from a reply,
    importing a session), while a reply streams (runs before the chat event; ``on_chat_settle`` undoes it)."""
    return (gr.skip(),) * len(layout.HeldByReply.names()) if engine is None else _held(False)


def _chat_settings(pacer: StreamPacer, controls: tuple) -> ChatSettings:
    """The values of ``layout.ChatControls``' components, in its field order, as chat settings."""
    return replace(chat_settings_from_controls(**layout.ChatControls.named(controls)), pacer=pacer)


async def on_chat(engine: ChatEngine | None, pacer: StreamPacer, studio: StudioState, session: ChatSession,
                  message: str, *controls: Any) -> AsyncGenerator[tuple[Any, ...], None]:
    session = current_session(session)  # cleared since it was written: the empty chat
    settings = _chat_settings(pacer, controls)
    replies = chat.send_message(engine, studio, session, message, settings)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


async def on_regenerate(engine: ChatEngine | None, pacer: StreamPacer, studio: StudioState,
                        session: ChatSession, _box: str, *controls: Any) -> AsyncGenerator[tuple[Any, ...], None]:
    session = current_session(session)  # cleared since it was written: the empty chat
    settings = _chat_settings(pacer, controls)
    replies = chat.regenerate(engine, studio, session, settings)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


async def on_regenerate_from(engine: ChatEngine | None, pacer: StreamPacer, studio: StudioState,
                             session: ChatSession, reply: Any, *controls: Any) -> AsyncGenerator[tuple[Any, ...], None]:
    session = current_session(session)  # cleared since it was written: the empty chat
    settings = _chat_settings(pacer, controls)
    replies = chat.regenerate_from(engine, studio, session, _reply_number(reply), settings)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


async def on_tool_result(engine: ChatEngine | None, pacer: StreamPacer, studio: StudioState, session: ChatSession,
                         result: str, *controls: Any) -> AsyncGenerator[tuple[Any, ...], None]:
    session = current_session(session)  # cleared since it was written: the empty chat
    settings = _chat_settings(pacer, controls)
    replies = chat.send_tool_results(engine, studio, session, settings, result=result)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


async def on_run_tool(engine: ChatEngine | None, pacer: StreamPacer, studio: StudioState,
                      session: ChatSession, _box: str, *controls: Any) -> AsyncGenerator[tuple[Any, ...], None]:
    session = current_session(session)  # cleared since it was written: the empty chat
    settings = _chat_settings(pacer, controls)
    replies = chat.send_tool_results(engine, studio, session, settings, run_examples=True)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


# What the settle step and Clear update, in their output order.
SETTLE_OUTPUTS = (*layout.ChatStream.names(), *layout.HeldByReply.names(), "reply_picker", "rating_status")
CLEAR_OUTPUTS = ("chatbot", "session", "tool_panel", "figures", "reply_picker", "rating_status", "rating_note")


def on_chat_settle(engine: ChatEngine | None, session: ChatSession) -> tuple[Any, ...]:
    """After a chat event ends or is stopped: re-show the session (its figures line too: a reply stopped
    mid-stream says ``⏹ stopped``, not ``streaming…``) and re-enable Send.

    It outputs to every output of the chat event, so none is left with the red "Error" badge a
    cancelled event sometimes leaves on its outputs (what ChatInterface does for its chatbot). It is the
    last to write the session: a Clear that arrived while the reply streamed wins over the reply's last
    step (``state.ChatClears``).
    """
    if engine is None:
        return (gr.skip(),) * len(SETTLE_OUTPUTS)
    shown = current_session(session)  # a Clear during the reply wins over the reply's last step
    # The session's figures line: a stopped reply's says so (``chat.ChatView``), a cleared chat's is empty.
    step = layout.ChatStream(chatbot=list(shown.display), session=shown, box=gr.skip(),
                             tool_panel=chat_views.tool_rows(shown), figures=shown.figures,
                             engine_status=chat_views.engine_status(engine))
    picker, line = _reply_picker(shown)
    held = dict(zip(layout.HeldByReply.names(), _held(True), strict=True))
    held["rate_note"] = gr.update(interactive=True, value=_note_of(shown, _picked(shown)))  # the latest reply's note
    return (*step.components(), *held.values(), picker, line)


def _note_of(session: ChatSession, reply: Any) -> str:
    number = _reply_number(reply)
    return next((r.note for r in session.ratings if r.reply == number), "")


def _picked(session: ChatSession, reply: int | None = None) -> int | None:
    """The reply the picker shows: ``reply`` when the conversation has it, else the latest (None: no reply)."""
    count = session.reply_count
    return reply if reply is not None and 0 <= reply < count else (count - 1 if count else None)


def _reply_picker(session: ChatSession, reply: int | None = None) -> tuple[gr.Dropdown, str]:
    """The reply picker on ``reply`` (None: the latest reply) and what the rating line says of it."""
    picked = _picked(session, reply)
    return gr.Dropdown(choices=chat_views.reply_choices(session), value=picked), chat_views.rating_md(session, picked)


def on_clear(session: ChatSession) -> tuple[Any, ...]:
    """The empty conversation: the chat, the tool panel, the figures and the rating controls emptied."""
    fresh = clear_session(session)
    return ([], fresh, [], "", *_reply_picker(fresh), "")


# ---------------------------------------------------------------- rating (queue=False: they change one session)
def _reply_number(reply: Any) -> int | None:
    """The reply picker's value as a reply number (an API call may send text or nothing)."""
    try:
        return int(reply)
    except (TypeError, ValueError):
        return None


def _rating_change(session: ChatSession, reply: Any, change: Callable[[ChatSession, int | None], ChatSession]
                   ) -> tuple[Any, ...]:
    """``(session, picker, rating line)`` after ``change``; a reply the conversation does not have leaves the
    session as it was and says so on the rating line."""
    number = _reply_number(reply)
    try:
        rated = change(session, number)
    except ValueError as exc:
        return gr.skip(), gr.skip(), f"⚠ {views.esc(exc)}"
    return (rated, *_reply_picker(rated, number))


def on_rate_up(session: ChatSession, reply: Any) -> tuple[Any, ...]:
    return _rating_change(session, reply, lambda s, n: chat.rate_reply(s, n, "up"))


def on_rate_down(session: ChatSession, reply: Any) -> tuple[Any, ...]:
    return _rating_change(session, reply, lambda s, n: chat.rate_reply(s, n, "down"))


def on_rate_note(session: ChatSession, reply: Any, note: str | None) -> tuple[Any, ...]:
    return _rating_change(session, reply, lambda s, n: chat.note_reply(s, n, note))


def on_pick_reply(session: ChatSession, reply: Any) -> tuple[str, str]:
    """A reply was picked: its note in the note box, its rating on the rating line."""
    return _note_of(session, reply), chat_views.rating_md(session, _reply_number(reply))


# ---------------------------------------------------------------- the session as files (export, import)
def on_export(profile: Profile, engine: ChatEngine | None, studio: StudioState, session: ChatSession,
              compared: CompareSession, *controls: Any) -> tuple[Any, Any, str]:
    """The session's zip and HTML report (the chat and the compare rounds) as two download buttons; a session
    that cannot be exported (a file of it is gone) says why and offers nothing."""
    settings = chat_settings_from_controls(**layout.ChatControls.named(controls))
    try:
        exported = session_files.export_session(profile, engine, studio, session, settings,
                                                compare=compared.rounds)
    except RecordError as exc:
        gr.Warning(str(exc), duration=8)
        hidden = gr.DownloadButton(visible=False)
        return hidden, hidden, f"⚠ Not exported: {views.esc(exc)}"
    line = (f"Exported {exported.replies} repl{'y' if exported.replies == 1 else 'ies'} and {exported.media} media "
            f"file{'' if exported.media == 1 else 's'}: download the session (`{views.esc(exported.zip_path.name)}`, "
            "to import later) and its report (one HTML page that opens offline).")
    return (gr.DownloadButton(f"⇩ {exported.zip_path.suffix[1:]}", value=str(exported.zip_path), visible=True),
            gr.DownloadButton("⇩ report", value=str(exported.html_path), visible=True), line)


# What an import updates, in its output order (``_setup_record`` wires the components by these names).
IMPORT_OUTPUTS = ("session", "chatbot", "tool_panel", "figures", "reply_picker", "rating_status", "rating_note",
                  "record_status", *(f"compare_{n}" for n in compare_ui.RoundShown.names()),
                  "video", "images", "audio_file", "audio_mic", *layout.BudgetControls.names(),
                  *layout.ChatControls.names())


def on_import(profile: Profile, session: ChatSession, compared: CompareSession, path: str | None) -> tuple[Any, ...]:
    """A session zip into this browser session: the conversation and its ratings, the settings, the files the
    panels held (the panels' change events inspect them again), and compare's rounds (its columns show the last
    one again). A bad file: one line, nothing changed."""
    if not path:
        return tuple(gr.skip() for _ in IMPORT_OUTPUTS)
    try:
        imported = session_files.import_session(path, session)
    except RecordError as exc:
        gr.Warning(f"Not imported: {exc}", duration=10)
        kept = {name: gr.skip() for name in IMPORT_OUTPUTS}
        kept["record_status"] = f"⚠ Not imported: {views.esc(exc)} The conversation is as it was."
        return tuple(kept[name] for name in IMPORT_OUTPUTS)
    restored, panels, budget, setup = imported.session, imported.panels, imported.budget, imported.chat
    picker, rating_line = _reply_picker(restored)
    microphone = panels.audio_source == "microphone"
    sampling = setup.sampling
    values: dict[str, Any] = {
        "session": restored, "chatbot": list(restored.display), "tool_panel": chat_views.tool_rows(restored),
        "figures": restored.figures, "reply_picker": picker, "rating_status": rating_line,
        "rating_note": _note_of(restored, _picked(restored)),
        "record_status": views.esc(imported.summary),
        **{f"compare_{n}": v for n, v in zip(compare_ui.RoundShown.names(), compare_ui.show_round(
            profile, replace(compared, rounds=imported.compare)).components(), strict=True)},
        "video": panels.video, "images": list(panels.images) or None,
        "audio_file": None if microphone else panels.audio, "audio_mic": panels.audio if microphone else None,
        "seq": budget.seq, "reserve_auto": budget.output_reserve is None, "reserve": budget.configured_reserve,
        "max_new_tokens": budget.max_new_tokens, "audio_cap": budget.audio_cap, "k_mode": budget.k_mode,
        "system_prompt": setup.system_prompt, "tools_json": setup.tools_json, "temperature": sampling.temperature,
        "top_p": sampling.top_p, "top_k": sampling.top_k if sampling.top_k > 0 else -1,
        "max_tokens": sampling.max_tokens, "seed": -1 if sampling.seed is None else sampling.seed,
        "repetition_penalty": sampling.repetition_penalty, "tool_choice": setup.tool_choice,
    }
    return tuple(values[name] for name in IMPORT_OUTPUTS)


def sync_max_new(max_tokens: float | None) -> int:
    return max(0, min(int(max_tokens or 0), handlers.MAX_NEW_TOKENS_MAX))


def header_view(profile: Profile, engine: ChatEngine | None) -> str:
    """The page header: profile, engine (with its state) and what the machine cannot decode."""
    return views.header_html(profile, chat_views.engine_status(engine, brief=True), ffmpeg.media_problem(),
                             compact=engine is not None)  # the work layout keeps the screen for work


def engine_watch_active(engine: ChatEngine | None) -> bool:
    """The engine timer ticks only while the engine loads (its stage and time change every second)."""
    return engine is not None and engine.status.state == "loading"


def on_engine_tick(profile: Profile, engine: ChatEngine | None) -> tuple[str, str, gr.Timer]:
    """Page load and, while the engine loads, every second: the status line, the header, the timer."""
    return (chat_views.engine_status(engine), header_view(profile, engine),
            gr.Timer(active=engine_watch_active(engine)))


def default_max_tokens(engine: ChatEngine | None) -> int:
    """1024, or half the engine's context when that is smaller (a server refuses more than fits)."""
    limit = engine.max_model_len if engine is not None else None
    return 1024 if not limit else max(1, min(1024, int(limit) // 2))


def chat_concurrency(engine: ChatEngine | None) -> int | None:
    """One chat reply per engine sequence slot; no engine: the preview reply is instant."""
    return None if engine is None else max(1, int(engine.capacity))


def queue_size(engine: ChatEngine | None) -> int:
    """Waiting requests the queue accepts (``demo.queue(max_size=…)``)."""
    return 32 if engine is None else max(32, 8 * max(1, int(engine.capacity)))


# ---------------------------------------------------------------- layout
def build_interface(profile: Profile, engine: ChatEngine | None = None, *, seq: int,
                    limits: UploadLimits = UploadLimits(),
                    closed_session_ttl: float = DEFAULT_CLOSED_SESSION_TTL_S,
                    inspect_workers: int | None = None) -> gr.Blocks:
    """Lay out the studio (``layout.render_*``) and wire its events (``_setup_events``). ``seq`` is the
    budget slider's default (the engine's ``max_model_len`` once one is attached); ``limits`` are what
    uploads may be; a closed tab's session is dropped ``closed_session_ttl`` seconds after it closed;
    ``inspect_workers`` uploads are inspected at once, across every visitor (default: one per core,
    bounded by memory: ``dots3_demo.inspection.session.default_workers``)."""
    seq = int(seq)
    state0 = initial_state(seq)
    initial = handlers.all_views(profile, state0)
    with gr.Blocks(title=TITLE, fill_width=True) as demo:
        page = _Page(state=gr.State(state0), header=gr.HTML(header_view(profile, engine), elem_id="d3-header",
                                                            padding=False),
                     **_render_body(initial, seq, engine))
        with page.examples_row:  # one click fills the upload panels (their .change inspects), chat box, tools
            examples.add_examples(page.uploads.video, page.uploads.images, page.uploads.audio_file,
                                  page.chat.box, page.controls.tools_json, view_tabs=page.views.tabs)
        _setup_events(demo, page, profile, engine, limits=limits, pacer=StreamPacer(),
                      inspect_workers=inspect_workers or default_workers())
        SessionReaper(closed_session_ttl).watch(demo)  # a closed tab's session goes closed_session_ttl s later
    return demo


@dataclass(frozen=True)
class _Page:
    """Every component an event of the studio touches, by concern."""

    state: gr.State
    header: gr.HTML
    examples_row: gr.Row | gr.Column  # preview: a row above the panels; work: the glance's examples
    uploads: layout.UploadPanels
    views: layout.ModelViews
    chat: layout.ChatPanel
    controls: layout.ChatControls
    tools: layout.ToolsPanel
    glance: layout.Glance | None  # the work layout's (None: preview)
    compare: compare_ui.ComparePanel


def _render_body(initial: dict[str, Any], seq: int, engine: ChatEngine | None) -> dict[str, Any]:
    """Preview (no engine): the inspector first, the chat below. With an engine, the work layout
    (``layout``'s note on the two layouts). Compare, in an accordion, comes last in both."""
    chat_on = handlers.chat_enabled(engine)
    status, watch = chat_views.engine_status(engine), engine_watch_active(engine)
    max_tokens = default_max_tokens(engine)
    if engine is None:
        examples_row: gr.Row | gr.Column = gr.Row(elem_id="examples-row")
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=300):  # inputs
                uploads = layout.render_uploads(initial)
                strip = layout.render_frame_strip(initial, visible=False)  # the Frames tab shows them
            with gr.Column(scale=11, min_width=560):  # what the model sees
                model_views = layout.render_model_views(initial, seq, uploads.summary, strip)
        with gr.Accordion("Chat with the model", open=True, elem_id="chat-accordion"):
            chat_panel, controls, tools = layout.render_chat(engine, chat_on=chat_on, engine_status=status,
                                                             watch_engine=watch, max_tokens=max_tokens)
        glance = None
    else:
        summary = layout.render_summary(initial, render=False)  # shown in the glance
        with gr.Row(equal_height=False, elem_id="work-row"):
            with gr.Column(scale=3, min_width=250, elem_id="uploads-column"):
                uploads = layout.render_uploads(initial, mode="work", summary=summary)
                quick = layout.render_quick_sampling(engine, max_tokens=max_tokens)
            with gr.Column(scale=4, min_width=330, elem_id="glance-column"):
                glance = layout.render_glance(initial, summary)
                examples_row = glance.examples
            with gr.Column(scale=7, min_width=480, elem_id="chat-panel"):
                chat_panel = layout.render_conversation(engine, chat_on=chat_on, engine_status=status,
                                                        watch_engine=watch, mode="work")
        with gr.Row(equal_height=False, elem_id="detail-row"):
            with gr.Column(scale=8, min_width=560):
                model_views = layout.render_model_views(initial, seq, summary, glance.strip)
            with gr.Column(scale=4, min_width=320, elem_id="turn-settings"):
                controls, tools = layout.render_turn_settings(engine, chat_on=chat_on, max_tokens=max_tokens,
                                                              quick=quick)
    with gr.Accordion("Compare two settings (A | B)", open=False, elem_id="compare-accordion"):
        compared = compare_ui.render_compare(engine, seq=seq, max_tokens=max_tokens)
    return dict(examples_row=examples_row, uploads=uploads, views=model_views, chat=chat_panel, controls=controls,
                tools=tools, glance=glance, compare=compared)


# ---------------------------------------------------------------- wiring
class _Options(TypedDict, total=False):
    """Options several event listeners share (``**``-passed to ``.change``, ``.then``, ``.load`` …), with the
    types Gradio's listeners declare for them."""

    outputs: Block | Sequence[Block] | None
    queue: bool
    show_progress: Literal["full", "minimal", "hidden"]
    api_visibility: Literal["public", "private", "undocumented"]
    js: str | None
    concurrency_limit: int | None | Literal["default"]
    concurrency_id: str | None


class _Listen(_Options, total=False):
    """``_Options`` with the function and its inputs: a whole listener's arguments."""

    fn: Callable[..., Any] | None
    inputs: Block | Sequence[Block] | None
    trigger_mode: Literal["once", "multiple", "always_last"] | None


def _setup_events(demo: gr.Blocks, page: _Page, profile: Profile, engine: ChatEngine | None, *, limits: UploadLimits,
                  pacer: StreamPacer, inspect_workers: int) -> None:
    _setup_inspection(page, profile, engine, limits=limits, workers=inspect_workers)
    replies = _setup_chat(page, engine, pacer=pacer)
    _setup_record(page, profile, engine)
    if page.glance is not None:
        _setup_glance(page.glance, page.views.tabs)
    compare_ui.setup_compare_events(page.compare, studio=page.state, chat_controls=page.controls, profile=profile,
                                    engine=engine, limits=limits, pacer=pacer, concurrency=chat_concurrency(engine),
                                    inspect_workers=inspect_workers)
    engine_watch = _Listen(fn=partial(on_engine_tick, profile, engine), inputs=None,
                           outputs=[page.chat.engine_status, page.header, page.chat.engine_timer],
                           api_visibility="private", queue=False, show_progress="hidden")
    demo.load(**engine_watch)
    page.chat.engine_timer.tick(**engine_watch)
    for reply in replies:  # the first message starts the engine: the header's badge says so once it ended
        reply.then(**engine_watch)


def _setup_inspection(page: _Page, profile: Profile, engine: ChatEngine | None, *, limits: UploadLimits,
                      workers: int) -> None:
    """Uploads and the Budget tab: every trigger runs the same steps.

    1. *arrives* (``queue=False``, at once): the panel's job in flight is cancelled (superseded) and the
       status line shows the panel busy;
    2. the inspection (the public API endpoint), at most ``workers`` at a time across every visitor; one
       visitor's panels run side by side too, each result applied to the visitor's latest state
       (``handlers.Inspections``, a per-session ``gr.State``). It shows the panel's own views — the
       frames first; a superseded inspection changes nothing;
    3. then — once the browser has shown the new pictures (``AFTER_THE_PICTURES_JS``), so drawing does
       not slow them down — one at a time app-wide, so the page always ends on the latest: the status
       line of every panel, the state the chat reads and the views all panels share (summary, budget
       bar); and, side by side, the panel's figures.
    """
    uploads, budget, state, outputs = page.uploads, page.views.budget, page.state, page.views.outputs
    inspections = gr.State(handlers.new_inspections(state.value))
    panel_out = [state, uploads.status, *(outputs[key] for key in handlers.PANEL_KEYS)]
    shared_out = [state, uploads.status, *(outputs[key] for key in handlers.SHARED_KEYS)]
    figure_out = [outputs[key] for key in handlers.FIGURE_KEYS]
    controls = budget.components()  # on_video / on_settings take them by these names, in this order
    arrives = _Options(outputs=uploads.status, queue=False, show_progress="hidden", api_visibility="private")

    def inspect(arrived: Dependency, fn: Callable[..., Any], inputs: list[Any], *, api_name: str,
                progress_on: list[Any], **kwargs: Any) -> None:
        # "multiple": a second upload's inspection starts while the first's runs (and supersedes it);
        # "always_last": the steps after it draw whatever is latest, so pending ones coalesce.
        main = arrived.then(fn, [inspections, *inputs], panel_out, api_name=api_name, concurrency_limit=workers,
                            concurrency_id="inspect", show_progress_on=progress_on, trigger_mode="multiple",
                            **kwargs)
        after = _Listen(inputs=inspections, show_progress="hidden", api_visibility="private",
                        trigger_mode="always_last", js=AFTER_THE_PICTURES_JS)
        main.then(partial(on_inspected, profile, engine), outputs=shared_out, api_name=f"{api_name}_shown",
                  concurrency_limit=1, concurrency_id="inspect-shown", **after)
        main.then(on_figures, outputs=figure_out, api_name=f"{api_name}_figures", concurrency_limit=workers,
                  concurrency_id="inspect-figures", **after)

    frames, solver = outputs["frames_gallery"], outputs["solver_md"]
    inspect(uploads.video.change(partial(on_video_arrives, engine), [inspections, uploads.video],
                                 trigger_mode="multiple", **arrives),
            partial(on_video, profile, limits=limits, engine=engine), [uploads.video, *controls],
            api_name="inspect_video", show_progress="full", progress_on=[frames])
    for trigger, name in ((budget.seq.release, "set_seq"), (budget.max_new_tokens.release, "set_max_new_tokens"),
                          (budget.reserve.release, "set_reserve"), (budget.audio_cap.release, "set_audio_cap"),
                          (budget.k_mode.input, "set_k_mode"), (budget.reserve_auto.input, "set_reserve_auto")):
        inspect(trigger(partial(on_settings_arrive, engine), inspections, trigger_mode="multiple", **arrives),
                partial(on_settings, profile, limits=limits, engine=engine), controls, api_name=name,
                show_progress="minimal", progress_on=[solver, frames])
    budget.reserve_auto.change(on_reserve_auto, budget.reserve_auto, budget.reserve, api_name="reserve_auto_toggle",
                               api_visibility="private", queue=False)
    inspect(uploads.images.change(partial(on_images_arrive, engine), [inspections, uploads.images],
                                  trigger_mode="multiple", **arrives),
            partial(on_images, profile, limits=limits, engine=engine), [uploads.images], api_name="inspect_images",
            progress_on=[outputs["grid_gallery"]])
    for component, source, fn, name in ((uploads.audio_file, "file", on_audio_file, "inspect_audio"),
                                        (uploads.audio_mic, "microphone", on_audio_mic, "inspect_recording")):
        inspect(component.change(partial(on_audio_arrives, source, engine), [inspections, component],
                                 trigger_mode="multiple", **arrives),
                partial(fn, profile, limits=limits, engine=engine), [component], api_name=name,
                progress_on=[outputs["mel_info"]])
    segment_pick, segment_audio = outputs["segment_pick"], outputs["segment_audio"]
    segment_pick.change(on_segment, [state, segment_pick], segment_audio, api_name="segment_audio")
    outputs["groups_df"].select(on_group_select, state, segment_pick, api_name="group_select",
                                api_visibility="private")
    # The engine plans the video with max_new_tokens = the sampling max tokens: mirror it in the Budget tab.
    max_tokens = page.controls.max_tokens
    synced = gr.on([max_tokens.blur, max_tokens.submit], sync_max_new, max_tokens, budget.max_new_tokens,
                   api_visibility="private", queue=False)
    inspect(synced.then(partial(on_settings_arrive, engine), inspections, trigger_mode="multiple", **arrives),
            partial(on_settings, profile, limits=limits, engine=engine), controls, api_name="sync_max_new_tokens",
            api_visibility="private", show_progress="hidden", progress_on=[solver])


# Run in the browser when a glance link is clicked: bring the detail tabs into view.
SCROLL_TO_VIEWS_JS = """() => {
  document.getElementById('views')?.scrollIntoView({behavior: 'smooth', block: 'start'});
  return [];
}"""


def select_tab(tab: str) -> gr.Tabs:
    return gr.Tabs(selected=tab)


def _setup_glance(glance: layout.Glance, tabs: gr.Tabs) -> None:
    """Each link of the glance selects its detail tab and scrolls to it."""
    for tab, link in glance.links.items():
        link.click(partial(select_tab, tab), None, tabs, js=SCROLL_TO_VIEWS_JS, queue=False, show_progress="hidden",
                   api_visibility="private")


def _setup_chat(page: _Page, engine: ChatEngine | None, *, pacer: StreamPacer) -> list[Dependency]:
    """The chat's events; returns the streaming ones (a reply each)."""
    tools, panel = page.tools, page.chat
    tools.example.input(chat_views.example_tools_json, tools.example, page.controls.tools_json,
                        api_visibility="private", queue=False)
    page.controls.tools_json.change(chat_views.validate_tools_md, page.controls.tools_json, tools.status,
                                    api_visibility="private", queue=False)
    controls = page.controls.components()  # the chat callbacks read them by ChatControls' field names
    # The streamed outputs (all but Send: see _relay); the tool events clear the tool-result box instead.
    chat_out = layout.ChatStream(chatbot=panel.chatbot, session=panel.session, box=panel.box,
                                 tool_panel=tools.panel, figures=panel.figures, engine_status=panel.engine_status)
    tool_out = replace(chat_out, box=tools.result)
    chat_in = [page.state, panel.session, panel.box, *controls]
    tool_in = [page.state, panel.session, tools.result, *controls]
    rating = panel.rating
    regen_in = [page.state, panel.session, rating.reply, *controls]
    chat_common = _Options(concurrency_limit=chat_concurrency(engine), concurrency_id="chat",
                           show_progress="minimal")
    held = panel.held.components()
    locked = _Listen(fn=partial(lock_send, engine), inputs=None, outputs=held, queue=False,
                     api_visibility="private", show_progress="hidden")
    streams = (  # (trigger, callback, inputs, outputs, API name, visibility)
        (panel.send.click, on_chat, chat_in, chat_out, "chat", "public"),
        (panel.box.submit, on_chat, chat_in, chat_out, "chat_submit", "private"),
        (panel.regenerate.click, on_regenerate, chat_in, chat_out, "regenerate", "public"),
        (rating.regenerate_from.click, on_regenerate_from, regen_in, chat_out, "regenerate_from", "public"),
        (tools.send.click, on_tool_result, tool_in, tool_out, "tool_result", "public"),
        (tools.run.click, on_run_tool, tool_in, tool_out, "run_example_tool", "public"),
    )
    asking = locked.copy()  # "↻ from this reply" asks first when it would drop a rating or a note (no: nothing runs)
    asking["js"] = style.CONFIRM_REGENERATE_FROM_JS
    events = []
    for trigger, callback, inputs, outputs, name, visibility in streams:
        first = asking if name == "regenerate_from" else locked
        event = trigger(**first).then(partial(callback, engine, pacer), inputs, outputs.components(),
                                      api_name=name, api_visibility=visibility, **chat_common)
        event.then(partial(on_chat_settle, engine), panel.session,
                   [*outputs.components(), *held, rating.reply, rating.status],
                   show_progress="hidden", api_visibility="private", queue=False)  # no red "Error" badge after Stop
        events.append(event)
    panel.stop.click(None, None, None, cancels=events, api_visibility="private")
    # Both ways the page offers to clear the chat — the Clear button and the Chatbot's own trash icon (which
    # empties the bubbles in the browser, then sends .clear) — clear the conversation the model gets, the
    # rating row, and a reply that still streams (ChatClears).
    cleared = [panel.chatbot, panel.session, tools.panel, panel.figures, rating.reply, rating.status, rating.note]
    panel.clear.click(on_clear, panel.session, cleared, cancels=events, api_name="clear_chat",
                      api_visibility="private", queue=False)
    panel.chatbot.clear(on_clear, panel.session, cleared, cancels=events, api_name="clear_chat_icon",
                        api_visibility="private", queue=False)
    _setup_rating(panel)
    return events


def _setup_record(page: _Page, profile: Profile, engine: ChatEngine | None) -> None:
    """Export (the session's zip and HTML report, as downloads) and Import (a zip back into this session)."""
    record, panel, uploads = page.chat.record, page.chat, page.uploads
    record.export.click(partial(on_export, profile, engine),
                        [page.state, panel.session, page.compare.session, *page.controls.components()],
                        [record.zip_file, record.report_file, record.status], api_name="export_session",
                        concurrency_id="record", concurrency_limit=2)
    by_name = {"session": panel.session, "chatbot": panel.chatbot, "tool_panel": page.tools.panel,
               "figures": panel.figures, "reply_picker": panel.rating.reply, "rating_status": panel.rating.status,
               "rating_note": panel.rating.note,
               **{f"compare_{n}": c for n, c in zip(compare_ui.RoundShown.names(),
                                                    compare_ui.round_outputs(page.compare).components(), strict=True)},
               "record_status": record.status, "video": uploads.video, "images": uploads.images,
               "audio_file": uploads.audio_file, "audio_mic": uploads.audio_mic,
               **dict(zip(layout.BudgetControls.names(), page.views.budget.components(), strict=True)),
               **dict(zip(layout.ChatControls.names(), page.controls.components(), strict=True))}
    record.import_file.upload(partial(on_import, profile), [panel.session, page.compare.session, record.import_file],
                              [by_name[n] for n in IMPORT_OUTPUTS],
                              api_name="import_session", concurrency_id="record", concurrency_limit=2)


def _setup_rating(panel: layout.ChatPanel) -> None:
    """👍/👎 and the note on the picked reply (kept in the session: ``ChatSession.ratings``)."""
    rating, session = panel.rating, panel.session
    quick = _Options(outputs=[session, rating.reply, rating.status], queue=False, show_progress="hidden")
    rating.up.click(on_rate_up, [session, rating.reply], api_name="rate_up", **quick)
    rating.down.click(on_rate_down, [session, rating.reply], api_name="rate_down", **quick)
    gr.on([rating.save_note.click, rating.note.submit], on_rate_note, [session, rating.reply, rating.note],
          api_name="rate_note", **quick)
    picked = rating.reply.input(on_pick_reply, [session, rating.reply], [rating.note, rating.status],
                                api_visibility="private", queue=False, show_progress="hidden")
    picked.then(None, js=style.SHOW_PICKED_REPLY_JS, api_visibility="private", queue=False)  # scroll the chat to it


# Model output is rendered by the Chatbot, whose sanitizer removes anything that can run script but
# keeps plain images, links and forms. This policy stops what is left from reaching other sites:
# a Markdown image pointing elsewhere (how a prompt-injected reply leaks the conversation in a URL)
# never loads, and a form in a reply cannot submit outside the app. Everything the studio itself
# shows (frames, plots, uploads) comes from its own origin or data:/blob: URLs.
CONTENT_SECURITY_POLICY = "img-src 'self' data: blob:; media-src 'self' data: blob:; form-action 'self'"


# Gradio's queue keeps its last GRADIO_ANALYTICS_MAX_EVENTS events (default 10,000) for its /monitoring
# page and, after every event (GRADIO_ANALYTICS_CACHE_FREQUENCY=1), summarises all of them with pandas:
# 10 ms of CPU per event once 10,000 are kept (a streamed chat turn is three events), and allocation
# churn that fragments the heap. Here the page summarises the last 1,000 events, every 100 events.
QUEUE_ANALYTICS_ENV = {"GRADIO_ANALYTICS_MAX_EVENTS": "1000", "GRADIO_ANALYTICS_CACHE_FREQUENCY": "100"}


def launch_options(limits: UploadLimits = UploadLimits()) -> dict[str, Any]:
    """Keyword arguments ``launch_app`` passes to ``Blocks.launch`` (tests reuse them)."""
    head = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
    return {"theme": style.theme(), "css": style.CSS + compare_ui.CSS, "js": style.PAGE_JS, "head": head,
            "max_file_size": limits.max_file_bytes}


def launch_app(profile: Profile, engine: ChatEngine | None = None, *, host: str = "127.0.0.1", port: int | None = 7860,
               seq: int, limits: UploadLimits = UploadLimits(),
               closed_session_ttl: float = DEFAULT_CLOSED_SESSION_TTL_S, start_engine: bool = False,
               inspect_workers: int | None = None, **launch_kwargs: Any) -> gr.Blocks | tuple[Any, str, str]:
    """Build the studio and serve it (blocks unless ``prevent_thread_lock=True`` is passed).

    ``limits``: what uploads may be (Gradio enforces the file size, the handlers the rest);
    ``closed_session_ttl``: seconds a closed tab's session is kept (``dots3_demo.serving.sessions``);
    ``inspect_workers``: uploads inspected at once (``--inspect-workers``; default: one per core,
    bounded by memory), and Pillow keeps freed image buffers for them (``keep_image_blocks``);
    ``start_engine``: begin loading the engine as the server starts (it loads in the background while
    the page, the probes and the inspector answer), rather than on the first message or probe.
    glibc's allocator is tuned first, before the server's threads exist, and trimmed every 30 s from
    then on (``dots3_demo.serving.memory``)."""
    tune_allocator()
    start_periodic_trim()  # a daemon thread, for the life of the process
    for name, value in QUEUE_ANALYTICS_ENV.items():  # read when the queue is made; the operator's value wins
        os.environ.setdefault(name, value)
    workers = inspect_workers or default_workers()
    keep_image_blocks(workers)  # Pillow reuses frame-sized buffers (the mmap threshold above makes each costly)
    demo = build_interface(profile, engine, seq=seq, limits=limits, closed_session_ttl=closed_session_ttl,
                           inspect_workers=workers)
    demo.queue(max_size=queue_size(engine))
    options = {**launch_options(limits), "server_name": host, "server_port": port, **launch_kwargs}
    # GET /healthz and /readyz (dots3_demo.serving.health), mounted when the server starts.
    options["app_kwargs"] = app_kwargs_with_health(options.get("app_kwargs"), engine, profile.name,
                                                   start_engine=start_engine)
    result = demo.launch(**options)
    return demo if launch_kwargs.get("prevent_thread_lock") else result
