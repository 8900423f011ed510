"""Closed browser sessions are dropped whole, ``ttl`` seconds after their tab closed.

Gradio keeps each browser session's server-side state in ``Blocks.state_holder``: the ``gr.State``
values (this app's uploads and conversation) and a copy of every component's config (about 100 KB a
session here). When a tab closes (its heartbeat stops), Gradio deletes the ``gr.State`` values an
hour later but keeps the rest until 10,000 sessions exist, so a public studio's memory grows with
every visitor; its queue also keeps, per session ever seen, an (empty) message queue and event-id
set. :class:`SessionReaper` completes that policy: ``ttl`` seconds after a tab closed, the whole
session goes, with those queue entries. A session used again after it closed (a tab whose connection
came back) is kept.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
from typing import Any, Protocol

import gradio as gr

from dots3_demo.serving.defaults import DEFAULT_CLOSED_SESSION_TTL_S


class _Holder(Protocol):  # gradio.state_holder.StateHolder, as far as it is used here
    session_data: Any
    time_last_used: dict[str, datetime.datetime]
    lock: threading.Lock

    def delete_state(self, session_id: str, expired_only: bool = False) -> None: ...


class _Queue(Protocol):  # gradio.queueing.Queue, as far as it is used here
    pending_messages_per_session: Any  # session hash -> asyncio.Queue of messages for its stream
    pending_event_ids_session: dict[str, set[str]]  # session hash -> ids of its unfinished events


class SessionReaper:
    """Remembers when sessions closed; :meth:`sweep` drops those idle for ``ttl_s`` seconds since."""

    def __init__(self, ttl_s: float = DEFAULT_CLOSED_SESSION_TTL_S) -> None:
        if not ttl_s >= 0:
            raise ValueError(f"the closed-session time to live must be 0 s or more, not {ttl_s}")
        self.ttl_s = float(ttl_s)
        self._closed: dict[str, datetime.datetime] = {}
        self._blocks: gr.Blocks | None = None
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, demo: gr.Blocks) -> None:
        """Drop ``demo``'s closed sessions: wire :meth:`on_unload` to its ``unload`` event."""
        self._blocks = demo
        demo.unload(self.on_unload)

    @property
    def pending(self) -> int:
        """Closed sessions waiting for their time to live to run out."""
        return len(self._closed)

    def closed(self, session_hash: str | None, now: datetime.datetime | None = None) -> None:
        """Note that ``session_hash``'s tab closed (``now`` by default)."""
        if session_hash:
            self._closed[session_hash] = now or datetime.datetime.now()

    def sweep(self, holder: _Holder, now: datetime.datetime | None = None, queue: _Queue | None = None) -> int:
        """Drop every closed session idle for ``ttl_s`` seconds at ``now``; how many went.

        Idle means neither closed nor used in that time: a tab that came back and is in use keeps
        its session, and events that finish just after a tab closed do not make it immortal.
        With ``queue``, the session's entries in Gradio's queue go too (when no event of it is
        pending and no message waits)."""
        now = now or datetime.datetime.now()
        dropped = 0
        for session_hash, closed_at in list(self._closed.items()):
            if session_hash not in holder.session_data:  # gone already (Gradio's LRU, or dropped)
                del self._closed[session_hash]
                if queue is not None:
                    self._forget(queue, session_hash)
            elif (now - self._idle_since(holder, session_hash, closed_at)).total_seconds() >= self.ttl_s:
                del self._closed[session_hash]
                holder.delete_state(session_hash)  # gr.State delete callbacks, as Gradio runs them
                with holder.lock:  # the lock Gradio's own LRU eviction takes
                    holder.session_data.pop(session_hash, None)
                    holder.time_last_used.pop(session_hash, None)
                if queue is not None:
                    self._forget(queue, session_hash)
                dropped += 1
        return dropped

    @staticmethod
    def _forget(queue: _Queue, session_hash: str) -> None:
        """Remove a dropped session's entries from Gradio's queue, unless it still has work there
        (a pending event, or a message its stream has not read). Gradio makes them anew if the
        session sends another event."""
        if queue.pending_event_ids_session.get(session_hash):
            return
        messages = queue.pending_messages_per_session.get(session_hash)
        if messages is not None and not messages.empty():
            return
        queue.pending_event_ids_session.pop(session_hash, None)
        queue.pending_messages_per_session.pop(session_hash, None)

    def next_due(self, holder: _Holder) -> datetime.datetime | None:
        """When the next pending session's time runs out (None: none pending)."""
        due = [self._idle_since(holder, session_hash, closed_at) for session_hash, closed_at in self._closed.items()]
        return min(due) + datetime.timedelta(seconds=self.ttl_s) if due else None

    @staticmethod
    def _idle_since(holder: _Holder, session_hash: str, closed_at: datetime.datetime) -> datetime.datetime:
        last_used = holder.time_last_used.get(session_hash)
        return max(closed_at, last_used) if last_used is not None else closed_at

    async def on_close(self, holder: _Holder, session_hash: str | None, queue: _Queue | None = None) -> int:
        """A tab closed (on the server's event loop, where Gradio itself changes its sessions and
        its queue): note it, drop the sessions whose time is up, and sweep again when the next
        one's is. How many went now."""
        self.closed(session_hash)
        dropped = self.sweep(holder, queue=queue)
        self._schedule(holder, queue)
        return dropped

    def _schedule(self, holder: _Holder, queue: _Queue | None = None) -> None:
        """One timer on the running loop, for the next due session (re-armed after each sweep)."""
        due = self.next_due(holder)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if due is not None:
            delay = max(0.0, (due - datetime.datetime.now()).total_seconds()) + 0.5
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer, holder, queue)

    def _on_timer(self, holder: _Holder, queue: _Queue | None) -> None:
        self._timer = None
        self.sweep(holder, queue=queue)
        self._schedule(holder, queue)

    async def on_unload(self, request: gr.Request) -> None:
        """The ``unload`` handler (a bound method: Gradio passes ``gr.Request`` only to functions and
        methods whose annotations it can read, not to ``functools.partial`` objects)."""
        if self._blocks is not None:
            await self.on_close(self._blocks.state_holder, request.session_hash,
                                getattr(self._blocks, "_queue", None))
