"""The context meter under the chat input: the next turn's prompt tokens (``core.context``: the conversation so far,
the typed message, the panel media not yet sent) against the engine's ``max_model_len`` (a remote server's, from its
``/v1/models``) and the reply's max tokens; and the check that refuses a turn that will not fit before it is sent
(the typed message stays in the box).

A slice of its own: ``render_meter`` lays the line out, ``setup_meter_events`` updates it when the message box
(its last change only, never queued behind a reply), the uploads, the turn settings or the conversation change.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from typing import Any

import gradio as gr

from dots3_demo.core import context
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import ChatSession, StudioState, current_session
from dots3_demo.engine.protocol import CONTEXT_HINT, ChatEngine
from dots3_demo.profiles import Profile
from dots3_demo.ui import layout

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Meter:
    """What the meter counts with: the model's tokenizer and chat template (the profile's), and the engine's context
    (None: no engine; the profile's ``max_model_len`` is shown then)."""

    profile: Profile
    engine: ChatEngine | None

    @property
    def max_model_len(self) -> int | None:
        if self.engine is not None:
            return self.engine.max_model_len
        return self.profile.max_model_len

    def count(self, studio: StudioState, session: ChatSession, text: str | None,
              settings: ChatSettings) -> context.ContextCount | None:
        return context.next_turn(self.profile.tokenizer, studio, current_session(session), text, settings,
                                 self.max_model_len)

    def refusal(self, studio: StudioState, session: ChatSession, text: str | None, settings: ChatSettings) -> str:
        """Why the next turn cannot be sent ("" when it can, or when it cannot be counted: the turn is then
        refused, if at all, in its own words)."""
        try:
            counted = self.count(studio, session, text, settings)
        except Exception:
            logger.exception("context meter failed")
            return ""
        if counted is None or counted.fit != "will not fit":
            return ""
        return f"{counted.message()} Not sent; your message is still in the box. {CONTEXT_HINT}"


def meter_html(counted: context.ContextCount | None) -> str:
    """The meter's line: a bar (prompt, the reply's room) and the words."""
    if counted is None:
        return '<div class="d3-meter" data-fit="unknown">context: the tools JSON is not usable</div>'
    limit = counted.max_model_len or 0
    prompt_pct = min(100.0, 100.0 * counted.prompt / limit) if limit else 0.0
    reply_pct = min(100.0 - prompt_pct, 100.0 * (counted.reply_room or 0) / limit) if limit else 0.0
    return (f'<div class="d3-meter" data-fit="{html.escape(counted.fit)}" data-prompt="{counted.prompt}" '
            f'data-max-model-len="{limit}">'
            f'<div class="d3-meter-bar" role="img" aria-label="context used" '
            f'title="the context: {limit:,} tokens (max_model_len)">'
            f'<span class="d3-meter-prompt" style="width:{prompt_pct:.2f}%"></span>'
            f'<span class="d3-meter-reply" style="width:{reply_pct:.2f}%"></span></div>'
            f'<div class="d3-meter-text">{"⚠ " if counted.fit in ("will not fit", "reply cut") else ""}'
            f'{html.escape(counted.message())}</div></div>')


CSS = """
#context-meter { margin-top: -10px !important; }  /* one line tucked under the figures: the chat keeps its height */
.d3-meter { display: flex; align-items: center; gap: 8px; font-size: 12px; margin: 0; }
.d3-meter-bar { display: flex; flex: 0 0 120px; height: 6px; background: var(--neutral-200, #e5e7eb);
  border-radius: 3px; overflow: hidden; }
.d3-meter-text { flex: 1 1 auto; min-width: 0; }
.d3-meter-prompt { background: #2563eb; }
.d3-meter-reply { background: #93c5fd; }
.d3-meter[data-fit="reply cut"] .d3-meter-reply { background: #f59e0b; }
.d3-meter[data-fit="will not fit"] .d3-meter-prompt { background: #dc2626; }
.d3-meter[data-fit="will not fit"] .d3-meter-text { color: #b91c1c; font-weight: 600; }
"""


def render_meter() -> gr.HTML:
    """The meter's line (empty until the page loads)."""
    return gr.HTML("", elem_id="context-meter", padding=False)


def on_meter(meter: Meter, studio: StudioState, session: ChatSession, text: str | None, *controls: Any) -> str:
    """The meter's line for the controls as they stand (``layout.ChatControls``' values, in its field order)."""
    from dots3_demo.core.settings import chat_settings_from_controls

    settings = chat_settings_from_controls(**layout.ChatControls.named(controls))
    try:
        return meter_html(meter.count(studio, session, text, settings))
    except Exception as exc:
        logger.exception("context meter failed")
        return f'<div class="d3-meter" data-fit="unknown">context meter: {html.escape(str(exc))}</div>'


def setup_meter_events(line: gr.HTML, panel: layout.ChatPanel, chat_controls: layout.ChatControls,
                       studio: gr.State, meter: Meter, after: list[Any]) -> None:
    """Update ``line`` on the box's last change, the turn settings and after every event in ``after`` (an
    upload's result, a reply, Clear).

    Not on ``studio.change``: Gradio tracks a State with a change listener by hashing its value before and after
    every event that writes it, and the studio's frozen state holds lists (unhashable; every inspection failed)."""
    inputs = [studio, panel.session, panel.box, *chat_controls.components()]
    options: dict[str, Any] = dict(fn=lambda *values: on_meter(meter, *values), inputs=inputs, outputs=line,
                                   api_visibility="private", show_progress="hidden", queue=False,
                                   trigger_mode="always_last")
    triggers = [panel.box.change, chat_controls.max_tokens.change, chat_controls.system_prompt.blur,
                chat_controls.tools_json.blur]
    gr.on(triggers, **options)
    for event in after:
        event.then(**options)
