"""The video event's steps (``inspect_page.VideoRun``): the frames gallery as vLLM makes the frames — the newest
ones at most every ``FRAMES_STEP_S``, all of them the moment vLLM's call returns — then the event's outputs."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import replace

import pytest

from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.inspection.session import Workers
from dots3_demo.inspection.video import SampledFrames
from dots3_demo.ui import handlers, inspect_page

STEP_S = 0.4  # the test's FRAMES_STEP_S
MADE_S = 0.1  # between two frames made
GALLERY = ("state", "status", *handlers.EVENT_KEYS["video"]).index("frames_gallery")


@pytest.fixture
def frames(profile, clip_silent):
    """16 frames: a short clip's, four times over (a picture is shown by its place in the gallery)."""
    made = inspect_file(clip_silent, profile, VideoSettings(seq=8192), expected="video").frames
    return [replace(frame, index=i) for i, frame in enumerate(made * (16 // len(made)))]


def _is_skip(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


def test_the_page_gets_the_newest_frames_at_most_every_step_and_all_of_them_at_once(profile, frames, monkeypatch):
    monkeypatch.setattr(inspect_page, "FRAMES_STEP_S", STEP_S)
    assert len(frames) == 16
    workers = Workers(1)
    marks: dict[str, float] = {}
    free_while_making: list[bool] = []
    begin, received = threading.Event(), threading.Event()

    def inspect(frames_ready, progress):
        assert begin.wait(30)
        for n in range(1, len(frames)):
            frames_ready(SampledFrames(tuple(frames[:n]), complete=False))
            free_while_making.append(workers.try_take())  # the worker is held while vLLM makes the frames
            time.sleep(MADE_S)
        received.clear()
        assert received.wait(30)  # a step was just sent: the next may not go before STEP_S …
        frames_ready(SampledFrames(tuple(frames), complete=False))  # the last frame made …
        frames_ready(SampledFrames(tuple(frames), complete=True))  # … and vLLM's call returns
        marks["rest"] = time.monotonic()  # the budget is explained only once the page has all the frames
        return None

    run = inspect_page.VideoRun(workers)
    run.start(inspect)
    steps = run.steps(profile, None)
    begin.set()
    galleries: list[tuple[float, list]] = []
    while True:
        step = next(steps)
        if _is_skip(step[GALLERY]):
            break
        galleries.append((time.monotonic(), step[GALLERY]))
        received.set()
        assert all(_is_skip(value) for i, value in enumerate(step) if i != GALLERY)  # the gallery alone
        if len(step[GALLERY]) == len(frames):
            time.sleep(0.3)  # Gradio sending the last gallery: the inspection waits for it
            resumed = time.monotonic()
    assert list(steps) == []
    assert all(_is_skip(value) for value in step)  # the result (none here)

    sizes = [len(gallery) for _, gallery in galleries]
    assert sizes[0] == 1  # the first frame at once
    assert sizes == sorted(sizes) and sizes[-1] == len(frames) and sizes.count(len(frames)) == 1  # sent once
    assert 3 <= len(galleries) < len(frames)  # several steps, fewer than one per frame
    partial = [at for (at, gallery) in galleries if len(gallery) < len(frames)]
    assert all(later - earlier >= STEP_S * 0.9 for earlier, later in itertools.pairwise(partial))
    assert galleries[-1][0] - galleries[-2][0] < STEP_S / 2  # all of them the moment vLLM's call returned
    assert marks["rest"] >= resumed
    assert not any(free_while_making) and workers.try_take()  # held while making, given back once all were made
    files = [[item[0] for item in gallery] for _, gallery in galleries]
    assert all(later[:len(earlier)] == earlier for earlier, later in itertools.pairwise(files))  # encoded once each


@pytest.mark.parametrize("ending", ["superseded", "raised"])
def test_frames_made_before_the_inspection_ended_without_all_of_them_are_not_sent(profile, frames, monkeypatch,
                                                                                  ending):
    """A newer upload superseded the job while the event held frames back for the next step (``handlers._run``
    then returns ``None``), or the inspection failed: those frames are not sent — they would land after the newer
    upload's views — and the event ends with its result (nothing for a superseded job) or raises."""
    monkeypatch.setattr(inspect_page, "FRAMES_STEP_S", STEP_S)
    begin = threading.Event()

    class Broken(Exception):
        pass

    def inspect(frames_ready, progress):
        assert begin.wait(30)
        for n in range(1, 4):
            frames_ready(SampledFrames(tuple(frames[:n]), complete=False))
            time.sleep(0.02)  # within one step: held back
        if ending == "raised":
            raise Broken
        return None  # superseded: handlers._run's answer

    run = inspect_page.VideoRun(Workers(1))
    run.start(inspect)
    steps = run.steps(profile, None)
    begin.set()
    first = next(steps)
    assert len(first[GALLERY]) == 1
    if ending == "raised":
        with pytest.raises(Broken):
            next(steps)
    else:
        rest = list(steps)
        assert len(rest) == 1 and all(_is_skip(value) for value in rest[0])
