"""A new browser session's server-side state, made from a copy rather than from scratch.

Gradio makes a ``SessionState`` for a session at its first request (``queue/join`` of its first
event): it re-reads the config of every component of the app (``config_for_block`` for each of the
studio's ~190 blocks: ``inspect.signature`` of each class and pydantic's JSON schemas), 13 ms of
the event loop's CPU on a 2-core box and 40 ms under load. While it runs nothing else on the loop
does, so N sessions that send at once start their replies one such step after another: with 8 and 32
at once, the first token reached the page 0.2 s and 0.6 s after the request (``benchmarks.stream_bench``;
on an H200, +1 s against vLLM's own server, issue 19 item 5).

:class:`QuickSessions` makes that config once (the first time a session is needed) and gives each
new session a view of it (:class:`ConfigCopies`) that copies a block's entry the first time the session
reads it — Gradio writes into the entries of an event's inputs and outputs only, so a session copies a
few of ~190 —, the rest of the session as Gradio makes it. Copying the whole config per session (a
pickle round trip, ~1–2 ms alone) made ~3,000 objects per new session; with 32 sessions starting at
once on a loaded 2-core box py-spy found it the largest cost on the event loop (allocation triggers
collections over vLLM's and Gradio's whole heap). Its sessions (:class:`QuickSession`) also store a ``gr.State``'s
value without re-reading the State's config, which Gradio did at every streamed step of every reply.
:func:`install` puts it in a launched app in place of Gradio's ``StateHolder``.
"""

from __future__ import annotations

import copy
import datetime
import pickle
from collections.abc import Iterator
from typing import Any

import gradio as gr
from gradio.components import State
from gradio.state_holder import SessionState, StateHolder


class ConfigCopies(dict[int, Any]):
    """A session's ``config_values``: the template's entries, each copied into this session the first time
    it is read (``[key]``, ``get``, ``values``, ``items``: Gradio changes an entry in place after reading it,
    ``config_values[key]["props"]["value"] = …``), so no session sees another's values. ``pickled`` holds
    each entry pickled once (unpickling the chat event's 18 entries: 0.16 ms; ``copy.deepcopy``: 0.54 ms)."""

    def __init__(self, template: dict[int, Any], pickled: dict[int, bytes]) -> None:
        super().__init__(template)
        self._pickled = pickled
        self._own: set[int] = set()

    def __getitem__(self, key: int) -> Any:
        value = super().__getitem__(key)
        if key not in self._own:
            value = pickle.loads(self._pickled[key]) if key in self._pickled else copy.deepcopy(value)
            super().__setitem__(key, value)
            self._own.add(key)
        return value

    def __setitem__(self, key: int, value: Any) -> None:
        super().__setitem__(key, value)
        self._own.add(key)

    def get(self, key: int, default: Any = None) -> Any:
        return self[key] if key in self else default

    def values(self) -> Any:  # a list: the copies
        return [self[key] for key in self]

    def items(self) -> Any:
        return [(key, self[key]) for key in self]

    def __iter__(self) -> Iterator[int]:
        return iter(list(super().keys()))  # reading an entry while iterating must not break the iteration


class QuickSession(SessionState):
    """Gradio's ``SessionState``, except that writing a ``gr.State``'s value does not re-read the State's config.

    Gradio re-reads a block's config (``config_for_block``: ``inspect.signature`` of its class, ~0.5 ms) whenever a
    value is set in the session, also for a ``gr.State``, whose config does not hold its value (``State.get_config``
    drops it). The chat writes its session State at every streamed step, so each step of each reply paid for it on
    the event loop. Here a State's value is stored as Gradio stores it (``state_data`` and its time to live); every
    other write is Gradio's own."""

    def __setitem__(self, key: int, value: Any) -> None:
        block = self.blocks_config.blocks.get(key)
        if isinstance(block, State) and dict.__contains__(self.config_values, key):
            self._state_ttl[key] = (block.time_to_live, datetime.datetime.now())
            self.state_data[key] = value
            return
        super().__setitem__(key, value)


class QuickSessions(StateHolder):
    """Gradio's ``StateHolder``, with new sessions copied from one made by Gradio itself."""

    def __init__(self) -> None:
        super().__init__()
        self._template: SessionState | None = None
        self._pickled: dict[int, bytes] = {}

    def fresh(self) -> SessionState:
        """A new session's state: what ``SessionState(blocks)`` makes, without re-reading every config."""
        if self._template is None:
            self._template = QuickSession(self.blocks)
            self._pickled = {key: pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                             for key, value in self._template.config_values.items()}
        state = copy.copy(self._template)  # Gradio's other attributes as it sets them
        state.blocks_config = copy.copy(self.blocks.default_config)  # what SessionState.__init__ does
        state.config_values = ConfigCopies(self._template.config_values, self._pickled)
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
