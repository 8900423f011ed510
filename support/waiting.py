"""Waiting in tests for something another thread does."""

from __future__ import annotations

import threading
from collections.abc import Callable


def wait_for(condition: Callable[[], object], seconds: float = 60) -> None:
    """Return as soon as ``condition()`` is true (checked every 10 ms); fail the test after ``seconds``."""
    pause = threading.Event()
    for _ in range(int(seconds * 100)):
        if condition():
            return
        pause.wait(0.01)
    raise AssertionError("timed out")
