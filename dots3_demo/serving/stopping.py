"""Stopping the studio stops vLLM: SIGTERM, SIGINT and SIGHUP end the engine's processes, then the server.

vLLM runs its engine core (and on a GPU its workers) in processes of its own. Python's default SIGTERM
ends only the studio's process, and those were left running, reparented to PID 1, holding their memory
(on a GPU host the GPU's, so the next start failed). :class:`StopOnSignals` handles the stop signals
instead: it shuts vLLM down (its own shutdown, bounded in time: a hung engine does not answer it), ends
every process the studio started that is still alive (SIGTERM, then SIGKILL: a process stuck in the GPU
driver ignores SIGTERM), then lets Gradio close its server (the ``KeyboardInterrupt`` its launch loop
handles). The exit status is 0 for a stop asked for, or the one :meth:`StopOnSignals.request_exit` set
(``--exit-on-engine-stall``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
CLOSE_WAIT_S = 6.0  # for vLLM's own shutdown (InProcessEngine.close waits 5 s for it)
KILL_GRACE_S = 3.0  # after SIGTERM, before SIGKILL
EXIT_ENGINE_STALLED = 3  # the exit status after --exit-on-engine-stall
STALL_EXIT_DELAY_S = 5.0  # the sessions show the message before the server goes


@dataclass(frozen=True)
class Proc:
    """A process as ``/proc`` shows it: its pid and start time (together, one process even if the pid is reused)."""

    pid: int
    start: int


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of ``pid`` from ``/proc/PID/stat``; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (name) "; the name may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def descendants(pid: int | None = None) -> list[Proc]:
    """Every living process below ``pid`` (this process), read from ``/proc`` (none where there is no /proc)."""
    root = pid or os.getpid()
    children: dict[int, list[Proc]] = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    for child in pids:
        stat = _stat(child)
        if stat is not None and stat[0] != "Z":
            children.setdefault(stat[1], []).append(Proc(child, stat[2]))
    found: list[Proc] = []
    todo = [root]
    while todo:
        for proc in children.get(todo.pop(), []):
            found.append(proc)
            todo.append(proc.pid)
    return found


def alive(proc: Proc) -> bool:
    """Whether ``proc`` still runs (a zombie does not)."""
    stat = _stat(proc.pid)
    return stat is not None and stat[0] != "Z" and stat[2] == proc.start


def _signal(procs: list[Proc], sig: int) -> None:
    for proc in procs:
        if alive(proc):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, sig)


def _wait(procs: list[Proc], timeout: float) -> list[Proc]:
    """Those of ``procs`` still alive after at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = [p for p in procs if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    return left


def end_processes(procs: list[Proc], grace: float = KILL_GRACE_S) -> list[int]:
    """SIGTERM to each of ``procs`` still alive, SIGKILL to those alive ``grace`` s later; the pids killed."""
    _signal(procs, signal.SIGTERM)
    stubborn = _wait(procs, grace)
    _signal(stubborn, signal.SIGKILL)
    _wait(stubborn, grace)
    return [p.pid for p in stubborn]


def stop_engine(engine: Any) -> None:
    """Shut ``engine`` down (vLLM's own shutdown, bounded: ``InProcessEngine.close``), then end every process
    this one started that is still alive. Safe to call more than once."""
    started = descendants()  # before vLLM's shutdown: a killed parent's children would be reparented, unseen
    close: Callable[[], None] | None = getattr(engine, "close", None)
    if close is not None:
        worker = threading.Thread(target=_quietly, args=(close,), name="stop-engine", daemon=True)
        worker.start()
        worker.join(CLOSE_WAIT_S)
    killed = end_processes(list(dict.fromkeys(started + descendants())))
    if killed:
        logger.warning("killed %d process(es) that did not end on SIGTERM: %s", len(killed), killed)


def _quietly(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception as exc:  # noqa: BLE001 - the processes are ended next anyway
        logger.warning("vLLM's shutdown failed: %s", exc)


class StopOnSignals:
    """``with StopOnSignals(engine) as stop: launch the server``: a stop signal ends ``engine``'s processes and
    the server; leaving the block ends them too. ``stop.exit_status`` is what the process should exit with.
    Without an in-process engine (preview, remote) it does nothing: Python's own handling stays."""

    def __init__(self, engine: Any, *, log: Any = None) -> None:
        self.engine = engine
        self.exit_status = 0
        self._log = log if log is not None else sys.stderr
        self._stopped = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnSignals:
        # Only for an engine with processes of its own (in-process vLLM): preview and remote keep Python's ways.
        if getattr(self.engine, "close", None) is not None and threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._previous:  # an in-process engine: its processes end with the block
            self.stop()
        return bool(self._previous) and kind is KeyboardInterrupt  # the stop asked for: not an error

    def stop(self) -> None:
        """End the engine's processes (once)."""
        if self._stopped:
            return
        self._stopped = True
        stop_engine(self.engine)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopped:
            return  # a second signal while stopping: the stop is under way
        print(f"studio: {signal.Signals(signum).name}: stopping vLLM's processes, then the server", file=self._log,
              flush=True)
        started = time.monotonic()
        self.stop()
        print(f"studio: vLLM stopped in {time.monotonic() - started:.1f} s", file=self._log, flush=True)
        raise KeyboardInterrupt  # Gradio's launch loop closes the server on it

    def request_exit(self, status: int, after: float = STALL_EXIT_DELAY_S) -> None:
        """Stop as on SIGTERM ``after`` seconds from now, and exit with ``status`` (from any thread)."""
        def fire() -> None:
            self.exit_status = status
            os.kill(os.getpid(), signal.SIGTERM)

        timer = threading.Timer(after, fire)
        timer.daemon = True
        timer.start()
