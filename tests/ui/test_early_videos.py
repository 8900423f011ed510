"""A video's inspection begun as its bytes come in (``dots3_demo.ui.early_videos``, ``dots3_demo.serving.uploads``):
Gradio's upload route hands the saved file over, its inspection begins before any event, and the page's arrival
step (or an API call) takes it — vLLM decodes the file once. Speed is measured by
``benchmarks/inspect_concurrency.py``, never here."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from dots3_demo.core.state import initial_state
from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.inspection.session import Job, Superseded, Workers
from dots3_demo.ui import build_interface, handlers, inspect_page
from dots3_demo.ui.early_videos import EarlyVideos
from support.live import live_app
from support.waiting import wait_for

SEQ = 8192
CONTROLS = (SEQ, True, 0, 0, 1.0, "eval_ek")  # the Budget tab's first values, for seq=SEQ
DEFAULTS = VideoSettings(seq=SEQ)  # … as settings


def _timestamps(frames) -> list[str]:
    return [f.timestamp for f in frames]


def _early(profile, workers: int = 1, **options) -> EarlyVideos:
    early = EarlyVideos(profile, Workers(workers), **options)
    early.expect(DEFAULTS)
    return early


def _free(workers: Workers) -> bool:
    """Whether every worker is free (then given back again)."""
    taken = 0
    while workers.try_take():
        taken += 1
    for _ in range(taken):
        workers.give_back()
    return taken == workers.count


@pytest.fixture
def held(monkeypatch):
    """``handlers.inspect_file`` (what an inspection calls first) held until ``release`` is set; ``arrived`` names
    the files that came."""
    real = handlers.inspect_file
    release, arrived = threading.Event(), []

    def gated(path, *args, **kwargs):
        arrived.append(str(path))
        assert release.wait(60)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(handlers, "inspect_file", gated)
    yield release, arrived
    release.set()


# ---------------------------------------------------------------- the runs
def test_an_upload_begins_its_inspection_and_the_job_that_takes_it_gets_all_of_it(profile, clip_with_audio,
                                                                                  decodes):
    calls, _ = decodes
    early = _early(profile)
    early.uploaded([str(clip_with_audio)])
    wait_for(lambda: calls)
    assert calls.threads == ["early-inspection"]  # decoding before any event asked
    run = early.take(str(clip_with_audio), DEFAULTS)
    assert run is not None and early.take(str(clip_with_audio), DEFAULTS) is None  # handed over once
    reports, shown = [], []
    inspected = run.replay(Job("video", 1), lambda fraction, text: reports.append(text), shown.append)
    expected = inspect_file(clip_with_audio, profile, DEFAULTS, expected="video")
    *making, frames = shown
    assert frames.complete and not any(step.complete for step in making)
    assert _timestamps(frames.frames) == _timestamps(expected.frames)
    assert reports[0] == "decoding with vLLM's preprocess_dots3_note_video" and len(reports) >= 3
    state, status = inspected.apply(initial_state(SEQ))
    assert state.video_path == str(clip_with_audio) and _timestamps(state.video.frames) == _timestamps(expected.frames)
    assert status.startswith(f"✓ **{clip_with_audio.name}**")
    assert len(calls) == 2 and _free(early.workers)  # one decoding for the run (one for `expected`); worker back


def test_only_a_video_with_the_page_settings_and_a_free_worker_begins(profile, clip_with_audio, photo, decodes):
    calls, _ = decodes
    early = EarlyVideos(profile, Workers(1))
    early.uploaded([str(clip_with_audio)])  # the page's settings are not known yet
    assert len(early) == 0
    early.expect(DEFAULTS)
    early.uploaded([str(photo)])  # not a video
    assert len(early) == 0
    assert early.workers.try_take()  # the one worker is busy
    early.uploaded([str(clip_with_audio)])
    assert len(early) == 0
    early.workers.give_back()
    early.uploaded([str(clip_with_audio)])
    assert len(early) == 1
    early.uploaded([str(clip_with_audio)])  # the same file again: the run kept is the one
    assert len(early) == 1
    assert early.take(str(clip_with_audio), VideoSettings(seq=2048)) is None  # other settings: dropped
    assert len(early) == 0
    wait_for(lambda: _free(early.workers))  # stopped, before vLLM's call or after it
    assert calls in ([], [clip_with_audio.stat().st_size])  # one run begun, whatever was uploaded


def test_runs_no_event_takes_are_dropped_after_a_while_or_for_newer_ones(profile, clip_with_audio, clip_silent):
    now = [0.0]
    early = _early(profile, workers=2, keep_s=10, most=1, clock=lambda: now[0])
    early.uploaded([str(clip_with_audio)])
    wait_for(lambda: _free(early.workers))
    early.uploaded([str(clip_silent)])  # at most one kept: the newer
    assert len(early) == 1 and early.take(str(clip_with_audio), DEFAULTS) is None
    now[0] = 11.0
    assert early.take(str(clip_silent), DEFAULTS) is None and len(early) == 0  # too old
    wait_for(lambda: _free(early.workers))


def test_a_superseded_job_stops_the_run_it_took_before_vllm_decodes(profile, clip_with_audio, decodes, held):
    calls, _ = decodes
    release, arrived = held
    early = _early(profile)
    early.uploaded([str(clip_with_audio)])
    wait_for(lambda: arrived)
    run, job, outcome = early.take(str(clip_with_audio), DEFAULTS), Job("video", 1), {}

    def replay() -> None:
        try:
            run.replay(job, lambda fraction, text: None, None)
        except Superseded as exc:
            outcome["raised"] = exc

    thread = threading.Thread(target=replay)
    thread.start()
    job.cancel()  # a newer upload to the panel
    thread.join(10)
    assert isinstance(outcome.get("raised"), Superseded)
    release.set()
    wait_for(lambda: _free(early.workers))  # the run stopped at its next safe point and gave its worker back
    assert calls == []


def test_once_taken_the_run_waits_until_its_frames_are_shown_before_the_rest(profile, clip_silent, held):
    """As an inspection the event began itself (``inspect_page.VideoRun``): the budget and the other views are made
    only once the frames are on their way to the page, so that work never slows them down."""
    release, arrived = held
    early = _early(profile)
    early.uploaded([str(clip_silent)])
    wait_for(lambda: arrived)
    run, shown, result = early.take(str(clip_silent), DEFAULTS), threading.Event(), {}

    def frames_ready(frames) -> None:
        if frames.complete:
            result["frames"] = frames
            assert shown.wait(60)  # the page is being sent them

    thread = threading.Thread(target=lambda: result.setdefault(
        "inspected", run.replay(Job("video", 1), lambda fraction, text: None, frames_ready)))
    thread.start()
    release.set()  # taken before vLLM's call: now it may decode
    wait_for(lambda: "frames" in result)
    assert not thread.join(0.5) and not run.ended  # the rest waits
    shown.set()
    thread.join(60)
    assert run.ended and result["inspected"].apply(initial_state(SEQ))[0].video_path == str(clip_silent)


def test_a_run_begun_with_other_settings_than_the_events_stops_before_vllm_decodes(profile, clip_with_audio,
                                                                                  decodes, held):
    """A Budget control moved before the drop: the event begins its own inspection, and the run begun with the
    first settings gives its worker back at its next safe point rather than decoding for nobody."""
    calls, _ = decodes
    release, arrived = held
    early = _early(profile)
    early.uploaded([str(clip_with_audio)])
    wait_for(lambda: arrived)
    assert early.take(str(clip_with_audio), VideoSettings(seq=2048)) is None and len(early) == 0
    release.set()
    wait_for(lambda: _free(early.workers))
    assert calls == []


# ---------------------------------------------------------------- the page's steps take it
def _video_events(demo):
    fns = list(demo.fns.values())
    arrives = next(f for f in fns if getattr(f.fn, "func", None) is inspect_page.on_video_arrives)
    return arrives.fn, next(f for f in fns if f.api_name == "inspect_video").fn


@pytest.mark.parametrize("with_arrival", [True, False], ids=["page", "api"])
def test_the_video_events_show_the_inspection_the_upload_began(profile, clip_with_audio, decodes, with_arrival):
    """The page's arrival step (or, for an API call, the inspection event itself) takes the run the upload began
    with the Budget tab's first settings, which the wiring tells it; the event shows its frames, then its result."""
    calls, _ = decodes
    early = EarlyVideos(profile, Workers(1))
    arrives, inspect = _video_events(build_interface(profile, None, seq=SEQ, inspect_workers=1, early=early))
    path = str(clip_with_audio)
    early.uploaded([path])
    wait_for(lambda: calls)
    session = handlers.new_inspections(initial_state(SEQ))
    if with_arrival:  # the arrival takes it: the session's job is in flight from then on
        assert f"inspecting {clip_with_audio.name}" in arrives(session, path, *CONTROLS)
        assert session.job("video") is not None and len(early) == 0
    steps = list(inspect(session, path, *CONTROLS))
    assert calls.threads == ["early-inspection"] and len(early) == 0
    expected = inspect_file(clip_with_audio, profile, DEFAULTS, expected="video")
    frames, result = steps
    at = 2 + handlers.EVENT_KEYS["video"].index("frames_gallery")
    assert [caption.split(" · ")[0] for _, caption in frames[at]] == _timestamps(expected.frames)
    assert result[0].video_path == path and _timestamps(result[0].video.frames) == _timestamps(expected.frames)
    assert result[1].startswith(f"✓ **{clip_with_audio.name}**") and session.busy() == {}
    assert _free(early.workers)


class _Counted(Workers):
    """Workers that remember the most taken at once."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self._held, self.most, self._counting = 0, 0, threading.Lock()

    def _note(self, change: int) -> None:
        with self._counting:
            self._held += change
            self.most = max(self.most, self._held)

    def try_take(self) -> bool:
        taken = super().try_take()
        if taken:
            self._note(+1)
        return taken

    def take(self) -> None:
        super().take()
        self._note(+1)

    def give_back(self) -> None:
        self._note(-1)
        super().give_back()


def test_the_event_that_takes_the_run_holds_no_worker_of_its_own(profile, clip_with_audio, held):
    """The run begun as the bytes came in holds a worker for vLLM's call; the page's event replays it with none
    of its own: it waits for no worker (with every other one taken it would wait for this very run's), and another
    upload meanwhile finds one free."""
    release, arrived = held
    workers = _Counted(2)
    early = EarlyVideos(profile, workers)
    arrives, inspect = _video_events(build_interface(profile, None, seq=SEQ, inspect_workers=2, early=early))
    path = str(clip_with_audio)
    early.uploaded([path])
    wait_for(lambda: arrived)  # the run holds its worker, before vLLM's call
    session = handlers.new_inspections(initial_state(SEQ))
    assert f"inspecting {clip_with_audio.name}" in arrives(session, path, *CONTROLS)
    release.set()
    *frames, result = list(inspect(session, path, *CONTROLS))
    assert frames and result[1].startswith(f"✓ **{clip_with_audio.name}**")
    assert workers.most == 1 and _free(workers)


# ---------------------------------------------------------------- Gradio's upload route hands it over
def test_the_upload_route_begins_a_videos_inspection_and_answers_as_gradio_does(profile, clip_with_audio, photo,
                                                                                decodes):
    from gradio_client import Client, handle_file

    calls, _ = decodes
    with live_app(profile, seq=SEQ, inspect_workers=1) as demo:
        url = demo.local_url.rstrip("/")
        with photo.open("rb") as handle:
            answer = httpx.post(f"{url}/gradio_api/upload", files={"files": (photo.name, handle, "image/png")})
        [saved] = answer.json()
        assert answer.status_code == 200 and saved.endswith(photo.name)
        with clip_with_audio.open("rb") as handle:
            answer = httpx.post(f"{url}/gradio_api/upload",
                                files={"files": (clip_with_audio.name, handle, "video/mp4")})
        assert answer.status_code == 200 and answer.json()[0].endswith(clip_with_audio.name)
        wait_for(lambda: calls)
        assert calls.threads == ["early-inspection"]  # the video, as the route answered; the photo, never
        client = Client(demo.local_url, verbose=False, download_files=False)  # uploads the same bytes, then asks
        status, *_ = client.predict(handle_file(str(clip_with_audio)), *CONTROLS, api_name="/inspect_video")
    assert f"✓ **{clip_with_audio.name}**" in status
    assert calls == [clip_with_audio.stat().st_size]  # the event took the run begun: vLLM decoded it once


def test_gradios_ffmpeg_wasm_waits_until_the_inspection_is_done(profile, clip_silent, held):
    """The video panel's trim controls fetch FFmpeg.wasm (31.7 MB) as the upload is shown: the app answers it once
    every inspection worker has been free for a second, with Gradio's own file."""
    import gradio

    release, arrived = held
    wasm = Path(gradio.__file__).parent / "templates" / "frontend" / "static" / "ffmpeg" / "ffmpeg-core.wasm"
    with live_app(profile, seq=SEQ, inspect_workers=1) as demo:
        url = demo.local_url.rstrip("/")
        with clip_silent.open("rb") as handle:
            assert httpx.post(f"{url}/gradio_api/upload",
                              files={"files": (clip_silent.name, handle, "video/mp4")}).status_code == 200
        wait_for(lambda: arrived)  # the upload's inspection holds the one worker
        answer = {}
        fetch = threading.Thread(target=lambda: answer.setdefault(
            "wasm", httpx.get(f"{url}/static/ffmpeg/ffmpeg-core.wasm", timeout=60)))
        fetch.start()
        assert not fetch.join(1.5) and fetch.is_alive()  # not while it inspects
        release.set()
        fetch.join(60)
        assert httpx.get(f"{url}/static/ffmpeg/ffmpeg-core.js").status_code == 200  # the rest as Gradio serves it
    assert answer["wasm"].status_code == 200 and answer["wasm"].content == wasm.read_bytes()


def test_ffmpeg_wasm_waits_no_longer_than_its_bound():
    import asyncio

    from fastapi import FastAPI

    from dots3_demo.serving.deferred_assets import defer_ffmpeg

    app, asked = FastAPI(), []

    @app.get("/static/{path:path}")
    async def static_resource(path: str):
        asked.append(path)
        return path

    assert defer_ffmpeg(app, lambda: 0.0, quiet_s=1.0, most_s=0.2)  # never quiet: served at the bound
    route = next(r for r in app.router.routes if getattr(r, "path", "") == "/static/ffmpeg/ffmpeg-core.wasm")
    assert asyncio.run(asyncio.wait_for(route.endpoint(), 5)) == "ffmpeg/ffmpeg-core.wasm"
    assert asked == ["ffmpeg/ffmpeg-core.wasm"]
    assert not defer_ffmpeg(FastAPI(), lambda: 0.0)  # no static route: nothing changed
