"""A new browser session's server-side state, made from a copy rather than from scratch.

Gradio makes a ``SessionState`` for a session at its first request (``queue/join`` of its first
event): it re-reads the config of every component of the app (``config_for_block`` for each of the
studio's ~190 blocks: ``inspect.signature`` of each class and pydantic's JSON schemas), 13 ms of
the event loop's CPU on a 2-core box and 40 ms under load. While it runs nothing else on the loop
does, so N sessions that send at once start their replies one such step after another: with 8 and 32
at once, the first token reached the page 0.2 s and 0.6 s after the request (``benchmarks.stream_bench``;
on an H200, +1 s against vLLM's own server, issue 19 item 5).

:class:`QuickSessions` makes that config once (the first time a session is needed) and gives each
new session its own copy of it (a pickle round trip: ~1 ms), the rest of the session as Gradio makes
it. :func:`install` puts it in a launched app in place of Gradio's ``StateHolder``.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import gradio as gr
from gradio.state_holder import SessionState, StateHolder


class QuickSessions(StateHolder):
    """Gradio's ``StateHolder``, with new sessions copied from one made by Gradio itself."""

    def __init__(self) -> None:
        super().__init__()
        self._template: SessionState | None = None
        self._config: bytes = b""

    def fresh(self) -> SessionState:
        """A new session's state: what ``SessionState(blocks)`` makes, without re-reading every config."""
        if self._template is None:
            self._template = SessionState(self.blocks)
            self._config = pickle.dumps(self._template.config_values, protocol=pickle.HIGHEST_PROTOCOL)
        state = copy.copy(self._template)  # Gradio's other attributes as it sets them
        state.blocks_config = copy.copy(self.blocks.default_config)  # what SessionState.__init__ does
        state.config_values = pickle.loads(self._config)
        state.state_data = {}
        state._state_ttl = {}
        state.is_closed = False
        return state

    def __getitem__(self, session_id: str) -> SessionState:
        if session_id not in self.session_data:
            self.session_data[session_id] = self.fresh()
        return super().__getitem__(session_id)


def install(demo: gr.Blocks) -> QuickSessions:
    """Put :class:`QuickSessions` in ``demo``'s server (after ``launch``: the server's app exists) and make its
    template now, so that no visitor's first request pays for it."""
    holder = QuickSessions()
    holder.set_blocks(demo)  # demo.state_holder
    app: Any = demo.server_app
    app.state_holder = holder
    holder.fresh()
    return holder
