"""Inspections side by side: one session's jobs, supersession and cancellation, the worker count."""

from __future__ import annotations

import copy
import math
import os
import sys
import threading
from dataclasses import dataclass, replace

import pytest

from dots3_demo import vllm_compat
from dots3_demo.inspection import VideoSettings, inspect_file, interruption_points
from dots3_demo.inspection import session as session_module
from dots3_demo.inspection.session import InspectionSession, Job, Started, Superseded, Workers, default_workers


@dataclass(frozen=True)
class State:
    a: int = 0
    b: int = 0


def _set(field: str, value: int, status: str = ""):
    return lambda state: (replace(state, **{field: value}), status or f"{field}={value}")


# ---------------------------------------------------------------- one session's jobs
def test_two_panels_finishing_together_both_land():
    """Each result is applied to the latest state, not to the state its job started from."""
    session = InspectionSession(State())
    job_a, job_b = session.begin("a"), session.begin("b")  # both start from State(0, 0)
    assert session.commit(job_a, _set("a", 1)) == (State(1, 0), True)
    assert session.commit(job_b, _set("b", 2)) == (State(1, 2), True)
    assert session.state == State(1, 2) and session.version == 2
    assert session.statuses() == {"a": "a=1", "b": "b=2"} and session.busy() == {}


def test_a_new_job_supersedes_the_panels_job_in_flight():
    session = InspectionSession(State())
    old = session.begin("a", path="old.mp4", label="old.mp4")
    new = session.begin("a", path="new.mp4", label="new.mp4")
    assert old.cancelled and not new.cancelled
    assert session.busy() == {"a": "new.mp4"} and session.pending_input("a") == (True, "new.mp4")
    assert session.commit(new, _set("a", 2)) == (State(2, 0), True)
    assert session.commit(old, _set("a", 1)) is None  # finished later, still never overwrites the newer
    assert session.state == State(2, 0) and session.statuses() == {"a": "a=2"}


def test_announce_cancels_at_once_and_shows_the_panel_busy():
    session = InspectionSession(State())
    running = session.begin("a", path="one.mp4", label="one.mp4")
    session.announce("a", "two.mp4", path="two.mp4")
    assert running.cancelled and session.commit(running, _set("a", 1)) is None
    assert session.busy() == {"a": "two.mp4"} and session.pending_input("a") == (True, "two.mp4")
    job = session.begin("a", path="two.mp4", label="two.mp4")
    session.commit(job, _set("a", 2))
    assert session.busy() == {} and session.pending_input("a") == (False, None)


def test_a_run_begun_as_its_upload_arrived_goes_to_that_uploads_event_once():
    """A job begun as its upload arrived keeps its run for the event that shows that upload with the same settings:
    taken once; an event for another upload finds a newer upload's run (its own upload was superseded) and leaves it
    for that upload's event; one with other settings gets none (it begins its own job); an announce, or a job begun
    without a run, forgets the run kept."""
    session = InspectionSession(State())
    assert session.take_started("a", "one.mp4", 1) == (None, False)  # nothing begun early: the event begins the job
    job = session.begin("a", path="one.mp4", label="one.mp4", started=Started("one.mp4", 1, "run one"))
    assert session.busy() == {"a": "one.mp4"} and session.job("a") is job
    assert session.take_started("a", "zero.mp4", 1) == (None, True)  # a newer upload's: left for its own event
    assert session.take_started("a", "one.mp4", 1) == ("run one", False)
    assert session.take_started("a", "one.mp4", 1) == (None, False)  # handed over once
    assert session.commit(job, _set("a", 1)) == (State(1, 0), True)
    session.begin("a", path="two.mp4", started=Started("two.mp4", 1, "run two"))
    assert session.take_started("a", "two.mp4", 2) == (None, False)  # other settings: the event begins its own
    assert session.take_started("a", "two.mp4", 1) == (None, False)
    newer = session.begin("a", path="three.mp4", started=Started("three.mp4", 1, "run three"))
    session.announce("a", "four.mp4", path="four.mp4")  # a fourth arrived with no worker free
    assert newer.cancelled and session.take_started("a", "four.mp4", 1) == (None, False)
    session.begin("a", path="five.mp4", started=Started("five.mp4", 1, "run five"))
    session.begin("a", path="six.mp4")  # an event that began its own (an API call, a Budget move)
    assert session.take_started("a", "six.mp4", 1) == (None, False)


def test_the_workers_bound_the_work_at_once():
    workers = Workers(2)
    assert workers.try_take() and workers.try_take()
    assert not workers.try_take()  # none free: nothing taken
    workers.give_back()
    with workers.slot():
        assert not workers.try_take()
    assert workers.try_take()
    done = threading.Event()

    def waiting():
        with workers.slot():
            done.set()

    thread = threading.Thread(target=waiting)
    thread.start()
    assert not done.wait(0.2)  # it waits for a worker
    workers.give_back()
    assert done.wait(10)
    thread.join(10)
    with pytest.raises(ValueError):
        Workers(0)


def test_the_workers_say_how_long_every_one_has_been_free():
    now = [100.0]
    workers = Workers(2, clock=lambda: now[0])
    assert workers.idle_s() == math.inf  # none was ever taken
    assert workers.try_take()
    workers.take()
    assert workers.idle_s() == 0.0
    workers.give_back()
    now[0] = 101.0
    assert workers.idle_s() == 0.0  # one is still taken
    workers.give_back()
    now[0] = 103.5
    assert workers.idle_s() == 2.5
    with pytest.raises(ValueError):
        workers.give_back()  # none is taken: nothing changes
    assert workers.idle_s() == 2.5


def test_a_change_that_leaves_the_state_alone_keeps_the_version():
    session = InspectionSession(State())
    job = session.begin("a")
    assert session.commit(job, lambda state: (state, "⚠ rejected")) == (State(), False)
    assert session.version == 0 and session.statuses() == {"a": "⚠ rejected"}
    assert session.update("b", _set("b", 5)) == (State(0, 5), True) and session.panel_version("b") == 1


def test_a_preview_only_while_the_job_is_the_panels_and_reshown_when_no_result_replaces_it():
    """A job shows part of its result early (a video's frames) only while it is its panel's job in flight;
    when the panel's next word changes nothing (the newer upload was rejected), the panel is shown from
    the state again, once, so the early part of a result never committed does not stay on the page."""
    session = InspectionSession(State())
    first = session.begin("a")
    assert session.preview(first)  # the frames of the first upload are on the page now
    second = session.begin("a")  # a newer upload supersedes it
    assert not session.preview(first)  # a superseded job shows nothing more
    assert session.commit(first, _set("a", 1)) is None
    assert session.commit(second, lambda state: (state, "rejected")) == (State(), False)
    assert session.reshow("a") and not session.reshow("a")  # show the state's frames again, once
    third = session.begin("a")
    assert session.preview(third)
    assert session.commit(third, _set("a", 3)) == (State(3, 0), True)
    assert not session.reshow("a")  # its own result replaced what it showed
    assert not session.reshow("b")


def test_claim_is_true_once_per_newer_version():
    session = InspectionSession(State())
    assert session.claim("x", 0) and not session.claim("x", 0)
    assert session.claim("x", 2) and not session.claim("x", 1)


def test_each_browser_session_gets_its_own_copy():
    """gr.State deep-copies its initial value for every new browser session."""
    first = InspectionSession(State(1, 1))
    first.begin("a")
    second = copy.deepcopy(first)
    assert second.state is first.state and second.busy() == {} and second._lock is not first._lock


def test_superseded_is_not_swallowed_by_except_exception():
    """vLLM catches Exception around decoding the sound track; a cancellation must get through."""
    assert not issubclass(Superseded, Exception)
    with pytest.raises(Superseded):
        try:
            Job("a", 1, _cancelled=_set_event()).raise_if_cancelled()
        except Exception:  # noqa: BLE001 - what vLLM's _decode_audio does
            pytest.fail("swallowed")


def _set_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


HERE = (os.path.join(os.path.dirname(__file__), ""),)


def _spin() -> int:
    return 1


def test_a_cancelled_job_stops_at_its_next_python_call_on_another_thread():
    job = Job("a", 1)
    started, outcome = threading.Event(), {}

    def work():
        try:
            with job.interruptible(HERE):
                started.set()
                while True:
                    _spin()
        except Superseded:
            outcome["stopped"] = True

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    assert started.wait(10)
    job.cancel()
    thread.join(30)
    assert outcome == {"stopped": True} and not thread.is_alive()


def test_a_cancelled_job_never_stops_inside_code_outside_its_places():
    """Not inside a library that may hold a lock (logging, threading, Gradio): only where it is safe."""
    job = Job("a", 1)
    job.cancel()
    lock = threading.Lock()
    with pytest.raises(Superseded), job.interruptible(("/nowhere/",)):
        pass  # cancelled before it began: stopped at the start
    job = Job("a", 2)
    with pytest.raises(Superseded), job.interruptible(HERE):
        job.cancel()
        with lock:
            threading.Event().is_set()  # threading's own Python code: left alone
            copy.copy([1])
        assert not lock.locked()
        _spin()  # this file's code: stopped here
    assert not lock.locked()


def test_interruptible_puts_back_the_threads_trace_function():
    def tracer(frame, event, arg):
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with Job("a", 1).interruptible(HERE):
            assert sys.gettrace() is not tracer
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)


def test_a_video_job_cancelled_inside_vllms_preprocessing_stops_there(profile, clip_with_audio, monkeypatch):
    """Cancelled while vLLM's own function runs (here: once it has decoded the sound track), the job
    stops inside that function: the frames are never decoded and the call never returns."""
    module = vllm_compat.video_module()
    calls = {"returned": 0, "frames": 0}
    job = Job("video", 1)
    real_call, real_audio, real_frames = (module.preprocess_dots3_note_video, module._decode_audio,
                                          module._decode_frames)

    def call(*args, **kwargs):
        result = real_call(*args, **kwargs)
        calls["returned"] += 1
        return result

    def audio(*args, **kwargs):
        result = real_audio(*args, **kwargs)
        job.cancel()  # a newer upload arrives while vLLM's function runs
        return result

    def frames(*args, **kwargs):
        calls["frames"] += 1
        return real_frames(*args, **kwargs)

    monkeypatch.setattr(module, "preprocess_dots3_note_video", call)
    monkeypatch.setattr(module, "_decode_audio", audio)
    monkeypatch.setattr(module, "_decode_frames", frames)
    with pytest.raises(Superseded), job.interruptible(interruption_points()):
        inspect_file(clip_with_audio, profile, VideoSettings(seq=8192), expected="video")
    assert calls == {"returned": 0, "frames": 0}


# ---------------------------------------------------------------- the worker count
def test_default_workers_follow_cores_and_memory(monkeypatch):
    assert 1 <= default_workers() <= session_module.usable_cores()
    monkeypatch.setattr(session_module, "usable_cores", lambda: 16)
    monkeypatch.setattr(session_module, "usable_memory", lambda: 64 * 1024**3)
    assert default_workers() == 16
    monkeypatch.setattr(session_module, "usable_memory", lambda: 5 * 1024**3)  # 2 GiB per worker
    assert default_workers() == 2
    monkeypatch.setattr(session_module, "usable_memory", lambda: 1024**3)
    assert default_workers() == 1
    monkeypatch.setattr(session_module, "usable_memory", lambda: None)
    assert default_workers() == 16


def test_a_containers_cpu_quota_bounds_the_cores(monkeypatch):
    values = {"cpu.max": "250000 100000"}
    monkeypatch.setattr(session_module, "_cgroup_value", lambda v2, _c, v1: values.get(v2))
    monkeypatch.setattr(session_module.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert session_module.usable_cores() == 2
    values["cpu.max"] = "max 100000"
    assert session_module.usable_cores() == 64


def test_pillow_keeps_freed_image_buffers_for_the_workers(monkeypatch):
    from PIL import Image

    from dots3_demo.inspection import keep_image_blocks

    original = Image.core.get_blocks_max()
    try:
        monkeypatch.delenv("PILLOW_BLOCKS_MAX", raising=False)
        assert keep_image_blocks(2) == 8 == Image.core.get_blocks_max()
        assert keep_image_blocks(64) == 16 == Image.core.get_blocks_max()  # bounded: at most 16 × 16 MiB
        Image.core.set_blocks_max(3)
        monkeypatch.setenv("PILLOW_BLOCKS_MAX", "3")  # the operator chose: left alone
        assert keep_image_blocks(2) == 0 and Image.core.get_blocks_max() == 3
    finally:
        Image.core.set_blocks_max(original)
