"""The studio live in this process (``launch_app(..., prevent_thread_lock=True)``) on a free loopback port, closed
after use: what the tests that call the app over HTTP share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def live_app(profile: Any, engine: Any = None, *, seq: int, **options: Any) -> Iterator[Any]:
    """The app for ``profile`` and ``engine`` (None: inspection only), served until the block ends; ``options``
    go to ``launch_app`` (e.g. ``inspect_workers``)."""
    from dots3_demo.ui import launch_app

    demo = launch_app(profile, engine, host="127.0.0.1", port=None, seq=seq, prevent_thread_lock=True, quiet=True,
                      **options)
    try:
        yield demo
    finally:
        demo.close()
