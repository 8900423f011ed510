"""One visitor's inspections: panels side by side, the newest upload of a panel wins.

Inspections of different visitors, and of different panels of one visitor, run at the same time
(the web app bounds how many with ``--inspect-workers``). What keeps one visitor's panels
consistent is an :class:`InspectionSession`, one per browser session:

* :meth:`~InspectionSession.begin` starts a panel's :class:`Job` and cancels the job that panel
  had in flight (a new upload supersedes the one before it); :meth:`~InspectionSession.announce`
  does the cancelling early, when the upload arrives, before the new job gets a worker. When a
  worker is free as the upload arrives, its job begins then (``begin(started=Started(…))``), and the
  event that shows it later takes the run it started (:meth:`~InspectionSession.take_started`).
* The work itself runs outside any lock. :meth:`Job.interruptible` makes a cancelled job stop at
  its next Python function call, also inside vLLM's own preprocessing (it cannot stop inside one C
  call, such as FFmpeg decoding the sampled frames: there it stops when that call returns).
* :meth:`~InspectionSession.commit` applies the result to the *latest* state under the session's
  lock — never to the state the job started from, so two panels finishing together both land —
  and refuses a superseded job: its result never overwrites a newer one.
* A job may show part of its result before it commits (a video's frames, as soon as vLLM has sampled
  them) while it is its panel's job in flight (:meth:`~InspectionSession.preview`). Should it then
  be superseded, the panel's next result replaces what it showed; one that changes nothing (a
  rejected file) says so (:meth:`~InspectionSession.reshow`), and the panel shows its state again.

The session is generic over the state it keeps (the UI keeps its ``StudioState``) and holds no
Gradio object. Each panel also keeps the status line of its last result, and the session says
which panels are busy, so one status line can show every panel (``dots3_demo.ui.handlers``).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

S = TypeVar("S")

# What one inspection may hold at its peak, for sizing the worker count: vLLM decodes every sampled
# frame at the video's own size before resizing, ~1 GiB above the app's own memory for a 10-minute
# 1080p clip (``benchmarks/inspect_bench.py``); twice that leaves room for larger frames.
WORKER_MEMORY_BYTES = 2 * 1024**3


class Superseded(BaseException):
    """The job was cancelled: a newer upload to its panel took its place.

    A ``BaseException``, like ``KeyboardInterrupt``: vLLM's video code catches ``Exception`` around
    decoding the sound track (and drops the track), which must not swallow a cancellation.
    """


@dataclass(eq=False)
class Job:
    """One inspection of one panel: what it works on, and whether it has been cancelled."""

    panel: str
    generation: int
    path: Any = None  # the panel's input (a path, a list of paths, None for a clear)
    label: str = ""  # how the status line names the input while it is inspected
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise Superseded(f"{self.panel}: superseded by a newer upload")

    @contextlib.contextmanager
    def interruptible(self, places: tuple[str, ...]) -> Iterator[None]:
        """Inside this block, a cancelled job raises :class:`Superseded` as it next calls a Python
        function defined under one of ``places`` (folder prefixes: vLLM's dots3_note code, the
        inspector's own) — points where stopping is safe: between steps of the work, never inside a
        library that holds a lock (logging, threading, Gradio), whose ``finally`` must still run.

        A trace function on the calling thread only (``sys.settrace``): it runs at each Python
        function call and returns ``None``, so no line is traced and, until the job is cancelled, it
        costs one check per call (not measurable next to a video's decoding). Raising from it also
        removes it, so the job is interrupted at most once; whatever trace function the thread had (a
        debugger, coverage) is put back on the way out.
        """
        cancelled = self._cancelled

        def check(frame: Any, event: str, arg: Any) -> None:
            if cancelled.is_set():
                where = frame.f_code.co_filename
                if where.startswith(places) and where != __file__:
                    raise Superseded("superseded by a newer upload")
            return None

        previous = sys.gettrace()
        sys.settrace(check)
        try:
            self.raise_if_cancelled()
            yield
        finally:
            sys.settrace(previous)


@dataclass(frozen=True)
class Started:
    """A job begun as its upload arrived: what it inspects, with which settings, and the run doing it (the UI's),
    kept for the event that shows it (:meth:`InspectionSession.take_started`)."""

    path: Any
    settings: Any
    run: Any


class InspectionSession(Generic[S]):
    """One visitor's panels: the latest committed state, each panel's job in flight and last status.

    Thread-safe: Gradio runs one visitor's events in several worker threads at once. Kept in a
    ``gr.State``; Gradio deep-copies a state's initial value for each new browser session, and a
    copy is a new session holding the same (immutable) state, with no job and a lock of its own.
    """

    def __init__(self, state: S) -> None:
        self._lock = threading.Lock()
        self._state = state
        self._version = 0  # +1 at every commit
        self._generation = 0
        self._jobs: dict[str, Job] = {}  # panel → the job in flight
        self._waiting: dict[str, tuple[str, Any]] = {}  # panel → (label, input) announced, not yet begun
        self._status: dict[str, str] = {}  # panel → the status line of its last result
        self._panel_versions: dict[str, int] = {}  # panel → the version its last commit made
        self._marks: dict[str, int] = {}  # name → a version some view was last drawn at (see claim)
        self._previewed: set[str] = set()  # panels showing part of a job's result not (yet) committed
        self._reshow: set[str] = set()  # panels whose last result changed nothing after such a preview
        self._started: dict[str, Started] = {}  # panel → the run its job began with as its upload arrived

    def __deepcopy__(self, memo: dict[int, Any]) -> InspectionSession[S]:
        return type(self)(self._state)

    def __repr__(self) -> str:
        return f"InspectionSession(version={self._version}, busy={sorted(self.busy())})"

    # ------------------------------------------------------------ reading
    @property
    def state(self) -> S:
        """The latest committed state (immutable: safe to read without the lock)."""
        return self._state

    @property
    def version(self) -> int:
        return self._version

    def snapshot(self) -> tuple[S, int]:
        """The latest state and its version, read together."""
        with self._lock:
            return self._state, self._version

    def panel_version(self, panel: str) -> int:
        """The version of the last commit that changed ``panel`` (0: none yet)."""
        with self._lock:
            return self._panel_versions.get(panel, 0)

    def busy(self) -> dict[str, str]:
        """Panels with an inspection in flight or announced → the label of what they inspect."""
        with self._lock:
            busy = {panel: label for panel, (label, _path) in self._waiting.items()}
            busy.update({panel: job.label for panel, job in self._jobs.items()})
            return {panel: label for panel, label in busy.items() if label}

    def statuses(self) -> dict[str, str]:
        """Each panel's last status line (a panel never inspected has none)."""
        with self._lock:
            return dict(self._status)

    def job(self, panel: str) -> Job | None:
        """The job ``panel`` has in flight, if any."""
        with self._lock:
            return self._jobs.get(panel)

    # ------------------------------------------------------------ jobs
    def announce(self, panel: str, label: str, *, path: Any = None) -> None:
        """An upload (``path``) for ``panel`` arrived: cancel the job in flight now, and show ``label``
        as busy until the new job begins (``label=""``: cancel only, e.g. the panel was cleared)."""
        with self._lock:
            if (running := self._jobs.pop(panel, None)) is not None:
                running.cancel()
            self._waiting[panel] = (label, path)
            self._started.pop(panel, None)

    def pending_input(self, panel: str) -> tuple[bool, Any]:
        """``(True, input)`` when ``panel`` has a job in flight or an upload announced, else
        ``(False, None)``: what a re-run of the panel (new Budget settings) must work on."""
        with self._lock:
            if (job := self._jobs.get(panel)) is not None:
                return True, job.path
            if panel in self._waiting:
                return True, self._waiting[panel][1]
            return False, None

    def begin(self, panel: str, *, path: Any = None, label: str = "", started: Started | None = None) -> Job:
        """Start a job for ``panel``; the job it had in flight is cancelled (superseded).

        ``started``: the job begins as its upload (``path``) arrives, before the event that shows its result; that
        event takes ``started.run`` (:meth:`take_started`)."""
        with self._lock:
            if (running := self._jobs.get(panel)) is not None:
                running.cancel()
            self._generation += 1
            job = Job(panel, self._generation, path, label)
            self._jobs[panel] = job
            self._waiting.pop(panel, None)
            if started is None:
                self._started.pop(panel, None)
            else:
                self._started[panel] = started
            return job

    def take_started(self, panel: str, path: Any, settings: Any) -> tuple[Any, bool]:
        """``(run, newer)`` for the event that shows an upload (``path``) of ``panel`` with ``settings``: ``run`` is
        the run its job began with as it arrived (``begin(started=…)``), handed over once, else ``None`` — also when
        the event's settings are not those the job began with (a control moved meanwhile: the event begins a job of
        its own, superseding that one). ``newer`` is True when the run kept is one a later upload began: this
        event's upload was superseded before the event came. An upload that arrives is announced or begun, either of
        which forgets the run kept before it, so a run left over from an event that never came is never taken
        for a newer upload."""
        with self._lock:
            if (started := self._started.get(panel)) is None:
                return None, False
            if started.path != path:
                return None, True
            del self._started[panel]
            return (started.run, False) if started.settings == settings else (None, False)

    def preview(self, job: Job) -> bool:
        """Whether ``job`` may show part of its result now, before it commits: only while it is its
        panel's job in flight. The panel is then marked as showing a result not (yet) committed, until
        the panel's next commit or update (see :meth:`reshow`)."""
        with self._lock:
            if job.cancelled or self._jobs.get(job.panel) is not job:
                return False
            self._previewed.add(job.panel)
            return True

    def reshow(self, panel: str) -> bool:
        """True, once, when ``panel``'s last commit or update changed nothing while the panel showed part of a
        result that was never committed (a superseded job's, or a job that failed after showing it): the
        panel's views must then be shown again from the state."""
        with self._lock:
            if panel in self._reshow:
                self._reshow.discard(panel)
                return True
            return False

    def end(self, job: Job) -> None:
        """Forget ``job`` (it was cancelled or failed without a result to commit)."""
        with self._lock:
            if self._jobs.get(job.panel) is job:
                del self._jobs[job.panel]

    def commit(self, job: Job, apply: Callable[[S], tuple[S, str]]) -> tuple[S, bool] | None:
        """Apply ``job``'s result to the latest state, under the lock: ``(new state, changed)``, or
        ``None`` when the job was superseded (its result is dropped).

        ``apply(latest) → (new state, status line)`` must be quick (no decoding) and must not raise;
        returning ``latest`` itself means nothing changed. An empty status line keeps the panel's
        previous one.
        """
        with self._lock:
            if job.cancelled or self._jobs.get(job.panel) is not job:
                return None
            del self._jobs[job.panel]
            return self._apply(job.panel, apply)

    def update(self, panel: str, apply: Callable[[S], tuple[S, str]]) -> tuple[S, bool]:
        """A quick change of ``panel`` that needs no job (the Budget tab with no video): applied to
        the latest state under the lock, like :meth:`commit`; a job in flight is left alone."""
        with self._lock:
            return self._apply(panel, apply)

    def _apply(self, panel: str, apply: Callable[[S], tuple[S, str]]) -> tuple[S, bool]:
        new, status = apply(self._state)
        changed = new is not self._state
        # What a job showed early is replaced by this result when it is the panel's last word: a commit, or
        # an update with no job in flight (one in flight shows its own result next).
        if panel in self._previewed and panel not in self._jobs:
            self._previewed.discard(panel)
            if not changed:
                self._reshow.add(panel)
        if changed:
            self._state = new
            self._version += 1
            self._panel_versions[panel] = self._version
        if status:
            self._status[panel] = status
        return new, changed

    def claim(self, mark: str, version: int) -> bool:
        """True once per (``mark``, newer ``version``): whether a view drawn from ``version`` is news.

        Views drawn after a commit (figures, the summary) call this so a session draws each version
        once, and an older drawing never replaces a newer one.
        """
        with self._lock:
            if self._marks.get(mark, -1) >= version:
                return False
            self._marks[mark] = version
            return True


# ---------------------------------------------------------------- how many inspections at once
class Workers:
    """The app's inspection workers: at most ``count`` inspections do their heavy work (vLLM's decoding) at once,
    across every visitor and panel. Each takes a worker for its work and gives it back when that is done; one that
    begins as its upload arrives takes one only if it is free at that moment (:meth:`try_take`), and otherwise
    waits for its event, which waits for a worker (:meth:`take`)."""

    def __init__(self, count: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if count < 1:
            raise ValueError(f"at least one inspection worker, not {count}")
        self.count = count
        self._free = threading.BoundedSemaphore(count)
        self._clock = clock
        self._lock = threading.Lock()
        self._taken = 0
        self._since = -math.inf  # when the last worker was given back

    def __repr__(self) -> str:
        return f"Workers(count={self.count})"

    def try_take(self) -> bool:
        """Take a worker if one is free now; ``False`` (and nothing taken) if none is."""
        if not self._free.acquire(blocking=False):
            return False
        self._took()
        return True

    def take(self) -> None:
        """Take a worker, waiting for one to be given back if none is free."""
        self._free.acquire()
        self._took()

    def _took(self) -> None:
        with self._lock:
            self._taken += 1

    def give_back(self) -> None:
        self._free.release()  # raises, changing nothing, when none was taken
        with self._lock:
            self._taken -= 1
            self._since = self._clock()

    def idle_s(self) -> float:
        """Seconds every worker has been free (since the last was given back: ``inf`` when none ever was); 0 while
        one is taken."""
        with self._lock:
            return 0.0 if self._taken else self._clock() - self._since

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """A worker for the block."""
        self.take()
        try:
            yield
        finally:
            self.give_back()


def _cgroup_value(v2_file: str, v1_controller: str, v1_file: str) -> str | None:
    """This process's cgroup setting (cgroup v2, else v1), or ``None`` where there is none."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    root = Path("/sys/fs/cgroup")
    for line in lines:
        _, controllers, group = line.split(":", 2)
        if controllers == "":
            folders, name = [root / group.lstrip("/"), root], v2_file
        elif v1_controller in controllers.split(","):
            mount = root / controllers
            folders, name = [mount / group.lstrip("/"), mount], v1_file
        else:
            continue
        for folder in folders:  # the group's own folder; inside a container's namespace, the mount
            with contextlib.suppress(OSError):
                return (folder / name).read_text().strip()
    return None


def usable_cores() -> int:
    """The CPU cores this process may use: its CPU affinity, within a container's CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_value("cpu.max", "cpu", "cpu.cfs_quota_us")
    period = _cgroup_value("cpu.max", "cpu", "cpu.cfs_period_us")
    with contextlib.suppress(TypeError, ValueError, ZeroDivisionError):
        if quota and " " in quota:  # v2: "max 100000" or "200000 100000"
            quota, period = quota.split()
        if quota not in (None, "max", "-1"):
            cores = min(cores, max(1, int(int(quota) / int(period or 100000))))
    return max(1, cores)


def usable_memory() -> int | None:
    """Bytes of memory this process may use: the machine's, within a container's memory limit."""
    total = None
    with contextlib.suppress(AttributeError, OSError, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = _cgroup_value("memory.max", "memory", "memory.limit_in_bytes")
    with contextlib.suppress(TypeError, ValueError):
        if limit not in (None, "max") and int(limit) < (total or 1 << 62):  # v1 says "no limit" as ~2**63
            total = int(limit)
    return total


def default_workers() -> int:
    """How many uploads to inspect at once: one per usable core, at most one per
    ``WORKER_MEMORY_BYTES`` of usable memory (so side-by-side inspections cannot exhaust it)."""
    cores = usable_cores()
    memory = usable_memory()
    by_memory = max(1, memory // WORKER_MEMORY_BYTES) if memory else cores
    return max(1, min(cores, by_memory))
