"""Plain functions behind every UI event (no Gradio imports: tests call them directly).

Each browser session's uploads go through an ``InspectionSession`` (``inspect_*`` below): panels and
sessions inspect side by side, a new upload to a panel supersedes the one in flight, and each result
is applied to the session's latest state, so none is lost. An inspection event returns a
``PanelUpdate``: the new state, the status line, an optional error message and the panel's own
views keyed by output name (its panel's ``EVENT_KEYS``). A key that is missing means "leave that output as it
is" — so a bad upload changes only the status, and every other panel keeps its result. A video's
frames are shown as soon as vLLM has sampled them (``frames_shown``), its other views
(``LATER_KEYS``, ``later_views``) once the page has shown the frames. The figures (``panel_figures``)
and the views every panel shares (``shared_views``: the summary, the budget bar) are drawn after it,
with the status line of all panels (``status_md``).

The chat lives in ``dots3_demo.ui.chat`` (plain async generators over a ``ChatEngine``) and what the
page shows of it in ``dots3_demo.ui.chat_views``; with no engine it explains how to attach one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dots3_demo import ffmpeg
from dots3_demo.core.counts import totals
from dots3_demo.core.state import StudioState
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.inspection import InspectionError, inspect_file, interruption_points
from dots3_demo.inspection.image import ImageReport, draw_token_grid
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.session import InspectionSession, Job, Started, Superseded
from dots3_demo.inspection.video import FrameInfo, FramesReady, Progress, SampledFrames, VideoSettings
from dots3_demo.profiles import Profile
from dots3_demo.ui import figures, views

# Every output an event may update, in the order ``build_interface`` wires them.
VIEW_KEYS: tuple[str, ...] = (
    "summary", "budget_plot", "reserve",
    "frames_info", "frames_gallery", "frame_strip",
    "cost_plot", "fps_plot", "solver_md",
    "timeline_plot", "stream_html", "groups_df", "segment_pick", "segment_audio",
    "grid_info", "grid_gallery",
    "mel_plot", "mel_info", "heard_audio",
)
# Drawn after the panel's own views, so a video's frames show without waiting for its plots.
FIGURE_KEYS: tuple[str, ...] = ("cost_plot", "fps_plot", "timeline_plot", "mel_plot")
# Depend on every panel: drawn by one ordered step after each inspection (``shared_views``). The
# reserve slider follows the Budget settings alone, so the video panel's events show it themselves.
SHARED_KEYS: tuple[str, ...] = ("summary", "budget_plot")
# The video's views but its frames, drawn once the page has shown the frames (``later_views``): made and sent
# while the browser fetched the pictures, they held the pictures back (the app's Python work and the
# pictures' serving share one interpreter lock): 0.2 s from the frames sent to all 27 loaded, against 0.1 s
# after them (Chromium, 2 cores; benchmarks/inspect_concurrency.py).
LATER_KEYS: tuple[str, ...] = ("frames_info", "frame_strip", "solver_md", "stream_html", "groups_df", "segment_pick",
                               "segment_audio")
# What each panel's inspection event itself shows (``panel_views``), besides the state and the status line: its
# outputs, and no other. Gradio rebuilds a component for every ``gr.skip()`` an event yields: with a skip for
# each of the other panels' views and the video's later ones, Gradio's postprocessing of a video event's frames
# step took 24–42 ms and of its last step 23–28 ms, against 14 and 9–12 ms without (in-process, this box).
EVENT_KEYS: dict[str, tuple[str, ...]] = {
    "video": ("reserve", "frames_gallery"),
    "images": ("grid_info", "grid_gallery"),
    "audio": ("mel_info", "heard_audio"),
}

GETTING_STARTED = (
    "**Start here:** drop a video, images or audio on the left. Each upload goes through vLLM's own "
    "dots3_note preprocessing, and the tabs show what the model receives:\n\n"
    "- **Frames** — every frame the vision tower gets, the exact timestamp text placed before it, its "
    "patch grid and token count\n"
    "- **Budget** — the degrade solver: how seq, output reserve, max new tokens and audio cap become "
    "fps × patch size (move a slider to re-solve)\n"
    "- **Interleave** — frames and sound segments in prompt order, with a player for each segment\n"
    "- **Image grid** · **Audio mel** — the patch grid of each image; the log-mel spectrogram and "
    "encoder chunks of an audio clip"
)

SEQ_MIN, SEQ_MAX, SEQ_STEP = 1024, 131072, 256
MAX_NEW_TOKENS_MAX = 32768


TEXT_ONLY_NOTE = ("⚠ **not sent to the model:** this engine takes text only (--language-model-only, or a "
                  "text-only model); the panels still show what the model would see")


def media_note(engine: ChatEngine | None) -> str:
    """Said with every upload when the engine takes no media at all ("" otherwise or while unknown)."""
    limits = engine.mm_limits if engine is not None else None
    return TEXT_ONLY_NOTE if limits is not None and not any(limits.values()) else ""


def chat_enabled(engine: ChatEngine | None) -> bool:
    return engine is not None


# ---------------------------------------------------------------- views
def _empty_video_views(message: str) -> dict[str, Any]:
    return {
        "frames_info": message,
        "frames_gallery": [],
        "frame_strip": views.frame_strip_html(None, None),
        "cost_plot": figures.empty_figure("upload a video to see the degrade solver's cost curve"),
        "fps_plot": None,
        "solver_md": "",
        "timeline_plot": figures.empty_figure("upload a video to see frames and audio on one time axis"),
        "stream_html": "",
        "groups_df": [],
        "segment_pick": {"choices": [], "value": None},
        "segment_audio": None,
    }


def video_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    """Frames, Budget (solver) and Interleave outputs for the session's video."""
    return {**video_panel_views(profile, state), **video_figures(state)}


def video_panel_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    """The video's outputs but its figures: the frames and their gallery, the solver, the interleave."""
    return {**video_frames_views(profile, state), **video_later_views(profile, state)}


def video_frames_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    """The frames gallery: what a video event shows at once."""
    return {"frames_gallery": frames_gallery(profile, state.video.frames) if state.video is not None else []}


def video_later_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    """The video's views but its frames and figures (``LATER_KEYS``): frame strip, solver, interleave."""
    report = state.video
    if report is None:
        return {k: v for k, v in _empty_video_views(GETTING_STARTED).items() if k in LATER_KEYS}
    choices = views.segment_choices(report)
    return {
        "frames_info": views.frames_info_md(report, profile),
        "frame_strip": views.frame_strip_html(report, profile),
        "solver_md": views.solver_md(report, profile),
        "stream_html": views.stream_html(report, profile),
        "groups_df": views.group_rows(report),
        "segment_pick": {"choices": choices, "value": choices[0][1] if choices else None},
        "segment_audio": segment_audio(state, 0) if choices else None,
    }


def frames_gallery(profile: Profile, frames: Sequence[FrameInfo]) -> list[tuple[Any, str]]:
    """The frames gallery: each frame vLLM sampled, in its order, captioned with the timestamp text vLLM put
    before it, its grid and tokens."""
    return [(f.image, views.frame_caption(f, profile)) for f in frames]


def video_figures(state: StudioState) -> dict[str, Any]:
    """The video's plots: the solver's cost curve, fps and patch cap, the interleave time line."""
    report = state.video
    if report is None:
        return {k: v for k, v in _empty_video_views("").items() if k in FIGURE_KEYS}
    return {
        "cost_plot": figures.cost_curve_figure(report),
        "fps_plot": figures.fps_patch_figure(report),
        "timeline_plot": figures.interleave_figure(report),
    }


def budget_rows(state: StudioState) -> list[tuple[str, dict[str, int]]]:
    rows: list[tuple[str, dict[str, int]]] = []
    if state.video is not None:
        rows += figures.video_budget_rows(state.video)
    if state.images or state.audio is not None or not rows:
        rows.append(("all media", totals(state)))
    return rows


def summary_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    """Outputs that depend on every upload: the summary table and the budget bar."""
    s = state.settings
    return {
        "summary": views.summary_html(state, profile),
        "budget_plot": figures.budget_figure(
            s.seq, s.effective_reserve, budget_rows(state), approximate=profile.is_preview
        ),
        "reserve": s.configured_reserve,
    }


def image_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    return {
        "grid_info": views.images_md(list(state.images), profile),
        "grid_gallery": [(draw_token_grid(r), views.image_caption(p, r, profile)) for p, r in state.images],
    }


def audio_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    return {**audio_panel_views(profile, state), **audio_figures(state)}


def audio_panel_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    report = state.audio
    if report is None:
        return {"mel_info": "Upload or record audio on the left.", "heard_audio": None}
    return {
        "mel_info": views.audio_md(report, state.audio_source, state.audio_path),
        "heard_audio": to_int16_audio(report.sample_rate, report.waveform),
    }


def audio_figures(state: StudioState) -> dict[str, Any]:
    report = state.audio
    if report is None:
        return {"mel_plot": figures.empty_figure("upload or record audio to see its log-mel spectrogram")}
    return {"mel_plot": figures.mel_figure(report)}


def all_views(profile: Profile, state: StudioState) -> dict[str, Any]:
    """Every output, for the first page load."""
    return {
        **summary_views(profile, state), **video_views(profile, state),
        **image_views(profile, state), **audio_views(profile, state),
    }


def to_int16_audio(rate: int, waveform: np.ndarray | None) -> tuple[int, np.ndarray] | None:
    if waveform is None or len(waveform) == 0:
        return None
    clipped = np.clip(np.asarray(waveform, dtype=np.float32), -1.0, 1.0)
    return int(rate), (clipped * 32767).astype(np.int16)


def segment_audio(state: StudioState, index: int | None) -> tuple[int, np.ndarray] | None:
    """The waveform (16 kHz, as the model hears it) of one of the video's audio segments."""
    report = state.video
    if report is None or index is None:
        return None
    try:
        seg = report.audio_segments[int(index)]
    except (IndexError, ValueError, TypeError):
        return None
    return to_int16_audio(report.sample_rate, seg.waveform)


# ---------------------------------------------------------------- events
@dataclass(frozen=True)
class Inspected:
    """An upload, inspected but not yet applied to a state.

    ``apply(state) → (new state, the panel's status line)`` is quick and never raises: a session
    applies it to its *latest* state. A new state object means the panel changed (its views are
    shown); the same object means nothing changed (a rejected file keeps the panel as it was).
    ``group`` names the views the panel's change touches (``""``: only the summary); ``error``
    is the message of the toast.
    """

    apply: Callable[[StudioState], tuple[StudioState, str]]
    group: str
    error: str | None = None


def _rejected(what: str, path: Any, exc: Exception | str, group: str) -> Inspected:
    name = views.name_of(path) if isinstance(path, str) else ""
    message = f"{what}{f' {name}' if name else ''}: {exc}"
    status = f"⚠ **{views.esc(what)}{f' `{views.esc(name)}`' if name else ''}** — {views.esc(str(exc))}"
    return Inspected(lambda state: (state, status), group, message)


def panel_views(profile: Profile, state: StudioState, group: str) -> dict[str, Any]:
    """A group's views but its figures and, for the video, but those drawn once its frames are shown
    (``LATER_KEYS``): what an inspection event shows at once (the group's ``EVENT_KEYS``). The video's group
    (``""``: the Budget settings alone) carries the reserve slider too."""
    make = {"video": video_frames_views, "images": image_views, "audio": audio_panel_views}.get(group)
    shown = make(profile, state) if make else {}
    if group in ("video", ""):
        shown["reserve"] = state.settings.configured_reserve
    return shown


def figure_views(state: StudioState, group: str) -> dict[str, Any]:
    """A group's figures (``FIGURE_KEYS``), drawn after its other views."""
    make = {"video": video_figures, "audio": audio_figures}.get(group)
    return make(state) if make else {}


def video_inspected(
    profile: Profile, path: str | None, settings: VideoSettings, progress: Progress | None = None,
    *, limits: UploadLimits = UploadLimits(), frames_ready: FramesReady | None = None,
) -> Inspected:
    """Run vLLM's video preprocessing on ``path`` with ``settings`` (``None``: the video was cleared);
    ``frames_ready`` gets vLLM's frames as it makes them (``inspect_file``)."""
    if not path:
        return Inspected(lambda state: (replace(state, video_path=None, video=None, settings=settings),
                                        "Video cleared."), "video")
    started = time.monotonic()
    try:
        report = inspect_file(path, profile, settings, expected="video", limits=limits, progress=progress,
                              frames_ready=frames_ready)
    except InspectionError as exc:
        return _rejected("Video rejected", path, exc, "video")
    status = (f"✓ **{views.esc(views.name_of(path))}** — {len(report.frames)} frames, "
              f"{len(report.audio_segments)} audio segments, {views.approx(profile, 'text')}"
              f"{report.prompt_tokens:,} tokens ({time.monotonic() - started:.1f} s)")
    if not report.complete:
        status += " · ⚠ **incomplete: sound track not decoded**"
        if report.audio.reason.startswith(ffmpeg.NOT_INSTALLED):  # the cause is the machine, not the file
            status += f" ({ffmpeg.NOT_INSTALLED})"
    return Inspected(lambda state: (replace(state, video_path=str(path), video=report, settings=settings), status),
                     "video")


def resolved_inspected(
    profile: Profile, path: str | None, settings: VideoSettings, progress: Progress | None = None,
    *, limits: UploadLimits = UploadLimits(), frames_ready: FramesReady | None = None,
) -> Inspected:
    """A Budget control moved: re-plan the video at ``path`` (``None``: there is none, keep the settings)."""
    try:
        settings.validate()
    except InspectionError as exc:
        return _rejected("Settings rejected", None, exc, "video")
    if path is None:
        status = f"Budget set: seq {settings.seq:,}, reserve {settings.effective_reserve:,}."
        return Inspected(lambda state: (replace(state, settings=settings), status), "")
    inspected = video_inspected(profile, path, settings, progress, limits=limits, frames_ready=frames_ready)
    if inspected.error is not None:
        return inspected

    def resolved(state: StudioState) -> tuple[StudioState, str]:
        new, status = inspected.apply(state)
        return new, f"Re-solved for seq {settings.seq:,}: " + status.removeprefix("✓ ")

    return replace(inspected, apply=resolved)


def images_inspected(profile: Profile, paths: Sequence[str] | str | None, *,
                     limits: UploadLimits = UploadLimits()) -> Inspected:
    """Images were uploaded (the whole list); bad ones are reported, good ones shown."""
    if isinstance(paths, str):
        paths = [paths]
    paths = [str(p) for p in (paths or [])]
    good: list[tuple[str, ImageReport]] = []
    errors: list[str] = []
    for path in paths:
        try:
            good.append((path, inspect_file(path, profile, expected="image", limits=limits)))
        except InspectionError as exc:
            errors.append(f"{views.name_of(path)}: {exc}")
    if errors and not good:
        message = "; ".join(errors)
        status = f"⚠ **Image rejected** — {views.esc(message)}"
        return Inspected(lambda state: (state, status), "images", f"Image rejected — {message}")
    limit = profile.mm_limits.get("image", 0)
    if not paths:
        status = "Images cleared."
    else:
        tokens = sum(r.tokens for _, r in good)
        status = f"✓ {len(good)} image(s), {views.approx(profile, 'image')}{tokens:,} tokens"
        if len(good) > limit:
            status += f" · ⚠ more than vLLM's {limit} images per prompt"
    error = None
    if errors:
        error = "Some images were rejected — " + "; ".join(errors)
        status += f" · ⚠ **rejected:** {views.esc('; '.join(errors))}"
    return Inspected(lambda state: (replace(state, images=tuple(good)), status), "images", error)


def audio_inspected(profile: Profile, path: str | None, source: str = "file", *,
                    limits: UploadLimits = UploadLimits()) -> Inspected:
    """Audio was uploaded or recorded (or cleared)."""
    if not path:
        def cleared(state: StudioState) -> tuple[StudioState, str]:
            if state.audio_source and state.audio_source != source:
                return state, ""  # the other input was cleared; keep what we have
            return replace(state, audio=None, audio_path=None, audio_source=""), "Audio cleared."

        return Inspected(cleared, "audio")
    try:
        report = inspect_file(path, profile, expected="audio", limits=limits)
    except InspectionError as exc:
        return _rejected("Audio rejected", path, exc, "audio")
    status = f"✓ **{views.esc(views.name_of(path)) if source == 'file' else 'recording'}** — " \
             f"{report.duration:.2f} s, {report.tokens:,} audio tokens"
    return Inspected(lambda state: (replace(state, audio=report, audio_path=str(path), audio_source=source), status),
                     "audio")


# ---------------------------------------------------------------- inspections side by side
Inspections = InspectionSession[StudioState]

PANELS: tuple[str, ...] = ("video", "images", "audio")
PANEL_NAMES = {"video": "Video", "images": "Images", "audio": "Audio"}
IDLE_STATUS = "Upload media to see what the model sees."


def new_inspections(state: StudioState) -> Inspections:
    """A session's inspections, starting from ``state`` (``gr.State`` copies it for each visitor)."""
    return InspectionSession(state)


@dataclass(frozen=True)
class PanelUpdate:
    """What an inspection event shows once its result is committed to the session."""

    state: StudioState
    status: str  # the status line: every panel
    error: str | None = None
    views: dict[str, Any] = field(default_factory=dict)  # the panel's ``EVENT_KEYS`` only


def status_md(session: Inspections) -> str:
    """One line per panel: what it is inspecting (⏳), else what its last result said."""
    busy, said = session.busy(), session.statuses()
    lines = []
    for panel in PANELS:
        if panel in busy:
            lines.append(f"⏳ **{PANEL_NAMES[panel]}** — inspecting {views.esc(busy[panel])}…")
        elif said.get(panel):
            lines.append(said[panel])
    return "  \n".join(lines) or IDLE_STATUS


def _watching(progress: Progress | None, job: Job) -> Progress:
    """``progress`` that also stops a superseded job at each report."""
    def report(fraction: float, text: str) -> None:
        job.raise_if_cancelled()
        if progress is not None:
            progress(fraction, text)

    return report


def _run(session: Inspections, profile: Profile, panel: str, work: Callable[[Job], Inspected], *,
         path: Any = None, label: str = "", job: Job | None = None) -> PanelUpdate | None:
    """Run ``work`` as ``panel``'s new job (superseding the one in flight) — or as ``job``, begun as its upload
    arrived (``begin_video``) — and commit its result to the session's latest state; ``None`` when a newer upload
    superseded it meanwhile."""
    if job is None:
        job = session.begin(panel, path=path, label=label)
    try:
        with job.interruptible(interruption_points()):
            inspected = work(job)
    except Superseded:
        session.end(job)
        return None
    except BaseException:
        session.end(job)
        raise
    committed = session.commit(job, inspected.apply)
    if committed is None:
        return None
    state, changed = committed
    return PanelUpdate(state, status_md(session), inspected.error, _shown(session, profile, panel, state, changed,
                                                                         inspected.group))


def _now(session: Inspections, profile: Profile, panel: str, inspected: Inspected) -> PanelUpdate:
    """A quick change with no job (nothing to supersede), applied to the latest state."""
    state, changed = session.update(panel, inspected.apply)
    return PanelUpdate(state, status_md(session), inspected.error, _shown(session, profile, panel, state, changed,
                                                                         inspected.group))


def _shown(session: Inspections, profile: Profile, panel: str, state: StudioState, changed: bool,
           group: str) -> dict[str, Any]:
    """The views a result shows: the group's when it changed the state; else none — but the frames of the
    state again when the page shows frames a job showed early and never committed (``frames_shown``)."""
    if changed:
        return panel_views(profile, state, group)
    if panel == "video" and session.reshow(panel):
        return {"frames_gallery": frames_gallery(profile, state.video.frames) if state.video else []}
    return {}


def _showing(session: Inspections, job: Job, frames_shown: FramesReady | None) -> FramesReady | None:
    """``frames_shown``, called only while ``job`` is its panel's job in flight (``InspectionSession.preview``)."""
    if frames_shown is None:
        return None

    def ready(frames: SampledFrames) -> None:
        if session.preview(job):
            frames_shown(frames)

    return ready


def _label(path: Any) -> str:
    if not path:
        return ""
    if isinstance(path, (list, tuple)):
        return f"{len(path)} image(s)" if len(path) != 1 else views.name_of(str(path[0]))
    return views.name_of(str(path))


# An inspection of the video done elsewhere, handed to the session's job: ``replay(job, progress, frames_ready)`` does
# for ``job`` what ``video_inspected`` would (``early_videos.EarlyVideo.replay``).
Replay = Callable[[Job, Progress, FramesReady | None], Inspected]


def inspect_video(session: Inspections, profile: Profile, path: str | None, settings: VideoSettings,
                  progress: Progress | None = None, *, limits: UploadLimits = UploadLimits(),
                  frames_shown: FramesReady | None = None, job: Job | None = None,
                  replay: Replay | None = None) -> PanelUpdate | None:
    """The video panel's upload (or clear), as the session's new video job — or as ``job``, begun as the upload
    arrived (``begin_video``). ``frames_shown`` gets vLLM's frames as it makes them, while the job is the
    panel's latest (the page shows them before the rest; the result's views still hold them). With ``replay``, the
    job takes the inspection of that video with those settings begun as its bytes came in (``early_videos``)
    instead of running vLLM's preprocessing itself."""
    def work(job: Job) -> Inspected:
        watching, showing = _watching(progress, job), _showing(session, job, frames_shown)
        if replay is not None:
            return replay(job, watching, showing)
        return video_inspected(profile, path, settings, watching, limits=limits, frames_ready=showing)

    return _run(session, profile, "video", work, path=path, label=_label(path), job=job)


def inspect_settings(session: Inspections, profile: Profile, settings: VideoSettings,
                     progress: Progress | None = None, *, limits: UploadLimits = UploadLimits(),
                     frames_shown: FramesReady | None = None) -> PanelUpdate | None:
    """A Budget control moved: re-plan the video the panel shows — or the one it is inspecting, whose
    job this supersedes so that it is planned with the new settings too (``frames_shown``: as in
    ``inspect_video``)."""
    pending, path = session.pending_input("video")
    if not pending:
        path = session.state.video_path
    try:
        settings.validate()
    except InspectionError as exc:  # the panel keeps its video and its job in flight
        return _now(session, profile, "video", _rejected("Settings rejected", None, exc, "video"))
    if path is None and not pending:
        return _now(session, profile, "video", resolved_inspected(profile, None, settings))
    if path is None:  # a clear is in flight: this clears, with the new settings
        return _run(session, profile, "video", lambda job: video_inspected(profile, None, settings))
    return _run(session, profile, "video",
                lambda job: resolved_inspected(profile, path, settings, _watching(progress, job), limits=limits,
                                               frames_ready=_showing(session, job, frames_shown)),
                path=path, label=_label(path))


def inspect_images(session: Inspections, profile: Profile, paths: Sequence[str] | str | None, *,
                   limits: UploadLimits = UploadLimits()) -> PanelUpdate | None:
    return _run(session, profile, "images", lambda job: images_inspected(profile, paths, limits=limits),
                path=paths, label=_label(paths))


def _audio_label(path: str | None, source: str) -> str:
    return "" if not path else _label(path) if source == "file" else "recording"


def _audio_kept(session: Inspections, path: str | None, source: str) -> bool:
    """A clear of one audio input while the panel holds (or inspects) the other's: nothing to do."""
    if path:
        return False
    pending, held = session.pending_input("audio")  # held: (path, source) of the upload in flight
    if pending:
        held_source = held[1] if held else ""
    else:
        held_source = session.state.audio_source
    return bool(held_source) and held_source != source


def inspect_audio(session: Inspections, profile: Profile, path: str | None, source: str = "file", *,
                  limits: UploadLimits = UploadLimits()) -> PanelUpdate | None:
    if _audio_kept(session, path, source):
        return PanelUpdate(session.state, status_md(session))
    return _run(session, profile, "audio", lambda job: audio_inspected(profile, path, source, limits=limits),
                path=(path, source) if path else None, label=_audio_label(path, source))


# Announcing an upload as it arrives, before its inspection gets a worker: the panel's job in flight is
# cancelled at once and the status line shows the panel as busy.
def announce_video(session: Inspections, path: str | None) -> str:
    session.announce("video", _label(path), path=path)
    return status_md(session)


def begin_video(session: Inspections, path: str | None, settings: VideoSettings, run: Any) -> tuple[Job, str]:
    """An upload for the video panel arrived and a worker is free: its job begins now, superseding the one in flight,
    and ``run`` (what works on it) is kept for the event that shows it (``InspectionSession.take_started``); the
    status line shows the panel busy, as ``announce_video`` does."""
    job = session.begin("video", path=path, label=_label(path), started=Started(path, settings, run))
    return job, status_md(session)


def announce_settings(session: Inspections) -> str:
    pending, path = session.pending_input("video")
    if pending or session.state.video_path:
        path = path if pending else session.state.video_path
        session.announce("video", _label(path), path=path)
    return status_md(session)


def announce_images(session: Inspections, paths: Sequence[str] | str | None) -> str:
    session.announce("images", _label(paths), path=paths)
    return status_md(session)


def announce_audio(session: Inspections, path: str | None, source: str = "file") -> str:
    if not _audio_kept(session, path, source):
        session.announce("audio", _audio_label(path, source), path=(path, source) if path else None)
    return status_md(session)


def shared_views(profile: Profile, session: Inspections) -> tuple[StudioState, dict[str, Any]] | None:
    """The session's state and the views every panel shares (``SHARED_KEYS``), once per new version
    of the state; ``None`` when they were already drawn from it. Called in order (one at a time), so
    the last drawing the page gets is always of the latest state."""
    state, version = session.snapshot()
    if not session.claim("shared", version):
        return None
    return state, {key: value for key, value in summary_views(profile, state).items() if key in SHARED_KEYS}


def later_views(profile: Profile, session: Inspections) -> dict[str, Any]:
    """The video's views drawn once the page shows its frames (``LATER_KEYS``), when the video panel's
    state is newer than them; a drawing overtaken by a newer commit while it was made is dropped (that
    commit draws its own)."""
    changed_at = session.panel_version("video")  # read before the state: the state holds that change
    if not changed_at or not session.claim("later:video", changed_at):
        return {}
    made = video_later_views(profile, session.state)
    return made if session.panel_version("video") == changed_at else {}


def panel_figures(session: Inspections) -> dict[str, Any]:
    """The figures of each panel whose state is newer than its figures (``FIGURE_KEYS``); a drawing
    overtaken by a newer commit while it was drawn is dropped (that commit draws its own)."""
    drawn: dict[str, Any] = {}
    for group in ("video", "audio"):
        changed_at = session.panel_version(group)  # read before the state: the state holds that change
        if not changed_at or not session.claim(f"figures:{group}", changed_at):
            continue
        made = figure_views(session.state, group)
        if session.panel_version(group) == changed_at:
            drawn.update(made)
    return drawn
