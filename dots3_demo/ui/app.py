"""The Gradio 6 Blocks app: it composes the slices and holds the serving policy.

Each feature is a slice with its layout and its events side by side: ``inspect_page`` (uploads, what the model
sees, the Budget tab), ``chat_page`` (the conversation, rating, turn settings, tools), ``record_page`` (export and
import), ``compare`` (A | B). ``build_interface`` places them in the preview or the work layout
(``_render_body``) and has each wire its own events (``_setup_events``), plus the engine watch; ``launch_app``
adds the serving policy (queue size, the Content-Security-Policy, health probes, allocator tuning). No globals,
no model loading at import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from typing import Any

import gradio as gr

from dots3_demo import ffmpeg, vllm_compat
from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.state import initial_state
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.inspection import keep_image_blocks
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.session import Workers, default_workers
from dots3_demo.profiles import Profile
from dots3_demo.serving import session_state
from dots3_demo.serving.health import app_kwargs_with_health
from dots3_demo.serving.memory import start_periodic_trim, tune_allocator
from dots3_demo.serving.queue_idle import wait_for_events
from dots3_demo.serving.sessions import DEFAULT_CLOSED_SESSION_TTL_S, SessionReaper
from dots3_demo.ui import chat_page, chat_views, examples, handlers, inspect_page, layout, record_page, style, views
from dots3_demo.ui import compare as compare_ui
from dots3_demo.ui.context_meter import CSS as METER_CSS
from dots3_demo.ui.context_meter import Meter
from dots3_demo.ui.early_videos import EarlyVideos
from dots3_demo.ui.layout import Listen

TITLE = "Dots3 NOTE Studio"


# ---------------------------------------------------------------- inspection results → outputs












# ---------------------------------------------------------------- callbacks (bound with partial)


























































# ---------------------------------------------------------------- rating (queue=False: they change one session)












# ---------------------------------------------------------------- the session as files (export, import)








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
                    inspect_workers: int | None = None, early: EarlyVideos | None = None) -> gr.Blocks:
    """Lay out the studio (each slice's ``render_*``, composed by ``_render_body``) and wire its events (each
    slice's ``setup_*_events``, composed by ``_setup_events``). ``seq`` is the
    budget slider's default (the engine's ``max_model_len`` once one is attached); ``limits`` are what
    uploads may be; a closed tab's session is dropped ``closed_session_ttl`` seconds after it closed;
    ``inspect_workers`` uploads are inspected at once, across every visitor (default: one per core,
    bounded by memory: ``dots3_demo.inspection.session.default_workers``); ``early`` (made with that many workers),
    when the server hands it every upload (``launch_app`` does), begins a video's inspection as its bytes come in."""
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
                      inspect_workers=inspect_workers or default_workers(), early=early)
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
                uploads = inspect_page.render_uploads(initial)
                strip = inspect_page.render_frame_strip(initial, visible=False)  # the Frames tab shows them
            with gr.Column(scale=11, min_width=560):  # what the model sees
                model_views = inspect_page.render_model_views(initial, seq, uploads.summary, strip)
        with gr.Accordion("Chat with the model", open=True, elem_id="chat-accordion"):
            chat_panel, controls, tools = chat_page.render_chat(engine, chat_on=chat_on, engine_status=status,
                                                             watch_engine=watch, max_tokens=max_tokens)
        glance = None
    else:
        summary = inspect_page.render_summary(initial, render=False)  # shown in the glance
        with gr.Row(equal_height=False, elem_id="work-row"):
            with gr.Column(scale=3, min_width=250, elem_id="uploads-column"):
                uploads = inspect_page.render_uploads(initial, mode="work", summary=summary)
                quick = chat_page.render_quick_sampling(engine, max_tokens=max_tokens)
            with gr.Column(scale=4, min_width=330, elem_id="glance-column"):
                glance = inspect_page.render_glance(initial, summary)
                examples_row = glance.examples
            with gr.Column(scale=7, min_width=480, elem_id="chat-panel"):
                chat_panel = chat_page.render_conversation(engine, chat_on=chat_on, engine_status=status,
                                                        watch_engine=watch, mode="work")
        with gr.Row(equal_height=False, elem_id="detail-row"):
            with gr.Column(scale=8, min_width=560):
                model_views = inspect_page.render_model_views(initial, seq, summary, glance.strip)
            with gr.Column(scale=4, min_width=320, elem_id="turn-settings"):
                controls, tools = chat_page.render_turn_settings(engine, chat_on=chat_on, max_tokens=max_tokens,
                                                              quick=quick)
    with gr.Accordion("Compare two settings (A | B)", open=False, elem_id="compare-accordion"):
        compared = compare_ui.render_compare(engine, seq=seq, max_tokens=max_tokens)
    return dict(examples_row=examples_row, uploads=uploads, views=model_views, chat=chat_panel, controls=controls,
                tools=tools, glance=glance, compare=compared)


# ---------------------------------------------------------------- wiring
def _setup_events(demo: gr.Blocks, page: _Page, profile: Profile, engine: ChatEngine | None, *, limits: UploadLimits,
                  pacer: StreamPacer, inspect_workers: int, early: EarlyVideos | None) -> None:
    """Each slice wires its own events (its components by name); the engine watch is the page's."""
    inspected = inspect_page.setup_inspection_events(page.uploads, page.views, page.state, page.controls.max_tokens,
                                                     profile=profile, engine=engine, limits=limits,
                                                     workers=inspect_workers, early=early)
    replies = chat_page.setup_chat_events(page.chat, page.controls, page.tools, page.state, engine=engine, pacer=pacer,
                                          concurrency=chat_concurrency(engine),
                                          meter=Meter(profile, engine), inspected=inspected)
    record_page.setup_record_events(page.chat, page.uploads, page.views.budget, page.controls, page.tools, page.state,
                                    page.compare, profile=profile, engine=engine)
    if page.glance is not None:
        inspect_page.setup_glance_events(page.glance, page.views.tabs)
    compare_ui.setup_compare_events(page.compare, studio=page.state, chat_controls=page.controls, profile=profile,
                                    engine=engine, limits=limits, pacer=pacer, concurrency=chat_concurrency(engine),
                                    inspect_workers=inspect_workers)
    engine_watch = Listen(fn=partial(on_engine_tick, profile, engine), inputs=None,
                          outputs=[page.chat.engine_status, page.header, page.chat.engine_timer],
                          api_visibility="private", queue=False, show_progress="hidden")
    demo.load(**engine_watch)
    page.chat.engine_timer.tick(**engine_watch)
    for reply in replies:  # the first message starts the engine: the header's badge says so once it ended
        reply.then(**engine_watch)


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
    return {"theme": style.theme(), "css": style.CSS + compare_ui.CSS + METER_CSS, "js": style.PAGE_JS,
            "head": head, "max_file_size": limits.max_file_bytes}


def launch_app(profile: Profile, engine: ChatEngine | None = None, *, host: str = "127.0.0.1", port: int | None = 7860,
               seq: int, limits: UploadLimits = UploadLimits(),
               closed_session_ttl: float = DEFAULT_CLOSED_SESSION_TTL_S, start_engine: bool = False,
               inspect_workers: int | None = None, freeze_heap: bool = False,
               **launch_kwargs: Any) -> gr.Blocks | tuple[Any, str, str]:
    """Build the studio and serve it (blocks unless ``prevent_thread_lock=True`` is passed).

    ``limits``: what uploads may be (Gradio enforces the file size, the handlers the rest);
    ``closed_session_ttl``: seconds a closed tab's session is kept (``dots3_demo.serving.sessions``);
    ``inspect_workers``: uploads inspected at once (``--inspect-workers``; default: one per core,
    bounded by memory), and Pillow keeps freed image buffers for them (``keep_image_blocks``);
    ``start_engine``: begin loading the engine as the server starts (it loads in the background while
    the page, the probes and the inspector answer), rather than on the first message or probe;
    ``freeze_heap``: once the server runs, freeze the start-up heap with vLLM's ``freeze_gc_heap``, as vLLM's
    server does (``app.py`` does; tests leave it off: their process outlives many apps).
    glibc's allocator is tuned first, before the server's threads exist, and trimmed every 30 s from
    then on (``dots3_demo.serving.memory``)."""
    tune_allocator()
    start_periodic_trim()  # a daemon thread, for the life of the process
    for name, value in QUEUE_ANALYTICS_ENV.items():  # read when the queue is made; the operator's value wins
        os.environ.setdefault(name, value)
    workers = inspect_workers or default_workers()
    keep_image_blocks(workers)  # Pillow reuses frame-sized buffers (the mmap threshold above makes each costly)
    early = EarlyVideos(profile, Workers(workers), limits)  # a video's inspection begins as its bytes come in
    demo = build_interface(profile, engine, seq=seq, limits=limits, closed_session_ttl=closed_session_ttl,
                           inspect_workers=workers, early=early)
    demo.queue(max_size=queue_size(engine))
    wait_for_events(demo._queue)  # an idle queue waits for its next event instead of looking every 1 ms
    options = {**launch_options(limits), "server_name": host, "server_port": port, **launch_kwargs}
    # GET /healthz and /readyz (dots3_demo.serving.health), mounted when the server starts; every upload handed to
    # the early videos as the route answers; Gradio's FFmpeg.wasm served once the inspections are done; the
    # galleries' pictures answered on the server's loop.
    options["app_kwargs"] = app_kwargs_with_health(options.get("app_kwargs"), engine, profile.name,
                                                   start_engine=start_engine, uploaded=early.uploaded,
                                                   idle_s=early.workers.idle_s,
                                                   pictures_in=inspect_page.pictures_folder())
    blocking = not launch_kwargs.get("prevent_thread_lock")
    result = demo.launch(**{**options, "prevent_thread_lock": True})
    session_state.install(demo)  # a new session's state is copied, not re-read: first requests at once start at once
    if freeze_heap:  # what start-up made is out of the collector's reach, as in vLLM's own server
        vllm_compat.freeze_gc_heap()
    if blocking:
        demo.block_thread()
    return result if blocking else demo
