"""Inspections side by side in the app: sessions (and one session's panels) inspect at the same time,
each session stays consistent, a new upload supersedes the one in flight, and the status line shows
every panel. Speed is measured by ``benchmarks/inspect_concurrency.py``, never here."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import gradio as gr
import pytest

from dots3_demo.core.state import initial_state
from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.inspection.session import default_workers
from dots3_demo.ui import build_interface, handlers, inspect_page
from support.live import live_app
from support.waiting import wait_for

SEQ = 8192
CONTROLS = (SEQ, True, 0, 0, 1.0, "eval_ek")
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def gate(monkeypatch, *, parties: int = 0, only: str = ""):
    """``handlers.inspect_file`` held at a gate (with ``only``: for that file name alone): ``parties`` > 0
    makes that many inspections meet there (a barrier: it breaks, failing the test, unless they run at
    the same time); otherwise each waits until ``release`` is set. ``arrived`` names those that came."""
    real = handlers.inspect_file
    barrier = threading.Barrier(parties, timeout=60) if parties else None
    release, arrived, lock = threading.Event(), [], threading.Lock()

    def gated(path, *args, **kwargs):
        name = os.path.basename(str(path))
        if not only or name == only:
            with lock:
                arrived.append(name)
            if barrier is not None:
                barrier.wait()
            else:
                assert release.wait(60)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(handlers, "inspect_file", gated)
    yield release, arrived


def _session() -> handlers.Inspections:
    return handlers.new_inspections(initial_state(SEQ))


def _timestamps(report) -> list[str]:
    return [f.timestamp for f in report.frames]


# ---------------------------------------------------------------- two sessions at once, in the live app
@pytest.fixture(scope="module")
def live(profile):
    with live_app(profile, seq=SEQ, inspect_workers=2) as demo:
        yield demo


def test_two_sessions_inspect_at_once_and_each_gets_its_own_result(live, profile, clip_with_audio, clip_silent,
                                                                   monkeypatch):
    from gradio_client import Client, handle_file

    clips = {"a": clip_with_audio, "b": clip_silent}
    expected = {k: inspect_file(p, profile, VideoSettings(seq=SEQ), expected="video") for k, p in clips.items()}
    assert _timestamps(expected["a"]) != _timestamps(expected["b"])
    gallery_at = handlers.EVENT_KEYS["video"].index("frames_gallery") + 1  # the API's outputs: status, the views
    results: dict[str, tuple] = {}

    def upload(key: str) -> None:
        client = Client(live.local_url, verbose=False, download_files=False)  # its own session
        results[key] = client.predict(handle_file(str(clips[key])), *CONTROLS, api_name="/inspect_video")

    with gate(monkeypatch, parties=2):  # both inspections must be inside at the same time
        threads = [threading.Thread(target=upload, args=(key,)) for key in clips]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
    assert set(results) == {"a", "b"}
    for key, clip in clips.items():
        status, gallery = results[key][0], results[key][gallery_at]
        assert f"✓ **{clip.name}** — {len(expected[key].frames)} frames" in status
        assert clips["b" if key == "a" else "a"].name not in status  # nothing of the other session
        assert [item["caption"].split(" · ")[0] for item in gallery] == _timestamps(expected[key])
        assert all(item["image"]["path"].endswith(".jpg") for item in gallery)


def test_the_inspect_events_run_as_many_at_once_as_the_flag_says(profile):
    demo = build_interface(profile, None, seq=SEQ, inspect_workers=3)
    by_name = {f.api_name: f for f in demo.fns.values()}
    for name in ("inspect_video", "set_seq", "inspect_images", "inspect_audio", "inspect_recording",
                 "sync_max_new_tokens", "inspect_video_figures"):
        assert by_name[name].concurrency_limit == 3, name
    assert by_name["inspect_video_shown"].concurrency_limit == 1  # the ordered step: one at a time
    assert by_name["inspect_video"].trigger_mode == "multiple"  # a new upload does not wait for the old
    default = build_interface(profile, None, seq=SEQ)
    assert next(f for f in default.fns.values() if f.api_name == "inspect_video").concurrency_limit == \
        default_workers()


def test_the_flag_from_the_command_line_to_help_and_readme(capsys):
    import app

    with pytest.raises(SystemExit):
        app.parse_args(["--help=Dots3 NOTE Studio"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--inspect-workers N" in help_text and "one per CPU core" in help_text and "2 GiB" in help_text
    assert f"(default: {default_workers()})" in help_text
    assert app.parse_args(["--inspect-workers", "5"]).inspect_workers == 5
    assert app.parse_args([]).inspect_workers == default_workers()
    for bad in ("0", "-2", "two"):
        with pytest.raises(SystemExit):
            app.parse_args(["--inspect-workers", bad])
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`--inspect-workers`" in readme and "one per CPU core" in readme and "2 GiB" in readme


# ---------------------------------------------------------------- a new upload supersedes the one in flight
def test_a_new_upload_supersedes_the_one_in_flight(profile, clip_with_audio, clip_silent, decodes, monkeypatch):
    decoded, _ = decodes
    fn = next(f for f in build_interface(profile, None, seq=SEQ).fns.values() if f.api_name == "inspect_video")
    session, results = _session(), {}
    with gate(monkeypatch) as (release, arrived):
        first = threading.Thread(target=lambda: results.setdefault(
            "first", list(fn.fn(session, str(clip_with_audio), *CONTROLS))))
        first.start()
        wait_for(lambda: arrived == [clip_with_audio.name])  # the first is inside its inspection
        job = session.job("video")
        assert job is not None and not job.cancelled
        second = threading.Thread(target=lambda: results.setdefault(
            "second", list(fn.fn(session, str(clip_silent), *CONTROLS))))
        second.start()
        wait_for(lambda: len(arrived) == 2)  # the second has begun (superseding the first)
        release.set()
        first.join(120)
        second.join(120)
    assert job.cancelled
    [superseded] = results["first"]  # it never showed its frames, and its result overwrites nothing
    assert all(value is gr.skip() or value == gr.skip() for value in superseded)
    assert decoded == [clip_silent.stat().st_size]  # the superseded job never reached vLLM's decoding
    expected = inspect_file(clip_silent, profile, VideoSettings(seq=SEQ), expected="video")
    assert session.state.video_path == str(clip_silent) and _timestamps(session.state.video) == _timestamps(expected)
    assert clip_silent.name in results["second"][-1][1] and clip_with_audio.name not in results["second"][-1][1]
    assert session.busy() == {}


def test_an_upload_announced_cancels_the_job_in_flight_at_once(profile, clip_with_audio, clip_silent, monkeypatch):
    session, results = _session(), {}
    with gate(monkeypatch) as (release, arrived):
        first = threading.Thread(target=lambda: results.setdefault("first", handlers.inspect_video(
            session, profile, str(clip_with_audio), VideoSettings(seq=SEQ))))
        first.start()
        wait_for(lambda: arrived)
        job = session.job("video")
        status = handlers.announce_video(session, str(clip_silent))  # what the page does as the file lands
        assert job.cancelled and f"⏳ **Video** — inspecting {clip_silent.name}…" in status
        release.set()
        first.join(120)
    assert results["first"] is None and session.state.video is None  # it stopped and changed nothing
    update = handlers.inspect_video(session, profile, str(clip_silent), VideoSettings(seq=SEQ))
    assert update is not None and update.state.video_path == str(clip_silent)


# ---------------------------------------------------------------- a video begins as it arrives
def _video_events(demo):
    """The video panel's two wired steps: as the upload arrives (``queue=False``), and its inspection event."""
    fns = list(demo.fns.values())
    arrives = next(f for f in fns if getattr(f.fn, "func", None) is inspect_page.on_video_arrives)
    return arrives.fn, next(f for f in fns if f.api_name == "inspect_video").fn


def test_a_video_is_inspected_from_the_moment_it_arrives_and_its_event_shows_that_inspection(
        profile, clip_with_audio, decodes, monkeypatch):
    """The page's first step for a video (as it arrives, ``queue=False``) begins its inspection when a worker is free;
    the inspection event that follows a browser round trip later shows that very inspection — the frames first, then
    the result — and decodes nothing again."""
    calls, _ = decodes
    arrives, inspect = _video_events(build_interface(profile, None, seq=SEQ, inspect_workers=2))
    session = _session()
    with gate(monkeypatch) as (release, arrived):
        status = arrives(session, str(clip_with_audio), *CONTROLS)
        assert f"⏳ **Video** — inspecting {clip_with_audio.name}…" in status
        wait_for(lambda: arrived == [clip_with_audio.name], 10)  # inspecting before its event is there
        release.set()
        steps = list(inspect(session, str(clip_with_audio), *CONTROLS))
    assert calls == [clip_with_audio.stat().st_size]  # one decoding: the event took the inspection begun
    expected = inspect_file(clip_with_audio, profile, VideoSettings(seq=SEQ), expected="video")
    frames, result = steps  # the frames gallery alone, then the event's outputs
    at = 2 + handlers.EVENT_KEYS["video"].index("frames_gallery")
    assert [caption.split(" · ")[0] for _, caption in frames[at]] == _timestamps(expected)
    assert result[at] is frames[at]
    assert result[0].video_path == str(clip_with_audio) and _timestamps(result[0].video) == _timestamps(expected)
    assert result[1].startswith(f"✓ **{clip_with_audio.name}**") and session.busy() == {}
    before = len(calls)  # inspect_file above decoded too
    again = list(inspect(session, str(clip_with_audio), *CONTROLS))  # the same event again (an API call): inspects
    assert len(calls) == before + 1 and _timestamps(again[-1][0].video) == _timestamps(expected)


def test_an_event_with_other_budget_settings_than_the_arrival_inspects_with_its_own(
        profile, clip_with_audio, decodes, monkeypatch):
    """A Budget control moved between the upload's arrival and its event: the inspection begun with the old
    settings is superseded (it never decodes) and the event plans the video with the settings it was given."""
    calls, _ = decodes
    arrives, inspect = _video_events(build_interface(profile, None, seq=SEQ, inspect_workers=2))
    session = _session()
    with gate(monkeypatch) as (release, arrived):
        arrives(session, str(clip_with_audio), *CONTROLS)
        wait_for(lambda: arrived, 10)
        early = session.job("video")
        outcome = {}
        event = threading.Thread(target=lambda: outcome.setdefault(
            "steps", list(inspect(session, str(clip_with_audio), 2048, *CONTROLS[1:]))))
        event.start()
        wait_for(lambda: len(arrived) == 2)
        release.set()
        event.join(120)
    assert early.cancelled and calls == [clip_with_audio.stat().st_size]
    expected = inspect_file(clip_with_audio, profile, VideoSettings(seq=2048), expected="video")
    state = outcome["steps"][-1][0]
    assert state.settings == VideoSettings(seq=2048) and _timestamps(state.video) == _timestamps(expected)


def test_the_event_of_an_upload_superseded_before_it_came_changes_nothing(
        profile, clip_with_audio, clip_silent, decodes, monkeypatch):
    """Two videos dropped one after the other, both arriving before the first one's event: the first inspection
    is superseded as the second arrives; the first one's event then changes nothing (it neither inspects nor
    supersedes the second), and the second one's event shows the second inspection."""
    calls, _ = decodes
    arrives, inspect = _video_events(build_interface(profile, None, seq=SEQ, inspect_workers=2))
    session = _session()
    with gate(monkeypatch) as (release, arrived):
        arrives(session, str(clip_with_audio), *CONTROLS)
        wait_for(lambda: arrived == [clip_with_audio.name], 10)
        first = session.job("video")
        arrives(session, str(clip_silent), *CONTROLS)
        wait_for(lambda: len(arrived) == 2, 10)
        assert first.cancelled
        stale = list(inspect(session, str(clip_with_audio), *CONTROLS))
        assert len(stale) == 1 and all(value == gr.skip() for value in stale[0])
        assert not session.job("video").cancelled  # the second goes on
        release.set()
        steps = list(inspect(session, str(clip_silent), *CONTROLS))
    assert calls == [clip_silent.stat().st_size]
    assert steps[-1][0].video_path == str(clip_silent) and session.busy() == {}


def test_with_every_worker_busy_a_video_waits_for_its_event_and_no_more_decode_at_once(
        profile, clip_with_audio, clip_silent, photo, decodes, monkeypatch):
    """One worker: the first session's video takes it as it arrives; the second session's video, arriving
    meanwhile, is only announced (shown busy, nothing begun) and its event waits for the worker; an image upload
    waits too. Every result lands and no two inspections decoded at once."""
    calls, running = decodes
    demo = build_interface(profile, None, seq=SEQ, inspect_workers=1)
    arrives, inspect = _video_events(demo)
    images = next(f for f in demo.fns.values() if f.api_name == "inspect_images").fn
    one, two, three, results = _session(), _session(), _session(), {}
    with gate(monkeypatch, only=clip_with_audio.name) as (release, arrived):
        arrives(one, str(clip_with_audio), *CONTROLS)
        wait_for(lambda: arrived, 10)
        status = arrives(two, str(clip_silent), *CONTROLS)
        assert f"inspecting {clip_silent.name}" in status and two.job("video") is None  # announced, not begun
        threads = [threading.Thread(target=lambda s=s, p=p, k=k: results.setdefault(k, list(inspect(s, p, *CONTROLS))))
                   for s, p, k in ((two, str(clip_silent), "two"), (one, str(clip_with_audio), "one"))]
        threads.append(threading.Thread(target=lambda: results.setdefault("three", images(three, [str(photo)]))))
        for thread in threads:
            thread.start()
        assert not any(thread.join(0.5) or not thread.is_alive() for thread in threads)  # all wait for the worker
        assert calls == [] and two.job("video") is None and three.state.images == ()
        release.set()
        for thread in threads:
            thread.join(120)
    assert sorted(calls) == sorted([clip_with_audio.stat().st_size, clip_silent.stat().st_size])
    assert running[1] == 1  # never two at once
    assert results["one"][-1][0].video_path == str(clip_with_audio)
    assert results["two"][-1][0].video_path == str(clip_silent)
    assert len(results["three"][0].images) == 1


def test_new_budget_settings_replan_the_video_still_being_inspected(profile, clip_with_audio, monkeypatch):
    """Moving a slider while the upload is inspected: the upload's job is superseded by one that plans
    the same video with the new settings (not lost, not planned with the old ones)."""
    session, results = _session(), {}
    small = VideoSettings(seq=2048)
    with gate(monkeypatch) as (release, arrived):
        upload = threading.Thread(target=lambda: results.setdefault("upload", handlers.inspect_video(
            session, profile, str(clip_with_audio), VideoSettings(seq=SEQ))))
        upload.start()
        wait_for(lambda: arrived)
        handlers.announce_settings(session)
        release.set()
        results["settings"] = handlers.inspect_settings(session, profile, small)
        upload.join(120)
    expected = inspect_file(clip_with_audio, profile, small, expected="video")
    assert results["upload"] is None
    assert session.state.settings == small and _timestamps(session.state.video) == _timestamps(expected)
    assert "Re-solved for seq 2,048" in results["settings"].status


def test_clearing_the_microphone_leaves_an_audio_file_being_inspected(profile, tone, monkeypatch):
    session = _session()
    with gate(monkeypatch) as (release, arrived):
        upload = threading.Thread(target=handlers.inspect_audio, args=(session, profile, str(tone), "file"))
        upload.start()
        wait_for(lambda: arrived)
        job = session.job("audio")
        handlers.announce_audio(session, None, "microphone")
        assert handlers.inspect_audio(session, profile, None, "microphone").views == {}
        assert not job.cancelled
        release.set()
        upload.join(120)
    assert session.state.audio_path == str(tone)


# ---------------------------------------------------------------- one session's panels, and the status line
def test_one_sessions_panels_inspect_side_by_side_and_the_status_line_shows_them_all(
        profile, clip_with_audio, photo, tone, monkeypatch):
    demo = build_interface(profile, None, seq=SEQ, inspect_workers=3)
    fns = {f.api_name: f for f in demo.fns.values()}
    session, results = _session(), {}
    with gate(monkeypatch, only=clip_with_audio.name) as (release, arrived):
        video = threading.Thread(target=lambda: results.setdefault(
            "video", list(fns["inspect_video"].fn(session, str(clip_with_audio), *CONTROLS))))
        video.start()
        wait_for(lambda: arrived)  # the video is being inspected while the others arrive and finish
        results["images"] = fns["inspect_images"].fn(session, [str(photo)])
        results["audio"] = fns["inspect_audio"].fn(session, str(tone))
        release.set()
    # the images' status line, drawn while the video was busy, shows all three panels
    lines = results["images"][1].split("  \n")
    assert lines[0] == f"⏳ **Video** — inspecting {clip_with_audio.name}…" and lines[1].startswith("✓ 1 image(s)")
    video.join(120)
    # then, whichever event finished last, the ordered step shows every panel's result
    state, status, summary, *_ = fns["inspect_images_shown"].fn(session)
    lines = status.split("  \n")
    assert len(lines) == 3 and lines[0].startswith(f"✓ **{clip_with_audio.name}**")
    assert lines[1].startswith("✓ 1 image(s)") and lines[2].startswith(f"✓ **{tone.name}**")
    assert state.video is not None and len(state.images) == 1 and state.audio is not None  # nothing lost
    assert all(row in summary for row in ("video frames", "images", "audio clip"))
    again = fns["inspect_video_shown"].fn(session)  # nothing new since: only the status line again
    assert again[1] == status and again[0] == gr.skip() and again[2] == gr.skip()
    figures = fns["inspect_video_figures"].fn(session)
    assert all(f is not None and f != gr.skip() for f in (figures[0], figures[2], figures[3]))  # cost, timeline, mel


def test_a_rejected_upload_is_one_line_and_the_others_stay(profile, clip_with_audio, text_as_video, photo):
    session = _session()
    handlers.inspect_images(session, profile, [str(photo)])
    update = handlers.inspect_video(session, profile, str(text_as_video), VideoSettings(seq=SEQ))
    assert update.error and update.views == {}
    lines = update.status.split("  \n")
    assert lines[0].startswith("⚠ **Video rejected") and lines[1].startswith("✓ 1 image(s)")
    assert handlers.status_md(_session()) == handlers.IDLE_STATUS
