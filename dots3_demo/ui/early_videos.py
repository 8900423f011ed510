"""A video's inspection begun as its bytes come in, before the page's event for it.

When a visitor drops a clip, the page uploads it (Gradio's ``/upload`` route) and only then, once the browser has
built the new video's player, sends the panel's ``change`` event: 0.1–0.3 s later on a busy page (Chromium on this
project's 2-core box). :class:`EarlyVideos` hears of the upload as the route answers
(``dots3_demo.serving.uploads.watch_uploads``) and, when one of the app's inspection workers is free at that moment,
begins vLLM's preprocessing of a video file at once, with the settings the page's Budget tab starts with
(:meth:`EarlyVideos.expect`). The event that arrives for that very file with those settings adopts it
(:meth:`EarlyVideos.take`, from ``inspect_page.on_video_arrives`` or, for an API call with no arrival step,
``on_video``): the session's job then shows what the run did and does (:meth:`EarlyVideo.replay`: its progress
reports, its frames as vLLM makes them, its result), as if it had begun it; once taken, the run makes
the rest (the budget, the other views) only when the frames are on their way to the page, as ``inspect_page.VideoRun``
does.

Nothing of a session is touched before that: a run is only an inspection of a file's bytes with given settings, the
same for any session that adopts it (Gradio names an upload's folder by its bytes' hash). A run no event adopts
(a tab closed, an API client that never calls, other settings) is dropped ``keep_s`` seconds after its upload, or as
newer ones come once ``most`` are kept; it gives its worker back as vLLM's call returns, as every inspection does.
An adopting job that is superseded stops the run at its next safe point (``Job.interruptible``).
"""

from __future__ import annotations

import mimetypes
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from dots3_demo.inspection import interruption_points
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.session import Job, Workers
from dots3_demo.inspection.video import FramesReady, Progress, SampledFrames, VideoSettings
from dots3_demo.profiles import Profile
from dots3_demo.ui.handlers import Inspected, video_inspected

KEEP_S = 60.0  # how long a run no event adopted is kept after its upload
POLL_S = 0.05  # how often an adopting job waiting on the run checks whether it was superseded
FRAMES_SHOWN_WAIT_S = 30.0  # the most a run waits, its frames ready, for the job that adopted it to show them


def _key(path: str) -> str:
    return os.path.realpath(path)


def is_video(path: str) -> bool:
    """Whether an upload is a video file, by its name (the video panel's uploads keep theirs)."""
    kind, _ = mimetypes.guess_type(path)
    return kind is not None and kind.startswith("video/")


class EarlyVideo:
    """One video inspected as its upload came in (:meth:`run`, on a thread of its own, with a worker taken for it),
    and what it did, in order, for the job that adopts it (:meth:`replay`)."""

    def __init__(self, path: str, settings: VideoSettings, *, since: float) -> None:
        self.path = path
        self.settings = settings
        self.since = since  # time.monotonic() of the upload
        self._job = Job("video", 0, path)  # cancelled when the job that adopted it is superseded
        self._changed = threading.Condition()
        self._steps: list[tuple[str, Any]] = []  # ("progress", (fraction, text)) | ("frames", SampledFrames) | end
        self._adopted = threading.Event()  # a job replays it
        self._shown = threading.Event()  # … and has handed the frames on (or stopped)

    def run(self, profile: Profile, limits: UploadLimits, workers: Workers) -> None:
        """Inspect the video, holding the worker the caller took for it until vLLM's call has returned."""
        holding = True

        def frames_ready(frames: SampledFrames) -> None:
            nonlocal holding
            self._put("frames", frames)
            if not frames.complete:
                return
            holding = False
            workers.give_back()  # vLLM's call has returned: another inspection may decode
            if self._adopted.is_set():  # the rest waits until the page has the frames (``inspect_page.VideoRun``)
                self._shown.wait(FRAMES_SHOWN_WAIT_S)

        try:
            with self._job.interruptible(interruption_points()):
                inspected = video_inspected(profile, self.path, self.settings,
                                            lambda fraction, text: self._put("progress", (fraction, text)),
                                            limits=limits, frames_ready=frames_ready)
            self._put("done", inspected)
        except BaseException as exc:  # noqa: BLE001 - handed to the job that adopts it, which raises it
            self._put("raised", exc)
        finally:
            if holding:
                workers.give_back()

    def _put(self, kind: str, value: Any) -> None:
        with self._changed:
            self._steps.append((kind, value))
            self._changed.notify_all()

    def cancel(self) -> None:
        """Stop the run at its next safe point (``Job.interruptible``): no job will take it."""
        self._job.cancel()

    @property
    def ended(self) -> bool:
        with self._changed:
            return bool(self._steps) and self._steps[-1][0] in ("done", "raised")

    def replay(self, job: Job, progress: Progress, frames_ready: FramesReady | None) -> Inspected:
        """What the run did and does, for ``job`` (the session's, which adopted it), as ``video_inspected`` would
        have done it: each progress report to ``progress``, the frames to ``frames_ready``; returns the run's result
        or raises what it raised. When ``job`` is superseded, the run is stopped too, and ``Superseded`` raised."""
        self._adopted.set()
        try:
            return self._replay(job, progress, frames_ready)
        finally:
            self._shown.set()

    def _replay(self, job: Job, progress: Progress, frames_ready: FramesReady | None) -> Inspected:
        seen = 0
        while True:
            with self._changed:
                while len(self._steps) == seen:
                    if job.cancelled:
                        self._job.cancel()
                        job.raise_if_cancelled()
                    self._changed.wait(POLL_S)
                kind, value = self._steps[seen]
            seen += 1
            if kind == "progress":
                progress(*value)
            elif kind == "frames":
                if frames_ready is not None:
                    frames_ready(value)
                if value.complete:
                    self._shown.set()
            elif kind == "done":
                return value
            else:
                raise value


class EarlyVideos:
    """The app's videos inspected as their uploads came in, until an event adopts each (see the module's text).
    ``workers`` are the app's inspection workers, shared with every other inspection; at most ``most`` runs are
    kept (default: two per worker)."""

    def __init__(self, profile: Profile, workers: Workers, limits: UploadLimits = UploadLimits(), *,
                 keep_s: float = KEEP_S, most: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.workers = workers
        self._profile = profile
        self._limits = limits
        self._keep_s = keep_s
        self._most = most or 2 * workers.count
        self._clock = clock
        self._settings: VideoSettings | None = None
        self._lock = threading.Lock()
        self._runs: dict[str, EarlyVideo] = {}  # a file's real path → its run, oldest first

    def expect(self, settings: VideoSettings) -> None:
        """The settings the page's Budget tab starts with: uploads are inspected with these (none before this is
        called); an event with others begins its own inspection."""
        self._settings = settings

    def uploaded(self, paths: list[str]) -> None:
        """Gradio saved ``paths`` (``watch_uploads``' callback): begin each video's inspection now when a worker is
        free, unless one of that file with these settings is kept already."""
        settings = self._settings
        if settings is None:
            return
        for path in paths:
            if is_video(path):
                self._begin(path, settings)

    def _begin(self, path: str, settings: VideoSettings) -> None:
        key = _key(path)
        with self._lock:
            self._prune()
            if key in self._runs or not self.workers.try_take():
                return
            run = EarlyVideo(path, settings, since=self._clock())
            self._runs[key] = run
            while len(self._runs) > self._most:
                del self._runs[next(iter(self._runs))]
        try:
            threading.Thread(target=run.run, args=(self._profile, self._limits, self.workers),
                             name="early-inspection", daemon=True).start()
        except BaseException:
            with self._lock:
                self._runs.pop(key, None)
            self.workers.give_back()
            raise

    def _prune(self) -> None:  # with the lock held
        now = self._clock()
        for key in [key for key, run in self._runs.items() if now - run.since > self._keep_s]:
            del self._runs[key]

    def take(self, path: str | None, settings: VideoSettings) -> EarlyVideo | None:
        """The run of the file at ``path`` for the event that shows it with ``settings``, handed over once; ``None``
        when there is none, or when it was begun with other settings (it is then stopped and dropped, giving its
        worker back soon: that event begins its own)."""
        if not path:
            return None
        with self._lock:
            self._prune()
            run = self._runs.pop(_key(path), None)
        if run is not None and run.settings != settings:
            run.cancel()
            return None
        return run

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)
