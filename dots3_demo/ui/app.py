"""The Gradio 6 Blocks app: layout and wiring only; the work is in ``handlers`` (plain functions).

Callbacks here are module-level functions bound to the profile/engine with ``functools.partial``;
they translate an ``Outcome`` into component updates (``gr.skip()`` for outputs it leaves alone)
and raise the ``gr.Warning`` toast for errors. No globals, no model loading at import.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from functools import partial
from typing import Any

import gradio as gr

from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.video import K_MODES
from dots3_demo.memory import start_periodic_trim, tune_allocator
from dots3_demo.profiles import Profile
from dots3_demo.ui import chat, examples, handlers, style, views
from dots3_demo.ui.handlers import VIEW_KEYS, Outcome, StudioState
from dots3_demo.ui.pacing import StreamPacer
from dots3_demo.ui.health import app_kwargs_with_health
from dots3_demo.ui.sessions import DEFAULT_CLOSED_SESSION_TTL_S, SessionReaper

TITLE = "Dots3 NOTE Studio"
# One inspection at a time, app-wide. Besides CPU-bound decoding gaining nothing from overlap on small
# hosts, this is what keeps a session's gr.State consistent: every event reads the state when it starts
# and writes it when it ends, so two events of one session running at once (a video still decoding
# while images are dropped in) would lose one of the two updates.
INSPECT_CONCURRENCY = 1


# ---------------------------------------------------------------- outcome → outputs
def _value_for(key: str, value: Any) -> Any:
    if key == "segment_pick":
        return gr.Dropdown(choices=value["choices"], value=value["value"])
    return value


def _emit(outcome: Outcome) -> tuple[Any, ...]:
    """``(state, status, *VIEW_KEYS)`` for an event wired with ``_outputs``."""
    if outcome.error:
        gr.Warning(outcome.error, duration=8)
    updates = [
        _value_for(key, outcome.views[key]) if key in outcome.views else gr.skip() for key in VIEW_KEYS
    ]
    return (outcome.state, outcome.status if outcome.status else gr.skip(), *updates)


def _progress_adapter(progress: gr.Progress):
    def report(fraction: float, text: str) -> None:
        progress(fraction, desc=text)

    return report


# ---------------------------------------------------------------- callbacks (bound with partial)
# ``limits`` is keyword-only and bound with ``partial``: Gradio fills only positional parameters.
def on_video(profile: Profile, state: StudioState, path: str | None, seq, auto, reserve, max_new, cap, k_mode,
             progress=gr.Progress(), *, limits: UploadLimits = UploadLimits()):
    settings = handlers.settings_from_controls(seq, auto, reserve, max_new, cap, k_mode)
    return _emit(handlers.load_video(profile, state, path, settings, _progress_adapter(progress), limits=limits))


def on_settings(profile: Profile, state: StudioState, seq, auto, reserve, max_new, cap, k_mode,
                progress=gr.Progress(), *, limits: UploadLimits = UploadLimits()):
    settings = handlers.settings_from_controls(seq, auto, reserve, max_new, cap, k_mode)
    return _emit(handlers.resolve(profile, state, settings, _progress_adapter(progress), limits=limits))


def on_images(profile: Profile, state: StudioState, paths, *, limits: UploadLimits = UploadLimits()):
    return _emit(handlers.load_images(profile, state, paths, limits=limits))


def on_audio_file(profile: Profile, state: StudioState, path, *, limits: UploadLimits = UploadLimits()):
    return _emit(handlers.load_audio(profile, state, path, "file", limits=limits))


def on_audio_mic(profile: Profile, state: StudioState, path, *, limits: UploadLimits = UploadLimits()):
    return _emit(handlers.load_audio(profile, state, path, "microphone", limits=limits))


def on_segment(state: StudioState, index):
    return handlers.segment_audio(state, index)


def on_group_select(state: StudioState, evt: gr.SelectData):
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


def on_reserve_auto(auto: bool):
    return gr.Slider(interactive=not auto)


async def _relay(engine: Any, replies: Any):
    """Chat views → ``(chatbot, session, input box, tool panel, figures, engine status)``.

    The Send button is not an output of the streaming event: ``lock_send`` disables it before the
    event starts and ``on_chat_settle`` enables it after. Gradio builds a new component object for
    every component update in every streamed step, so leaving it out keeps each step cheap.
    """
    async with contextlib.aclosing(replies) as stream:
        async for view in stream:
            yield (view.history, view.session, "" if view.clear_input else gr.skip(), view.tool_rows, view.figures,
                   chat.engine_status_md(engine))


def lock_send(engine: Any):
    """Disable Send while a reply streams (runs before the chat event; ``on_chat_settle`` undoes it)."""
    return gr.skip() if engine is None else gr.Button(interactive=False)


def _chat_settings(pacer: StreamPacer, controls: tuple) -> chat.ChatSettings:
    return replace(chat.settings_from_controls(*controls), pacer=pacer)


async def on_chat(engine: Any, pacer: StreamPacer, studio: StudioState, session: chat.ChatSession, message: str,
                  *controls):
    settings = _chat_settings(pacer, controls)
    replies = chat.send_message(engine, studio, session, message, settings)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


async def on_regenerate(engine: Any, pacer: StreamPacer, studio: StudioState, session: chat.ChatSession, _box: str,
                        *controls):
    settings = _chat_settings(pacer, controls)
    replies = chat.regenerate(engine, studio, session, settings)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


async def on_tool_result(engine: Any, pacer: StreamPacer, studio: StudioState, session: chat.ChatSession,
                         result: str, *controls):
    settings = _chat_settings(pacer, controls)
    replies = chat.send_tool_results(engine, studio, session, settings, result=result)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


async def on_run_tool(engine: Any, pacer: StreamPacer, studio: StudioState, session: chat.ChatSession, _box: str,
                      *controls):
    settings = _chat_settings(pacer, controls)
    replies = chat.send_tool_results(engine, studio, session, settings, run_examples=True)
    async with contextlib.aclosing(_relay(engine, replies)) as relayed:
        async for outputs in relayed:
            yield outputs


def on_chat_settle(engine: Any, session: chat.ChatSession):
    """After a chat event ends or is stopped: re-show the session and re-enable Send.

    It outputs to every output of the chat event, so none is left with the red "Error" badge a
    cancelled event sometimes leaves on its outputs (what ChatInterface does for its chatbot).
    """
    if engine is None:
        return (gr.skip(),) * 6
    return (list(session.display), gr.skip(), chat.tool_rows(session), gr.skip(), chat.engine_status_md(engine),
            gr.Button(interactive=True))


def on_clear(session: chat.ChatSession):
    fresh = chat.clear_session(session)
    return [], fresh, [], ""


def sync_max_new(max_tokens: float | None) -> int:
    return max(0, min(int(max_tokens or 0), handlers.MAX_NEW_TOKENS_MAX))


def on_engine_status(engine: Any):
    return chat.engine_status_md(engine)


def chat_concurrency(engine: Any) -> int | None:
    """One chat reply per engine sequence slot; no engine: the preview reply is instant."""
    return None if engine is None else max(1, int(engine.capacity))


def queue_size(engine: Any) -> int:
    """Waiting requests the queue accepts (``demo.queue(max_size=…)``)."""
    return 32 if engine is None else max(32, 8 * max(1, int(engine.capacity)))


# ---------------------------------------------------------------- layout
def build_interface(profile: Profile, engine: Any = None, *, seq: int,
                    limits: UploadLimits = UploadLimits(),
                    closed_session_ttl: float = DEFAULT_CLOSED_SESSION_TTL_S) -> gr.Blocks:
    """Lay out the studio and wire its events. ``seq`` is the budget slider's default
    (the engine's ``max_model_len`` once one is attached); ``limits`` are what uploads may be;
    a closed tab's session is dropped ``closed_session_ttl`` seconds after it closed."""
    seq = int(seq)
    state0 = handlers.initial_state(seq)
    initial = handlers.all_views(profile, state0)
    chat_on = handlers.chat_enabled(engine)
    pacer = StreamPacer()  # this app's UI-update budget, shared by the replies in flight
    reaper = SessionReaper(closed_session_ttl)

    with gr.Blocks(title=TITLE, fill_width=True) as demo:
        state = gr.State(state0)
        gr.HTML(views.header_html(profile, handlers.engine_status(engine)), elem_id="d3-header", padding=False)
        examples_row = gr.Row(elem_id="examples-row")  # filled below, once the chat box and tools editor exist
        with gr.Row(equal_height=False):
            # ------------------------------------------------ inputs
            with gr.Column(scale=4, min_width=300):
                video = gr.Video(label="Video (one per prompt)", sources=["upload"], height=210,
                                 elem_id="video-input")
                images = gr.File(label="Images (up to 8)", file_count="multiple", file_types=["image"],
                                 elem_id="images-input")
                with gr.Tabs(elem_id="audio-tabs"):
                    with gr.Tab("Audio file", id="audio-file-tab", elem_id="audio-file-tab"):
                        audio_file = gr.Audio(sources=["upload"], type="filepath", show_label=False,
                                              elem_id="audio-input")
                    with gr.Tab("Microphone", id="audio-mic-tab", elem_id="audio-mic-tab"):
                        audio_mic = gr.Audio(sources=["microphone"], type="filepath", show_label=False,
                                             elem_id="audio-mic")
                status = gr.Markdown("Upload media to see what the model sees.", elem_id="status")
                summary = gr.HTML(initial["summary"], elem_id="summary")
            # ------------------------------------------------ what the model sees
            with gr.Column(scale=11, min_width=560):
                with gr.Tabs(elem_id="views") as view_tabs:
                    with gr.Tab("Frames", id="frames", elem_id="tab-frames"):
                        frames_info = gr.Markdown(initial["frames_info"], elem_id="frames-info")
                        frames_gallery = gr.Gallery(
                            value=initial["frames_gallery"], label="Sampled frames (as the vision tower gets them)",
                            columns=4, height=500, object_fit="contain", allow_preview=True,
                            elem_id="frames-gallery",
                        )
                    with gr.Tab("Budget", id="budget", elem_id="tab-budget"):
                        with gr.Row():
                            seq_slider = gr.Slider(handlers.SEQ_MIN, max(handlers.SEQ_MAX, seq), value=seq,
                                                   step=handlers.SEQ_STEP, label="seq (context budget)",
                                                   elem_id="seq-slider", scale=3)
                            max_new = gr.Slider(0, handlers.MAX_NEW_TOKENS_MAX, value=0, step=64,
                                                label="max new tokens", elem_id="max-new-slider", scale=2)
                            k_mode = gr.Dropdown(list(K_MODES), value=K_MODES[0], label="k_mode (grouping)",
                                                 elem_id="k-mode", scale=1, min_width=120)
                        with gr.Row():
                            reserve = gr.Slider(0, max(handlers.SEQ_MAX, seq), value=initial["reserve"],
                                                step=64, label="output reserve", interactive=False,
                                                elem_id="reserve-slider", scale=3)
                            reserve_auto = gr.Checkbox(True, label="auto reserve (seq ÷ 4)",
                                                       elem_id="reserve-auto", scale=1, min_width=120)
                            audio_cap = gr.Slider(0, 1, value=1.0, step=0.05, label="audio cap (share of input)",
                                                  elem_id="audio-cap-slider", scale=2)
                        budget_plot = gr.Plot(initial["budget_plot"], show_label=False, format="png",
                                              elem_id="budget-plot", elem_classes=["d3-plot"])
                        with gr.Row():
                            cost_plot = gr.Plot(initial["cost_plot"], show_label=False, format="png",
                                                elem_id="cost-plot", elem_classes=["d3-plot"])
                            fps_plot = gr.Plot(initial["fps_plot"], show_label=False, format="png",
                                               elem_id="fps-plot", elem_classes=["d3-plot"])
                        with gr.Accordion("Solver inputs and outputs", open=False, elem_id="solver-accordion"):
                            solver_md = gr.Markdown(initial["solver_md"], elem_id="solver-md")
                    with gr.Tab("Interleave", id="interleave", elem_id="tab-interleave"):
                        timeline_plot = gr.Plot(initial["timeline_plot"], show_label=False, format="png",
                                                elem_id="timeline-plot", elem_classes=["d3-plot"])
                        stream = gr.HTML(initial["stream_html"], elem_id="stream-html")
                        with gr.Row(equal_height=False):
                            groups_df = gr.Dataframe(
                                value=initial["groups_df"], headers=views.GROUP_COLUMNS, interactive=False,
                                label="Groups (click a row to hear its audio)", max_height=260,
                                elem_id="groups-df", scale=3,
                            )
                            with gr.Column(scale=2, min_width=260):
                                segment_pick = gr.Dropdown(choices=[], value=None, label="Audio segment",
                                                           elem_id="segment-pick")
                                segment_audio = gr.Audio(label="What the model hears (16 kHz mono)",
                                                         interactive=False, elem_id="segment-audio")
                    with gr.Tab("Image grid", id="images", elem_id="tab-images"):
                        grid_info = gr.Markdown(initial["grid_info"], elem_id="grid-info")
                        grid_gallery = gr.Gallery(
                            value=initial["grid_gallery"], label="Patch and token grids", columns=3,
                            height=440, object_fit="contain", elem_id="grid-gallery",
                        )
                    with gr.Tab("Audio mel", id="mel", elem_id="tab-mel"):
                        mel_plot = gr.Plot(initial["mel_plot"], show_label=False, format="png",
                                           elem_id="mel-plot", elem_classes=["d3-plot"])
                        with gr.Row(equal_height=False):
                            mel_info = gr.Markdown(initial["mel_info"], elem_id="mel-info")
                            heard_audio = gr.Audio(label="What the model hears (16 kHz mono)",
                                                   interactive=False, elem_id="heard-audio")
        # ---------------------------------------------------- chat
        with gr.Accordion("Chat with the model", open=True, elem_id="chat-accordion"):
            chat_session = gr.State(chat.new_session)
            engine_md = gr.Markdown(chat.engine_status_md(engine), elem_id="engine-status")
            with gr.Row(equal_height=False):
                with gr.Column(scale=7, min_width=480):
                    chatbot = gr.Chatbot(handlers.chat_welcome(engine), show_label=False, height=520,
                                         elem_id="chatbot", buttons=["copy"],
                                         placeholder="The request the model gets = the media in the upload "
                                                     "panels + your message, planned with the Budget tab.")
                    with gr.Row(equal_height=True, elem_id="chat-input-row"):
                        chat_box = gr.Textbox(
                            show_label=False, scale=8, interactive=chat_on, elem_id="chat-input", lines=1,
                            placeholder="Ask about the uploads… (new uploads are attached to your next message)"
                            if chat_on else "Attach an engine to chat (see above)",
                        )
                        send = gr.Button("Send", variant="primary", scale=1, min_width=80, interactive=chat_on,
                                         elem_id="chat-send")
                        stop = gr.Button("Stop", variant="stop", scale=1, min_width=70, elem_id="chat-stop",
                                         interactive=chat_on)
                    with gr.Row():
                        regen = gr.Button("↻ Regenerate", size="sm", elem_id="chat-regen", interactive=chat_on)
                        clear = gr.Button("Clear chat", size="sm", elem_id="chat-clear")
                    figures_md = gr.Markdown("", elem_id="chat-figures")
                with gr.Column(scale=4, min_width=320):
                    system_box = gr.Textbox(chat.DEFAULT_SYSTEM_PROMPT, label="System prompt", lines=2,
                                            max_lines=6, elem_id="system-prompt")
                    with gr.Accordion("Sampling", open=False, elem_id="sampling-accordion"):
                        with gr.Row():
                            temperature = gr.Slider(0, 2, value=0.7, step=0.05, label="temperature",
                                                    elem_id="temperature")
                            top_p = gr.Slider(0.05, 1, value=0.95, step=0.01, label="top-p", elem_id="top-p")
                        with gr.Row():
                            top_k = gr.Number(-1, label="top-k (-1 = off)", precision=0, elem_id="top-k")
                            max_tokens = gr.Number(1024, label="max tokens", precision=0, minimum=1,
                                                   elem_id="max-tokens")
                        with gr.Row():
                            seed = gr.Number(-1, label="seed (-1 = random)", precision=0, elem_id="seed")
                            rep_penalty = gr.Slider(0.8, 2, value=1.0, step=0.01, label="repetition penalty",
                                                    elem_id="rep-penalty")
                    with gr.Accordion("Tools", open=True, elem_id="tools-accordion"):
                        tool_example = gr.Dropdown(list(chat.EXAMPLE_CHOICES), value=None, label="Load example tools",
                                                   elem_id="tool-examples")
                        tools_code = gr.Code("", language="json", label="tools (OpenAI function schemas)",
                                             lines=4, max_lines=9, elem_id="tools-json")
                        tools_md = gr.Markdown(chat.validate_tools_md(""), elem_id="tools-status")
                    tool_panel = gr.Dataframe(value=[], headers=chat.TOOL_PANEL_COLUMNS, interactive=False,
                                              wrap=True, label="Tool calls", max_height=220, elem_id="tool-panel",
                                              column_widths=["22%", "34%", "20%", "24%"])
                    tool_result = gr.Textbox(label="Tool result (answers the first waiting call)", lines=2,
                                             placeholder='{"temperature": 21}', elem_id="tool-result",
                                             interactive=chat_on)
                    with gr.Row():
                        tool_send = gr.Button("Send tool result", size="sm", elem_id="tool-send", interactive=chat_on)
                        tool_run = gr.Button("Run example tool", size="sm", elem_id="tool-run", interactive=chat_on)

        with examples_row:  # one click fills the upload panels (their .change inspects), chat box, tools
            examples.add_examples(video, images, audio_file, chat_box, tools_code, view_tabs=view_tabs)

        # ---------------------------------------------------- wiring
        components = {
            "summary": summary, "budget_plot": budget_plot, "reserve": reserve,
            "frames_info": frames_info, "frames_gallery": frames_gallery,
            "cost_plot": cost_plot, "fps_plot": fps_plot, "solver_md": solver_md,
            "timeline_plot": timeline_plot, "stream_html": stream, "groups_df": groups_df,
            "segment_pick": segment_pick, "segment_audio": segment_audio,
            "grid_info": grid_info, "grid_gallery": grid_gallery,
            "mel_plot": mel_plot, "mel_info": mel_info, "heard_audio": heard_audio,
        }
        outputs = [state, status, *(components[key] for key in VIEW_KEYS)]
        controls = [seq_slider, reserve_auto, reserve, max_new, audio_cap, k_mode]
        common = dict(outputs=outputs, concurrency_limit=INSPECT_CONCURRENCY, concurrency_id="inspect")

        video.change(partial(on_video, profile, limits=limits), [state, video, *controls], api_name="inspect_video",
                     show_progress="full", **common)
        for trigger, name in ((seq_slider.release, "set_seq"), (max_new.release, "set_max_new_tokens"),
                              (reserve.release, "set_reserve"), (audio_cap.release, "set_audio_cap"),
                              (k_mode.input, "set_k_mode"), (reserve_auto.input, "set_reserve_auto")):
            trigger(partial(on_settings, profile, limits=limits), [state, *controls], api_name=name,
                    show_progress="minimal", **common)
        reserve_auto.change(on_reserve_auto, reserve_auto, reserve, api_name="reserve_auto_toggle",
                            api_visibility="private", queue=False)
        images.change(partial(on_images, profile, limits=limits), [state, images], api_name="inspect_images", **common)
        audio_file.change(partial(on_audio_file, profile, limits=limits), [state, audio_file],
                          api_name="inspect_audio", **common)
        audio_mic.change(partial(on_audio_mic, profile, limits=limits), [state, audio_mic], api_name="inspect_recording",
                         **common)
        segment_pick.change(on_segment, [state, segment_pick], segment_audio, api_name="segment_audio")
        groups_df.select(on_group_select, state, segment_pick, api_name="group_select", api_visibility="private")
        # The engine plans the video with max_new_tokens = the sampling max tokens: mirror it in the Budget tab.
        gr.on([max_tokens.blur, max_tokens.submit], sync_max_new, max_tokens, max_new, api_visibility="private",
              queue=False).then(
            partial(on_settings, profile, limits=limits), [state, *controls], api_name="sync_max_new_tokens",
            api_visibility="private", show_progress="hidden", **common)
        tool_example.input(chat.example_tools_json, tool_example, tools_code, api_visibility="private", queue=False)
        tools_code.change(chat.validate_tools_md, tools_code, tools_md, api_visibility="private", queue=False)

        chat_controls = [system_box, tools_code, temperature, top_p, top_k, max_tokens, seed, rep_penalty]
        chat_out = [chatbot, chat_session, chat_box, tool_panel, figures_md, engine_md, send]
        tool_out = [chatbot, chat_session, tool_result, tool_panel, figures_md, engine_md, send]
        chat_common = dict(concurrency_limit=chat_concurrency(engine), concurrency_id="chat",
                           show_progress="minimal")
        chat_in = [state, chat_session, chat_box, *chat_controls]
        tool_in = [state, chat_session, tool_result, *chat_controls]
        locked = dict(fn=partial(lock_send, engine), inputs=None, outputs=send, queue=False,
                      api_visibility="private", show_progress="hidden")
        stream_chat, stream_tool = chat_out[:-1], tool_out[:-1]  # all but Send: see _relay
        events = [
            send.click(**locked).then(partial(on_chat, engine, pacer), chat_in, stream_chat, api_name="chat",
                                      **chat_common),
            chat_box.submit(**locked).then(partial(on_chat, engine, pacer), chat_in, stream_chat,
                                           api_name="chat_submit", api_visibility="private", **chat_common),
            regen.click(**locked).then(partial(on_regenerate, engine, pacer), chat_in, stream_chat,
                                       api_name="regenerate", **chat_common),
            tool_send.click(**locked).then(partial(on_tool_result, engine, pacer), tool_in, stream_tool,
                                           api_name="tool_result", **chat_common),
            tool_run.click(**locked).then(partial(on_run_tool, engine, pacer), tool_in, stream_tool,
                                          api_name="run_example_tool", **chat_common),
        ]
        for event, out in zip(events, [chat_out] * 3 + [tool_out] * 2):  # no red "Error" badge after Stop
            event.then(partial(on_chat_settle, engine), chat_session, [o for o in out if o is not chat_session],
                       show_progress="hidden", api_visibility="private", queue=False)
        stop.click(None, None, None, cancels=events, api_visibility="private")
        clear.click(on_clear, chat_session, [chatbot, chat_session, tool_panel, figures_md], cancels=events,
                    api_name="clear_chat", api_visibility="private", queue=False)
        demo.load(partial(on_engine_status, engine), None, engine_md, api_visibility="private", queue=False)
        reaper.watch(demo)  # a closed tab's session goes closed_session_ttl seconds later
    return demo


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
    return {"theme": style.theme(), "css": style.CSS, "head": head, "max_file_size": limits.max_file_bytes}


def launch_app(profile: Profile, engine: Any = None, *, host: str = "127.0.0.1", port: int | None = 7860,
               seq: int, limits: UploadLimits = UploadLimits(),
               closed_session_ttl: float = DEFAULT_CLOSED_SESSION_TTL_S, **launch_kwargs: Any):
    """Build the studio and serve it (blocks unless ``prevent_thread_lock=True`` is passed).

    ``limits``: what uploads may be (Gradio enforces the file size, the handlers the rest);
    ``closed_session_ttl``: seconds a closed tab's session is kept (``dots3_demo.ui.sessions``).
    glibc's allocator is tuned first, before the server's threads exist, and trimmed every 30 s from
    then on (``dots3_demo.memory``)."""
    tune_allocator()
    start_periodic_trim()  # a daemon thread, for the life of the process
    for name, value in QUEUE_ANALYTICS_ENV.items():  # read when the queue is made; the operator's value wins
        os.environ.setdefault(name, value)
    demo = build_interface(profile, engine, seq=seq, limits=limits, closed_session_ttl=closed_session_ttl)
    demo.queue(max_size=queue_size(engine))
    options = {**launch_options(limits), "server_name": host, "server_port": port, **launch_kwargs}
    # GET /healthz and /readyz (dots3_demo.ui.health), mounted when the server starts.
    options["app_kwargs"] = app_kwargs_with_health(options.get("app_kwargs"), engine, profile.name)
    result = demo.launch(**options)
    return demo if launch_kwargs.get("prevent_thread_lock") else result
