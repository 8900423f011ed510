"""Plain functions behind every UI event (no Gradio imports: tests call them directly).

Each event handler takes the active ``Profile``, the session's ``StudioState`` and the event's
inputs, and returns an ``Outcome``: the new state, a status line, an optional error message and a
dict of view values keyed by output name (``VIEW_KEYS``). A key that is missing means "leave that
output as it is" — so a bad upload changes only the status, and every other panel keeps its result.

The chat lives in ``dots3_demo.ui.chat`` (plain async generators over a ``ChatEngine``); with no
engine it explains how to attach one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dots3_demo.inspection import InspectionError, inspect_file
from dots3_demo.inspection import figures
from dots3_demo.inspection.audio import AudioReport
from dots3_demo.inspection.image import ImageReport, draw_token_grid
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.video import K_MODES, VideoReport, VideoSettings
from dots3_demo.profiles import Profile
from dots3_demo.ui import views

# Every output an event may update, in the order ``build_interface`` wires them.
VIEW_KEYS: tuple[str, ...] = (
    "summary", "budget_plot", "reserve",
    "frames_info", "frames_gallery",
    "cost_plot", "fps_plot", "solver_md",
    "timeline_plot", "stream_html", "groups_df", "segment_pick", "segment_audio",
    "grid_info", "grid_gallery",
    "mel_plot", "mel_info", "heard_audio",
)

ENGINE_HELP = (
    "**No engine attached — preview mode.** The inspector above is real vLLM preprocessing, but "
    "nothing here generates answers, and this demo never invents one.\n\n"
    "To chat, start the studio on a GPU host with the checkpoint loaded in-process:\n\n"
    "```bash\npython app.py --model /path/to/Dots3-NOTE --engine inprocess --tensor-parallel-size 8\n```\n\n"
    "or point it at a running OpenAI-compatible server started with "
    "`vllm serve <model> --tool-call-parser dots`:\n\n"
    "```bash\npython app.py --model /path/to/Dots3-NOTE --endpoint http://host:8000/v1\n```"
)

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

ProgressFn = Callable[[float, str], None]


@dataclass(frozen=True)
class StudioState:
    """One browser session's uploads and their reports (kept in ``gr.State``)."""

    settings: VideoSettings = field(default_factory=VideoSettings)
    video_path: str | None = None
    video: VideoReport | None = None
    images: tuple[tuple[str, ImageReport], ...] = ()
    audio_path: str | None = None
    audio: AudioReport | None = None
    audio_source: str = ""


@dataclass
class Outcome:
    state: StudioState
    status: str
    error: str | None = None
    views: dict[str, Any] = field(default_factory=dict)


def initial_state(seq: int) -> StudioState:
    return StudioState(settings=VideoSettings(seq=int(seq)))


def engine_status(engine: Any) -> str:
    """The header's engine line."""
    if engine is None:
        return "no engine attached — preview mode"
    describe = getattr(engine, "describe", None)
    return f"engine: {describe() if callable(describe) else type(engine).__name__}"


def chat_enabled(engine: Any) -> bool:
    return engine is not None


def control_number(value: Any, label: str, default: float, problems: list[str]) -> float:
    """``value`` as a finite float; otherwise note what is wrong with ``label`` and return ``default``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if math.isfinite(number):
        return number
    problems.append(f"{label} is empty" if value is None or value == "" else f"{label} is not a number ({value})")
    return default


def settings_from_controls(
    seq: float, reserve_auto: bool, reserve: float, max_new_tokens: float, audio_cap: float, k_mode: str
) -> VideoSettings:
    """The Budget tab's controls as vLLM's per-request video settings (validated later, by
    ``VideoSettings.validate``). Never raises: a value that is not a number (an API call can send
    ``null`` or NaN) gives settings whose ``problem`` names it, so the event is refused with that."""
    problems: list[str] = []
    defaults = VideoSettings()
    seq_value = control_number(seq, "seq", defaults.seq, problems)
    reserve_value = None if reserve_auto else control_number(reserve, "output reserve", 0, problems)
    max_new = 0 if max_new_tokens is None or max_new_tokens == "" else control_number(
        max_new_tokens, "max new tokens", 0, problems)
    return VideoSettings(
        seq=int(seq_value),
        output_reserve=None if reserve_value is None else int(reserve_value),
        max_new_tokens=int(max_new),
        audio_cap=control_number(audio_cap, "audio cap", defaults.audio_cap, problems),
        k_mode=str(k_mode) if k_mode else K_MODES[0],
        problem=f"Budget controls not usable: {'; '.join(problems)}" if problems else "",
    )


# ---------------------------------------------------------------- views
def _empty_video_views(message: str) -> dict[str, Any]:
    return {
        "frames_info": message,
        "frames_gallery": [],
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
    report = state.video
    if report is None:
        return _empty_video_views(GETTING_STARTED)
    choices = views.segment_choices(report)
    return {
        "frames_info": views.frames_info_md(report, profile),
        "frames_gallery": [(f.image, views.frame_caption(f, profile)) for f in report.frames],
        "cost_plot": figures.cost_curve_figure(report),
        "fps_plot": figures.fps_patch_figure(report),
        "solver_md": views.solver_md(report, profile),
        "timeline_plot": figures.interleave_figure(report),
        "stream_html": views.stream_html(report, profile),
        "groups_df": views.group_rows(report),
        "segment_pick": {"choices": choices, "value": choices[0][1] if choices else None},
        "segment_audio": segment_audio(state, 0) if choices else None,
    }


def budget_rows(state: StudioState) -> list[tuple[str, dict[str, int]]]:
    rows: list[tuple[str, dict[str, int]]] = []
    if state.video is not None:
        rows += figures.video_budget_rows(state.video)
    if state.images or state.audio is not None or not rows:
        rows.append(("all media", views.totals(state)))
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
    report = state.audio
    if report is None:
        return {
            "mel_plot": figures.empty_figure("upload or record audio to see its log-mel spectrogram"),
            "mel_info": "Upload or record audio on the left.",
            "heard_audio": None,
        }
    return {
        "mel_plot": figures.mel_figure(report),
        "mel_info": views.audio_md(report, state.audio_source, state.audio_path),
        "heard_audio": to_int16_audio(report.sample_rate, report.waveform),
    }


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
def _failed(state: StudioState, what: str, path: Any, exc: Exception) -> Outcome:
    name = views.name_of(path) if isinstance(path, str) else ""
    message = f"{what}{f' {name}' if name else ''}: {exc}"
    return Outcome(state=state, status=f"⚠ **{views.esc(what)}{f' `{views.esc(name)}`' if name else ''}** — "
                   f"{views.esc(str(exc))}", error=message)


def load_video(
    profile: Profile, state: StudioState, path: str | None, settings: VideoSettings,
    progress: ProgressFn | None = None, *, limits: UploadLimits = UploadLimits(),
) -> Outcome:
    """A video was uploaded (or cleared): run vLLM's video preprocessing with ``settings``.

    ``limits`` are checked on the file's header first; a file over them leaves ``state`` as it was.
    """
    if not path:
        new = replace(state, video_path=None, video=None, settings=settings)
        return Outcome(new, "Video cleared.", views={**video_views(profile, new), **summary_views(profile, new)})
    started = time.monotonic()
    try:
        report = inspect_file(path, profile, settings, expected="video", limits=limits, progress=progress)
    except InspectionError as exc:
        return _failed(state, "Video rejected", path, exc)
    new = replace(state, video_path=str(path), video=report, settings=settings)
    status = (f"✓ **{views.esc(views.name_of(path))}** — {len(report.frames)} frames, "
              f"{len(report.audio_segments)} audio segments, {views.approx(profile, 'text')}"
              f"{report.prompt_tokens:,} tokens ({time.monotonic() - started:.1f} s)")
    if not report.complete:
        status += " · ⚠ **incomplete: sound track not decoded**"
    return Outcome(new, status, views={**video_views(profile, new), **summary_views(profile, new)})


def resolve(
    profile: Profile, state: StudioState, settings: VideoSettings, progress: ProgressFn | None = None,
    *, limits: UploadLimits = UploadLimits(),
) -> Outcome:
    """A Budget control moved: re-run the solver (vLLM's preprocessing) on the current video."""
    try:
        settings.validate()
    except InspectionError as exc:
        return _failed(state, "Settings rejected", None, exc)
    if state.video_path is None:
        new = replace(state, settings=settings)
        return Outcome(new, f"Budget set: seq {settings.seq:,}, reserve {settings.effective_reserve:,}.",
                       views=summary_views(profile, new))
    outcome = load_video(profile, state, state.video_path, settings, progress, limits=limits)
    if outcome.error is None:
        outcome.status = f"Re-solved for seq {settings.seq:,}: " + outcome.status.removeprefix("✓ ")
    return outcome


def load_images(profile: Profile, state: StudioState, paths: Sequence[str] | str | None, *,
                limits: UploadLimits = UploadLimits()) -> Outcome:
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
        return Outcome(state, f"⚠ **Image rejected** — {views.esc(message)}", error=f"Image rejected — {message}")
    new = replace(state, images=tuple(good))
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
    return Outcome(new, status, error=error, views={**image_views(profile, new), **summary_views(profile, new)})


def load_audio(profile: Profile, state: StudioState, path: str | None, source: str = "file", *,
               limits: UploadLimits = UploadLimits()) -> Outcome:
    """Audio was uploaded or recorded (or cleared)."""
    if not path:
        if state.audio_source and state.audio_source != source:
            return Outcome(state, "")  # the other input was cleared; keep what we have
        new = replace(state, audio=None, audio_path=None, audio_source="")
        return Outcome(new, "Audio cleared.", views={**audio_views(profile, new), **summary_views(profile, new)})
    try:
        report = inspect_file(path, profile, expected="audio", limits=limits)
    except InspectionError as exc:
        return _failed(state, "Audio rejected", path, exc)
    new = replace(state, audio=report, audio_path=str(path), audio_source=source)
    status = f"✓ **{views.esc(views.name_of(path)) if source == 'file' else 'recording'}** — " \
             f"{report.duration:.2f} s, {report.tokens:,} audio tokens"
    return Outcome(new, status, views={**audio_views(profile, new), **summary_views(profile, new)})


# ---------------------------------------------------------------- chat (see dots3_demo.ui.chat)
def chat_welcome(engine: Any) -> list[dict[str, str]]:
    """The chat's first message."""
    if engine is None:
        return [{"role": "assistant", "content": ENGINE_HELP}]
    return []
