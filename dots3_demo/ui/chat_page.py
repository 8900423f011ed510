"""The chat slice: the conversation, its rating row, the turn settings (system prompt, sampling, tools) and the
tool panel, laid out (``render_*``) and wired (``setup_chat_events``, ``setup_rating_events``) side by side. The turns
are ``chat``'s (which builds and accumulates them with ``dots3_demo.core``), what it shows ``chat_views``'.

Every streaming chat event (Send, Enter, Regenerate, "↻ from this reply", a tool result, Run example tool) is one
body (``_stream``): the session as it stands (a Clear since wins), the controls read as settings, the replies relayed
as ``layout.ChatStream`` steps; they differ only in what they ask ``chat`` for.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import gradio as gr
from gradio.data_classes import GradioModel, GradioRootModel
from gradio.events import Dependency

from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.settings import ChatSettings, chat_settings_from_controls
from dots3_demo.core.state import ChatSession, StudioState, clear_session, current_session, new_session
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.tools.forcing import TOOL_CHOICES
from dots3_demo.ui import chat, chat_views, context_meter, layout, record_page, style, views
from dots3_demo.ui.layout import Listen, Options

if TYPE_CHECKING:
    from gradio.components.chatbot import Message, MessageDict


def render_chat(engine: ChatEngine | None, *, chat_on: bool, engine_status: str, watch_engine: bool,
                max_tokens: int) -> tuple[layout.ChatPanel, layout.ChatControls, layout.ToolsPanel]:
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
                        mode: layout.Mode = "preview") -> layout.ChatPanel:
    """The engine line, the conversation, the question box and what acts on the replies (rate, regenerate
    from one, export and import the session), the figures line last."""
    session = gr.State(new_session)
    status = gr.Markdown(engine_status, elem_id="engine-status")
    timer = gr.Timer(1.0, active=watch_engine)
    conversation = _render_conversation(engine, chat_on=chat_on, height=layout.CHATBOT_HEIGHT[mode])
    return layout.ChatPanel(session=session, engine_status=status, engine_timer=timer, **conversation)


def _render_conversation(engine: ChatEngine | None, *, chat_on: bool, height: int) -> dict[str, Any]:
    welcome: list[MessageDict | Message] = list(chat_views.chat_welcome(engine))  # the Chatbot's own value type
    chatbot = gr.Chatbot(welcome, show_label=False, height=height, elem_id="chatbot",
                         buttons=["copy"],
                         placeholder="The request the model gets = the media in the upload panels + your message, "
                                     "planned with the Budget tab.")
    figures = gr.Markdown("", elem_id="chat-figures")  # the reply's figures, under it
    meter = context_meter.render_meter()  # the next turn's tokens against the context, above the box
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
        record_buttons = record_page.render_record_buttons()
    record = layout.RecordPanel(**record_buttons, status=gr.Markdown("", elem_id="record-status"))
    rating = _render_rating(chat_on=chat_on)
    return dict(chatbot=chatbot, message=_taken_input(box, "chat-message"), send=send, stop=stop,
                regenerate=regenerate, clear=clear, figures=figures, rating=rating, record=record, meter=meter)


def _taken_input(box: gr.Textbox, elem_id: str) -> layout.TakenInput[Any]:
    """``box`` with the hidden text a streaming event sends from it and whether a turn took it
    (``layout.TakenInput``)."""
    return layout.TakenInput(box=box, sent=gr.Textbox(visible=False, elem_id=elem_id), taken=gr.State(True))


def _render_rating(*, chat_on: bool) -> layout.RatingPanel:
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
    return layout.RatingPanel(reply=reply, up=up, down=down, note=note, save_note=save_note,
                              regenerate_from=regenerate_from, status=status)


# The sampling sliders' ends: the page draws the sliders with them, and a value sent past one refuses the turn,
# naming it (the chat's events read their inputs as sent: setup_chat_events).
SLIDER_RANGES = {"temperature": (0, 2), "top_p": (0.05, 1), "repetition_penalty": (0.8, 2)}


def render_quick_sampling(engine: ChatEngine | None, *, max_tokens: int) -> layout.QuickSampling:
    """Temperature, max tokens and seed (work layout: under the upload panels, in the first screen)."""
    with gr.Group(elem_id="quick-sampling", elem_classes=["d3-quick"]):
        temperature = gr.Slider(*SLIDER_RANGES["temperature"], value=0.7, step=0.05, label="temperature",
                                elem_id="temperature")
        with gr.Row():
            max_tokens_box = gr.Number(max_tokens, label="max tokens", precision=0, minimum=1,
                                       maximum=engine.max_model_len if engine else None, elem_id="max-tokens",
                                       min_width=90)
            seed = gr.Number(-1, label="seed (-1 = random)", precision=0, elem_id="seed", min_width=90)
    return layout.QuickSampling(temperature=temperature, max_tokens=max_tokens_box, seed=seed)


def render_turn_settings(engine: ChatEngine | None, *, chat_on: bool, max_tokens: int,
                         quick: layout.QuickSampling | None = None) -> tuple[layout.ChatControls, layout.ToolsPanel]:
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
            top_p = gr.Slider(*SLIDER_RANGES["top_p"], value=0.95, step=0.01, label="top-p", elem_id="top-p")
            top_k = gr.Number(-1, label="top-k (-1 = off)", precision=0, elem_id="top-k")
        repetition_penalty = gr.Slider(*SLIDER_RANGES["repetition_penalty"], value=1.0, step=0.01,
                                       label="repetition penalty", elem_id="rep-penalty")
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
    controls = layout.ChatControls(system_prompt=system_prompt, tools_json=tools_json, temperature=temperature,
                                   top_p=top_p, top_k=top_k, max_tokens=max_tokens_box, seed=seed,
                                   repetition_penalty=repetition_penalty, tool_choice=tool_choice)
    tools = layout.ToolsPanel(example=example, status=tools_status, panel=panel,
                              tool_result=_taken_input(result, "tool-result-sent"), send=send, run=run)
    return controls, tools


@dataclass(frozen=True)
class StreamedOutputs:
    """The streaming chat event's outputs, post-processed here rather than by Gradio (``postprocess=False`` on the
    event). Gradio hands each output of each streamed step to a worker thread for its ``postprocess``, one after
    another, and waits for each: four thread hops a step (the States it keeps itself), behind every other reply's.
    Here each component's own ``postprocess`` runs on the event loop, and its result is serialized as Gradio
    serializes it; Gradio then stores it and moves its files to the cache as it would."""

    components: layout.ChatStream

    def values(self, step: layout.ChatStream) -> tuple[Any, ...]:
        return tuple(_postprocessed(component, value)
                     for component, value in zip(self.components.components(), step.components(), strict=True))


def _postprocessed(component: Any, value: Any) -> Any:
    """``value`` as Gradio's ``postprocess_data`` makes it for ``component`` (a State's and an update's: as given)."""
    if component.stateful or (isinstance(value, dict) and value.get("__type__") == "update"):
        return value
    data = component.postprocess(value)
    return data.model_dump() if isinstance(data, GradioModel | GradioRootModel) else data


async def _relay(engine: ChatEngine | None, replies: AsyncGenerator[chat.ChatView, None],
                 shown: StreamedOutputs | None = None) -> AsyncGenerator[tuple[Any, ...], None]:
    """Chat views → one ``layout.ChatStream`` of values per step, in the event's output order.

    Neither the Send button nor the box is an output of the streaming event: ``take_input`` disables the
    one and empties the other before the event starts, ``on_chat_settle`` enables it and puts back a text
    no turn took after. Gradio builds a new component object for every component update in every streamed
    step, a ``gr.skip()`` included (the box's, at every step but the first: about a tenth of the app's
    time with 32 replies streaming), so leaving them out keeps each step cheap; a ``gr.State`` costs none.
    """
    async with contextlib.aclosing(replies) as stream:
        async for view in stream:
            if view.session.stale:  # cleared while it streamed: closing the reply aborts its engine request
                return
            step = layout.ChatStream(chatbot=view.history, session=view.session,
                                     taken=True if view.clear_input else gr.skip(), tool_panel=view.tool_rows,
                                     figures=view.figures, engine_status=chat_views.engine_status(engine))
            yield shown.values(step) if shown is not None else tuple(step.components())


def _held(interactive: bool) -> tuple[Any, ...]:
    """``layout.HeldByReply``'s updates: all enabled or all disabled."""
    return tuple(gr.update(interactive=interactive) for _ in layout.HeldByReply.names())


def lock_send(engine: ChatEngine | None) -> tuple[Any, ...]:
    """Disable Send, and what a reply's last step would undo (rating it, regenerating from a reply,
    importing a session), while a reply streams (runs before the chat event; ``on_chat_settle`` undoes it)."""
    return (gr.skip(),) * len(layout.HeldByReply.names()) if engine is None else _held(False)


def take_input(engine: ChatEngine | None, text: Any) -> tuple[Any, ...]:
    """Before an event that sends a box's text (``layout.TakenInput``): ``lock_send``'s updates, then the box
    emptied, its text as the event's input, not yet taken. The text is the browser's, read when the button was
    pressed: a turn still waiting for a free slot has it, whatever the box holds by then."""
    return (*lock_send(engine), "", text, False)


def leave_input(engine: ChatEngine | None) -> tuple[Any, ...]:
    """Before an event that sends no box's text but writes its ``taken`` (Run example tool, beside the tool-result
    box): ``lock_send``'s updates, and nothing to give back after it — the box is left as the visitor has it."""
    return (*lock_send(engine), True)


def _chat_settings(pacer: StreamPacer, controls: tuple) -> ChatSettings:
    """The values of ``layout.ChatControls``' components, in its field order, as chat settings."""
    settings = chat_settings_from_controls(**layout.ChatControls.named(controls), bounds=SLIDER_RANGES)
    return replace(settings, pacer=pacer)


ChatAction = Literal["send", "regenerate", "regenerate_from", "tool_result", "run_tool"]


async def _said(view: chat.ChatView) -> AsyncGenerator[chat.ChatView, None]:
    yield view


def _replies(action: ChatAction, engine: ChatEngine | None, studio: StudioState, session: ChatSession, value: Any,
             settings: ChatSettings, meter: context_meter.Meter | None = None) -> AsyncGenerator[chat.ChatView, None]:
    """What ``action`` asks ``chat`` for; ``value`` is the event's third input (the message, the picked reply or the
    tool result, as ``take_input`` handed it on; the other events pass the box's and ignore it). A message that
    will not fit the context (``meter``) is refused before it is sent, and goes back in the box."""
    if action == "send" and engine is not None and meter is not None and not settings.problem:
        if refusal := meter.refusal(studio, session, value, settings):
            return _said(chat.said(session, f"⚠ {views.esc(refusal)}"))
    if action == "send":
        return chat.send_message(engine, studio, session, value, settings)
    if action == "regenerate":
        return chat.regenerate(engine, studio, session, settings)
    if action == "regenerate_from":
        return chat.regenerate_from(engine, studio, session, chat_views.reply_number(value), settings)
    return chat.send_tool_results(engine, studio, session, settings, result=value if action == "tool_result" else None,
                                  run_examples=action == "run_tool")


async def on_turn(action: ChatAction, engine: ChatEngine | None, pacer: StreamPacer, studio: StudioState,
                  session: ChatSession, value: Any, *controls: Any,
                  meter: context_meter.Meter | None = None,
                  shown: StreamedOutputs | None = None) -> AsyncGenerator[tuple[Any, ...], None]:
    """Every streaming chat event's one body: the session as it stands (cleared since it was written: the empty
    chat), the controls (``layout.ChatControls``' values, in its field order) read as settings, the replies relayed
    as ``layout.ChatStream`` steps (closed with ``aclosing``: a Stop or a closed tab aborts the engine request).

    The inputs come as the page (or an API call) sent them, not preprocessed (``setup_chat_events``): ``value`` is
    made text as a Textbox makes it, and the controls are read by ``chat_settings_from_controls``, which takes
    numbers as sent and refuses the turn, saying which control, when one is not a number or a slider's value is
    past its ends (``SLIDER_RANGES``)."""
    settings = _chat_settings(pacer, controls)
    text = None if value is None else str(value)
    replies = _replies(action, engine, studio, current_session(session), text, settings, meter)
    async with contextlib.aclosing(_relay(engine, replies, shown)) as relayed:
        async for outputs in relayed:
            yield outputs


# The streaming events, each ``on_turn`` for one action (bound further with the engine and the pacer when wired):
on_chat = partial(on_turn, "send")  # Send or Enter: the message with the panel media not yet sent
on_regenerate = partial(on_turn, "regenerate")  # ↻ Regenerate: the last reply again
on_regenerate_from = partial(on_turn, "regenerate_from")  # ↻ from this reply: the picked reply again
on_tool_result = partial(on_turn, "tool_result")  # Send tool result: it answers the first waiting call
on_run_tool = partial(on_turn, "run_tool")  # Run example tool: the example tools answer the waiting calls


# What the settle step and Clear update, in their output order.
SETTLE_OUTPUTS = (*layout.ChatStream.names(), *layout.HeldByReply.names(), "reply_picker", "rating_status", "box")


def on_chat_settle(engine: ChatEngine | None, session: ChatSession, taken: bool = True, sent: Any = None,
                   box: Any = None) -> tuple[Any, ...]:
    """After a chat event ends or is stopped: re-show the session (its figures line too: a reply stopped
    mid-stream says ``⏹ stopped``, not ``streaming…``) and re-enable Send. A text the event was sent with
    (``layout.TakenInput``) that no turn took — refused, or stopped before it was sent — goes back in its box.

    It outputs to every output of the chat event, so none is left with the red "Error" badge a
    cancelled event sometimes leaves on its outputs (what ChatInterface does for its chatbot). It is the
    last to write the session: a Clear that arrived while the reply streamed wins over the reply's last
    step (``state.ChatClears``).
    """
    given_back = _given_back(taken, sent, box)  # ``box``: the event's box (``layout.TakenInput``), as the page has it
    if engine is None:
        skipped = dict.fromkeys(SETTLE_OUTPUTS, gr.skip()) | {"taken": True, "box": given_back}
        return tuple(skipped.values())
    shown = current_session(session)  # a Clear during the reply wins over the reply's last step
    # The session's figures line: a stopped reply's says so (``chat.ChatView``), a cleared chat's is empty.
    step = layout.ChatStream(chatbot=list(shown.display), session=shown, taken=True,
                             tool_panel=chat_views.tool_rows(shown), figures=shown.figures,
                             engine_status=chat_views.engine_status(engine))
    picker, line = _reply_picker(shown)
    held = dict(zip(layout.HeldByReply.names(), _held(True), strict=True))
    latest_note = chat_views.note_of(shown, chat_views.picked_reply(shown))
    held["rate_note"] = gr.update(interactive=True, value=latest_note)  # the latest reply's note
    return (*step.components(), *held.values(), picker, line, given_back)


def _given_back(taken: bool, sent: Any, box: Any) -> Any:
    """The box after an event that did not take its text ``sent``: that text again, before whatever was typed in
    the box since (nothing is lost); unchanged when the turn took it."""
    if taken or not sent:
        return gr.skip()
    typed = "" if box is None else str(box)
    return str(sent) if not typed or typed == str(sent) else f"{sent}\n{typed}"


CLEAR_OUTPUTS = ("chatbot", "session", "tool_panel", "figures", "reply_picker", "rating_status", "rating_note")


def _reply_picker(session: ChatSession, reply: int | None = None) -> tuple[gr.Dropdown, str]:
    """The reply picker on ``reply`` (None: the latest reply) and what the rating line says of it."""
    picked = chat_views.picked_reply(session, reply)
    return gr.Dropdown(choices=chat_views.reply_choices(session), value=picked), chat_views.rating_md(session, picked)


def on_clear(session: ChatSession) -> tuple[Any, ...]:
    """The empty conversation: the chat, the tool panel, the figures and the rating controls emptied."""
    fresh = clear_session(session)
    return ([], fresh, [], "", *_reply_picker(fresh), "")


def _rating_change(session: ChatSession, reply: Any, change: Callable[[ChatSession, int | None], ChatSession]
                   ) -> tuple[Any, ...]:
    """``(session, picker, rating line)`` after ``change``; a reply the conversation does not have leaves the
    session as it was and says so on the rating line."""
    number = chat_views.reply_number(reply)
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
    return chat_views.note_of(session, reply), chat_views.rating_md(session, chat_views.reply_number(reply))


def setup_chat_events(panel: layout.ChatPanel, chat_controls: layout.ChatControls, tools: layout.ToolsPanel,
                      studio: gr.State, *, engine: ChatEngine | None, pacer: StreamPacer,
                      concurrency: int | None, meter: context_meter.Meter | None = None,
                      inspected: Sequence[Dependency] = ()) -> list[Dependency]:
    """The chat's events (``concurrency``: replies at once, app-wide); returns the streaming ones (a reply each).
    ``meter``: the context meter (``ui.context_meter``) shown above the box and checked before a message is sent,
    recounted after each of ``inspected`` (the uploads' results written to ``studio``)."""
    tools.example.input(chat_views.example_tools_json, tools.example, chat_controls.tools_json,
                        api_visibility="private", queue=False)
    chat_controls.tools_json.change(chat_views.validate_tools_md, chat_controls.tools_json, tools.status,
                                    api_visibility="private", queue=False)
    controls = chat_controls.components()  # the chat callbacks read them by layout.ChatControls' field names
    # The streamed outputs (neither Send nor the box: see _relay); the tool events take the tool-result box's text.
    message, result = panel.message, tools.tool_result
    chat_out = layout.ChatStream(chatbot=panel.chatbot, session=panel.session, taken=message.taken,
                                 tool_panel=tools.panel, figures=panel.figures, engine_status=panel.engine_status)
    tool_out = replace(chat_out, taken=result.taken)
    chat_in = [studio, panel.session, message.sent, *controls]  # /chat's message: the text take_input moved there
    tool_in = [studio, panel.session, result.sent, *controls]
    rating = panel.rating
    regen_in = [studio, panel.session, rating.reply, *controls]
    # preprocess=False: the callbacks read the inputs as the page sends them (``on_turn``). Gradio's preprocessing
    # handed each input to a worker thread in turn, ten per reply, behind every reply's streamed steps: with 8
    # replies starting at once that was ~45 ms of each reply's wait for its first token, with 32 ~190 ms.
    chat_common = Options(concurrency_limit=concurrency, concurrency_id="chat",
                           show_progress="minimal", preprocess=False, postprocess=False)
    held = panel.held.components()
    locked = Listen(fn=partial(lock_send, engine), inputs=None, outputs=held, queue=False,
                     api_visibility="private", show_progress="hidden")
    take_message, take_result = locked.copy(), locked.copy()  # Send and Enter, Send tool result: the box emptied
    for take, taken_input in ((take_message, message), (take_result, result)):
        take["fn"], take["inputs"] = partial(take_input, engine), taken_input.box
        take["outputs"] = [*held, *taken_input.components()]
    leave_result = locked.copy()  # Run example tool: the examples answer, the tool-result box keeps its text
    leave_result["fn"], leave_result["outputs"] = partial(leave_input, engine), [*held, result.taken]
    asking = locked.copy()  # "↻ from this reply" asks first when it would drop a rating or a note (no: nothing runs)
    asking["js"] = style.CONFIRM_REGENERATE_FROM_JS
    streams = (  # (trigger, step before, callback, inputs, outputs, its box, API name, visibility)
        (panel.send.click, take_message, on_chat, chat_in, chat_out, message, "chat", "public"),
        (panel.box.submit, take_message, on_chat, chat_in, chat_out, message, "chat_submit", "private"),
        (panel.regenerate.click, locked, on_regenerate, chat_in, chat_out, message, "regenerate", "public"),
        (rating.regenerate_from.click, asking, on_regenerate_from, regen_in, chat_out, message, "regenerate_from",
         "public"),
        (tools.send.click, take_result, on_tool_result, tool_in, tool_out, result, "tool_result", "public"),
        (tools.run.click, leave_result, on_run_tool, tool_in, tool_out, result, "run_example_tool", "public"),
    )
    events: list[Any] = []
    settles: list[Any] = []
    for trigger, first, callback, inputs, outputs, taken_input, name, visibility in streams:
        event = trigger(**first).then(partial(callback, engine, pacer, meter=meter, shown=StreamedOutputs(outputs)),
                                      inputs, outputs.components(),
                                      api_name=name, api_visibility=visibility, **chat_common)
        settled = event.then(partial(on_chat_settle, engine),
                             [panel.session, taken_input.taken, taken_input.sent, taken_input.box],
                             [*outputs.components(), *held, rating.reply, rating.status, taken_input.box],
                             show_progress="hidden", api_visibility="private", queue=False)  # no red "Error" badge
        events.append(event)
        settles.append(settled)
    panel.stop.click(None, None, None, cancels=events, api_visibility="private")
    # Both ways the page offers to clear the chat — the Clear button and the Chatbot's own trash icon (which
    # empties the bubbles in the browser, then sends .clear) — clear the conversation the model gets, the
    # rating row, and a reply that still streams (ChatClears).
    cleared = [panel.chatbot, panel.session, tools.panel, panel.figures, rating.reply, rating.status, rating.note]
    cleared_event = panel.clear.click(on_clear, panel.session, cleared, cancels=events, api_name="clear_chat",
                                      api_visibility="private", queue=False)
    icon_event = panel.chatbot.clear(on_clear, panel.session, cleared, cancels=events, api_name="clear_chat_icon",
                                     api_visibility="private", queue=False)
    if meter is not None:
        context_meter.setup_meter_events(panel.meter, panel, chat_controls, studio, meter,
                                         [*inspected, *settles, cleared_event, icon_event])
    setup_rating_events(panel)
    return events


def setup_rating_events(panel: layout.ChatPanel) -> None:
    """👍/👎 and the note on the picked reply (kept in the session: ``ChatSession.ratings``)."""
    rating, session = panel.rating, panel.session
    quick = Options(outputs=[session, rating.reply, rating.status], queue=False, show_progress="hidden")
    rating.up.click(on_rate_up, [session, rating.reply], api_name="rate_up", **quick)
    rating.down.click(on_rate_down, [session, rating.reply], api_name="rate_down", **quick)
    gr.on([rating.save_note.click, rating.note.submit], on_rate_note, [session, rating.reply, rating.note],
          api_name="rate_note", **quick)
    picked = rating.reply.input(on_pick_reply, [session, rating.reply], [rating.note, rating.status],
                                api_visibility="private", queue=False, show_progress="hidden")
    picked.then(None, js=style.SHOW_PICKED_REPLY_JS, api_visibility="private", queue=False)  # scroll the chat to it
