"""How often a streaming chat reply updates the UI, shared fairly among the replies in flight.

Every chat update costs the app a fixed amount of work however few tokens it carries: Gradio
post-processes each output, diffs it against the previous one and sends it over SSE (about
3–5 ms of CPU for a chat update, measured by ``benchmarks/stream_bench.py``'s set-up), and the
browser re-renders the Chatbot. Coalescing engine deltas into one update per interval keeps that
cost independent of the token rate; growing the interval with the number of replies in flight
keeps the app-wide update rate — and so the CPU the UI takes — bounded, so 32 concurrent streams
still get their tokens on time and in equal shares instead of queueing behind each other's
updates.

The browser's share grows with the reply: every update re-renders the whole message (Markdown,
code, maths), so a 3,000-token reply at 33 updates a second was seen to keep Chromium's main thread
busy for seconds on a loaded 2-core box, with a click on Stop or Clear waiting behind the backlog. The interval also
grows with the reply's length, so the characters re-rendered per second stay under
``RENDER_CHARS_PER_S`` (at most ``MAX_INTERVAL_S`` between updates: a long reply still moves).

One ``StreamPacer`` belongs to one app (``build_interface`` creates it and binds it to the chat
callbacks). The chat handlers all run on the server's single event loop, so the counter needs no
lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

MIN_INTERVAL_S = 0.03  # one reply alone: at most ~33 UI updates per second
MAX_UPDATES_PER_S = 120.0  # all replies together
RENDER_CHARS_PER_S = 100_000  # characters of one reply the browser re-renders per second, at most
MAX_INTERVAL_S = 1.0  # a long reply still updates at least this often (unless the app is busier)


@dataclass
class StreamPacer:
    """The update interval for each reply: ``max(min_interval_s, active / max_updates_per_s,
    min(max_interval_s, chars / render_chars_per_s))``."""

    min_interval_s: float = MIN_INTERVAL_S
    max_updates_per_s: float = MAX_UPDATES_PER_S
    render_chars_per_s: float = RENDER_CHARS_PER_S
    max_interval_s: float = MAX_INTERVAL_S
    active: int = 0

    def interval(self, chars: int = 0) -> float:
        """Seconds a reply of ``chars`` characters so far waits between UI updates (structural
        changes are never held back)."""
        by_length = min(self.max_interval_s, chars / self.render_chars_per_s)
        return max(self.min_interval_s, self.active / self.max_updates_per_s, by_length)

    @contextlib.contextmanager
    def streaming(self) -> Iterator[None]:
        """Count one reply as in flight for the duration of the block."""
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
