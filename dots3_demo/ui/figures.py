"""Figures of what dots3_note sees: pure matplotlib ``Figure`` objects (no pyplot, no Gradio).

Every function takes inspection reports (or plain numbers) and returns a new
``matplotlib.figure.Figure``. Backgrounds are transparent and text is a mid grey, so the same
PNG reads on a light page and on a dark one. Colours are fixed per modality (``COLORS``) so the
budget bar, the timeline and the summary all speak the same language.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
from matplotlib import patches, ticker
from matplotlib.figure import Figure
from matplotlib.offsetbox import AnnotationBbox, OffsetImage

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

    from dots3_demo.inspection.audio import AudioReport
    from dots3_demo.inspection.video import InterleaveGroup, VideoReport

COLORS: dict[str, str] = {
    "text": "#10b981",  # green: prompt text, timestamps, markers
    "image": "#3b82f6",  # blue: image / frame tokens
    "audio": "#f59e0b",  # amber: audio tokens
    "reserve": "#a855f7",  # purple: output reserve
    "free": "#94a3b8",  # slate: unused budget
    "limit": "#ef4444",  # red: budgets, limits, the solver's choice
    "ink": "#8b93a1",  # mid grey: text and spines, readable on light and dark pages
}
MODALITY_LABELS = {"text": "text", "image": "image", "audio": "audio", "reserve": "output reserve", "free": "free"}

_STYLE: dict[RcKeyType, Any] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "axes.edgecolor": COLORS["ink"],
    "axes.labelcolor": COLORS["ink"],
    "axes.titlecolor": COLORS["ink"],
    "axes.facecolor": "none",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": COLORS["ink"],
    "grid.alpha": 0.18,
    "grid.linewidth": 0.6,
    "xtick.color": COLORS["ink"],
    "ytick.color": COLORS["ink"],
    "text.color": COLORS["ink"],
    "legend.frameon": False,
    "legend.fontsize": 8,
    "figure.facecolor": "none",
    "savefig.transparent": True,
}

# Whisper-style log-mel front end (what audio encoders of this family consume).
MEL_N_FFT = 400
MEL_HOP = 160
MEL_BINS = 128


_DPI = 110


def _figure(width: float, height: float, *, left: float = 0.7, right: float = 0.25,
            bottom: float = 0.5, top: float = 0.35) -> Figure:
    """A transparent figure with fixed margins in inches (constrained layout costs ~1 s a figure
    on a busy 2-core host, and these layouts are fixed anyway)."""
    fig = Figure(figsize=(width, height), dpi=_DPI)
    fig.patch.set_alpha(0.0)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                        top=1 - top / height)
    return fig


def _fmt_tokens(n: float) -> str:
    return f"{n / 1000:.1f}k" if abs(n) >= 10_000 else f"{int(round(n)):,}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _clock(seconds: float) -> str:
    minutes, sec = divmod(max(0.0, seconds), 60)
    return f"{int(minutes)}:{sec:04.1f}" if minutes else f"{sec:.1f}s"


# ---------------------------------------------------------------- (a) cost curve
def cost_curve_figure(report: VideoReport, *, points: int = 101) -> Figure:
    """Visual tokens the solver would spend at each quality scale, its budget, and its choice."""
    from dots3_demo.inspection.video import solver_curve

    s = report.solver
    scales = np.linspace(0.0, 1.0, points)
    width, height = s.orig_size
    with matplotlib.rc_context(_STYLE):
        fig = _figure(5.2, 2.9, left=0.65)
        ax = fig.add_subplot()
        curve = solver_curve(s.duration, height, width, s.orig_fps, s.seq_length, scales)
        cost = curve["cost"].astype(float)
        chosen = solver_curve(s.duration, height, width, s.orig_fps, s.seq_length, np.array([s.chosen_scale]))
        chosen_cost = float(chosen["cost"][0])
        ax.fill_between(scales, cost, s.visual_budget, where=cost > s.visual_budget,
                        color=COLORS["limit"], alpha=0.12, linewidth=0, label="over budget")
        ax.plot(scales, cost, color=COLORS["image"], linewidth=2, label="visual tokens at scale")
        ax.axhline(s.visual_budget, color=COLORS["limit"], linestyle="--", linewidth=1.2,
                   label=f"visual budget {_fmt_tokens(s.visual_budget)}")
        ax.axvline(s.chosen_scale, color=COLORS["limit"], linewidth=0.8, alpha=0.5)
        ax.scatter([s.chosen_scale], [chosen_cost], s=46, color=COLORS["limit"], zorder=5,
                   edgecolor="white", linewidth=1)
        ax.annotate(
            f"chosen {s.chosen_scale:.2f}\n{int(chosen['frames'][0])} frames · {_fmt_tokens(chosen_cost)} tok",
            (s.chosen_scale, chosen_cost), xytext=(-8 if s.chosen_scale > 0.6 else 8, 10),
            textcoords="offset points", ha="right" if s.chosen_scale > 0.6 else "left",
            fontsize=8, color=COLORS["limit"], fontweight="bold",
        )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, max(cost.max(), s.visual_budget) * 1.15)
        ax.set_xlabel("quality scale  (0 = cheapest · 1 = full fps and patch cap)")
        ax.set_ylabel("visual tokens")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _fmt_tokens(v)))
        ax.set_title("Degrade solver: cost along the quality scale", loc="left")
        ax.legend(loc="upper left")
    return fig


# ---------------------------------------------------------------- (b) fps and patch cap
def fps_patch_figure(report: VideoReport, *, points: int = 101) -> Figure:
    """Sampling rate and per-frame patch cap along the same 0..1 quality scale."""
    from dots3_demo.inspection.video import solver_curve

    s = report.solver
    scales = np.linspace(0.0, 1.0, points)
    width, height = s.orig_size
    curve = solver_curve(s.duration, height, width, s.orig_fps, s.seq_length, scales)
    at = solver_curve(s.duration, height, width, s.orig_fps, s.seq_length, np.array([s.chosen_scale]))
    with matplotlib.rc_context(_STYLE):
        fig = _figure(5.2, 2.9, left=0.55, right=0.6, top=0.55)
        ax = fig.add_subplot()
        ax.plot(scales, curve["fps"], color=COLORS["text"], linewidth=2, label="frames per second")
        ax.set_ylabel("fps", color=COLORS["text"])
        ax.set_xlim(0, 1)
        ax.set_ylim(0, max(curve["fps"].max() * 1.2, 0.5))
        ax2 = ax.twinx()
        ax2.grid(False)
        ax2.spines["right"].set_visible(True)
        ax2.plot(scales, curve["patch_cap"], color=COLORS["image"], linewidth=2, linestyle="-.",
                 label="patch cap per frame")
        ax2.set_ylabel("patch cap (28 px patches)", color=COLORS["image"])
        ax2.set_ylim(0, max(curve["patch_cap"].max() * 1.2, 10))
        ax.axvline(s.chosen_scale, color=COLORS["limit"], linewidth=1, linestyle="--")
        ax.scatter([s.chosen_scale], [at["fps"][0]], color=COLORS["text"], s=36, zorder=5,
                   edgecolor="white", linewidth=1)
        ax2.scatter([s.chosen_scale], [at["patch_cap"][0]], color=COLORS["image"], s=36, zorder=5,
                    edgecolor="white", linewidth=1)
        ax.text(s.chosen_scale, 1.02, f"{at['fps'][0]:.2f} fps · cap {int(at['patch_cap'][0])}",
                transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=8,
                color=COLORS["limit"], fontweight="bold")
        ax.set_xlabel("quality scale")
        lines = ax.get_lines()[:1] + ax2.get_lines()[:1]
        ax.legend(lines, [str(line.get_label()) for line in lines], loc="lower right")
        ax.set_title("fps and patch cap along the scale", loc="left", pad=14)
    return fig


# ---------------------------------------------------------------- (c) interleave timeline
def _group_span(report: VideoReport, group: InterleaveGroup) -> tuple[float, float]:
    rate = report.sample_rate
    times = [report.frames[i].seconds for i in group.frames]
    starts, ends = list(times), [t + 0.4 for t in times]
    if group.audio is not None:
        seg = report.audio_segments[group.audio]
        starts.append(seg.start_sample / rate)
        ends.append(seg.end_sample / rate)
    return (min(starts), max(ends)) if starts else (0.0, 0.0)


def interleave_figure(report: VideoReport, *, thumbnails: bool = True) -> Figure:
    """Frames at their timestamps and audio segments on one time axis; groups shaded."""
    rate = report.sample_rate
    seg_end = max((seg.end_sample / rate for seg in report.audio_segments), default=0.0)
    duration = max(report.solver.duration, seg_end, max((f.seconds for f in report.frames), default=0) + 0.5)
    with matplotlib.rc_context(_STYLE):
        fig = _figure(7.6, 2.9, left=0.75, right=0.15)
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        for number, group in enumerate(report.groups):
            lo, hi = _group_span(report, group)
            ax.axvspan(lo, hi, ymin=0.02, ymax=0.98, color=COLORS["ink"], alpha=0.07 if number % 2 else 0.14,
                       linewidth=0)
            ax.text((lo + hi) / 2, 3.02, f"G{number + 1}", ha="center", va="bottom", fontsize=7,
                    color=COLORS["ink"])
        # frames: stems with token counts, thumbnails above
        px_per_frame = fig.get_figwidth() * fig.dpi * 0.86 / max(1, len(report.frames))
        label_each = px_per_frame >= 26
        for frame in report.frames:
            ax.vlines(frame.seconds, 1.55, 1.95, color=COLORS["image"], linewidth=2.2 if label_each else 1.4)
            if label_each:
                ax.text(frame.seconds, 1.45, f"{frame.tokens}", ha="center", va="top", fontsize=7,
                        color=COLORS["image"])
        tokens = sorted({f.tokens for f in report.frames})
        frame_label = "frame tok"
        if not label_each and tokens:
            frame_label = f"frame tok\n{tokens[0]} each" if len(tokens) == 1 else f"frame tok\n{tokens[0]}–{tokens[-1]}"
        if thumbnails and report.frames:
            spacing = duration / max(1, len(report.frames))
            px_per_s = fig.get_figwidth() * fig.dpi * 0.86 / (duration * 1.06)
            target_w = min(72.0, 0.9 * spacing * px_per_s)
            for frame in report.frames:
                thumb = frame.image.copy()
                thumb.thumbnail((160, 160))
                zoom = max(0.05, target_w / thumb.width)
                if thumb.height * zoom > 48:
                    zoom = 48 / thumb.height
                zoom *= 72 / fig.dpi  # OffsetImage scales by dpi / 72 itself
                box = AnnotationBbox(OffsetImage(np.asarray(thumb), zoom=zoom), (frame.seconds, 2.45),
                                     frameon=False, pad=0)
                ax.add_artist(box)
        # audio: bars with token counts
        for seg in report.audio_segments:
            start, end = seg.start_sample / rate, seg.end_sample / rate
            ax.barh(0.6, end - start - 0.04 * (end - start > 0.1), left=start, height=0.5, color=COLORS["audio"],
                    alpha=0.9, linewidth=0)
            ax.text((start + end) / 2, 0.6, f"{seg.tokens} tok", ha="center", va="center", fontsize=7.5,
                    color="black", fontweight="bold")
        if not report.audio_segments:
            ax.text(duration / 2, 0.6, f"no audio in the prompt — {report.audio.reason}", ha="center",
                    va="center", fontsize=8, style="italic", wrap=True)
        ax.set_yticks([0.6, 1.75, 2.45], ["audio", frame_label, "frames"])
        ax.set_ylim(0.1, 3.25)
        ax.set_xlim(-0.04 * duration - 0.3, duration * 1.02 + 0.3)
        ax.set_xlabel("time in the video (s)")
        ax.spines["left"].set_visible(False)
        ax.tick_params(axis="y", length=0)
        ax.set_title(
            f"Interleave: {_plural(len(report.frames), 'frame')}, "
            f"{_plural(len(report.audio_segments), 'audio segment')}, {_plural(len(report.groups), 'group')} "
            "(prompt order = time order)", loc="left",
        )
    return fig


# ---------------------------------------------------------------- (d) budget by modality
def budget_figure(
    seq: int,
    reserve: int,
    rows: Sequence[tuple[str, Mapping[str, int]]],
    *,
    approximate: bool = False,
) -> Figure:
    """Stacked bars against ``seq``: text / image / audio used, free input room, output reserve.

    ``rows`` is ``[(label, {"text": n, "image": n, "audio": n}), ...]`` — e.g. the video alone and
    the whole prompt with the other uploads.
    """
    rows = list(rows) or [("prompt", {})]
    input_budget = max(0, seq - reserve)
    approx = "≈" if approximate else ""
    span = max(seq, *(sum(p.values()) + reserve for _, p in rows)) * 1.02
    with matplotlib.rc_context(_STYLE):
        fig = _figure(8.4, 0.95 + 0.5 * len(rows), left=1.05, right=0.2, bottom=0.45, top=0.5)
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        labels = []
        for y, (label, parts) in enumerate(reversed(rows)):
            left = 0.0
            for key in ("text", "image", "audio"):
                value = float(parts.get(key, 0))
                if value <= 0:
                    continue
                ax.barh(y, value, left=left, height=0.6, color=COLORS[key], linewidth=0)
                text = f"{key} {approx if key != 'audio' else ''}{_fmt_tokens(value)}"
                if value / span > 0.0105 * len(text):
                    ax.text(left + value / 2, y, text,
                            ha="center", va="center", fontsize=7.5, color="white", fontweight="bold")
                left += value
            used = left
            if used <= input_budget:
                ax.barh(y, input_budget - used, left=used, height=0.6, color=COLORS["free"], alpha=0.25,
                        hatch="///", edgecolor=COLORS["free"], linewidth=0)
                if (input_budget - used) / span > 0.0105 * 10:
                    ax.text((used + input_budget) / 2, y, f"free {_fmt_tokens(input_budget - used)}",
                            ha="center", va="center", fontsize=7.5)
            else:
                ax.barh(y, used - input_budget, left=input_budget, height=0.6, color=COLORS["limit"],
                        alpha=0.35, linewidth=0)
                ax.text(min(used, seq), y + 0.38, f"over by {_fmt_tokens(used - input_budget)}",
                        ha="right", va="bottom", fontsize=7.5, color=COLORS["limit"], fontweight="bold")
            ax.barh(y, reserve, left=input_budget, height=0.6, color=COLORS["reserve"], alpha=0.85, linewidth=0)
            if reserve / span > 0.0105 * 13:
                ax.text(input_budget + reserve / 2, y, f"reserve {_fmt_tokens(reserve)}", ha="center",
                        va="center", fontsize=7.5, color="white", fontweight="bold")
            labels.append(f"{label}\n{approx}{_fmt_tokens(used)} tok")
        ax.set_yticks(range(len(rows)), labels)
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        ax.axvline(seq, color=COLORS["limit"], linewidth=1.2)
        ax.set_xlim(0, span)
        ax.set_ylim(-0.55, len(rows) - 0.45)
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: _fmt_tokens(v)))
        ax.set_xlabel(f"tokens (seq = {seq:,})")
        ax.set_title("Budget by modality", loc="left")
        handles = [patches.Patch(color=COLORS[k], label=MODALITY_LABELS[k])
                   for k in ("text", "image", "audio", "reserve")]
        handles.append(patches.Patch(facecolor=COLORS["free"], alpha=0.35, hatch="///", label="free"))
        fig.legend(handles=handles, loc="upper right", ncols=5, fontsize=7.5, bbox_to_anchor=(1 - 0.1 / 8.4, 1.0))
    return fig


def video_budget_rows(report: VideoReport) -> list[tuple[str, dict[str, int]]]:
    """The video's own row for ``budget_figure``."""
    return [("video", {"text": report.text_tokens, "image": report.image_pad_tokens, "audio": report.audio_pad_tokens})]


# ---------------------------------------------------------------- (e) log-mel spectrogram
def log_mel(waveform: np.ndarray, sample_rate: int) -> np.ndarray:
    """Log-mel power (dB), Whisper-style front end: n_fft 400, hop 160, 128 mels."""
    import librosa

    y = np.asarray(waveform, dtype=np.float32)
    if y.size < MEL_N_FFT:
        y = np.pad(y, (0, MEL_N_FFT - y.size))
    mel = librosa.feature.melspectrogram(
        y=y, sr=sample_rate, n_fft=MEL_N_FFT, hop_length=MEL_HOP, n_mels=MEL_BINS, power=2.0
    )
    return librosa.power_to_db(mel, ref=np.max, top_db=80.0)


def mel_figure(report: AudioReport, *, title: str | None = None) -> Figure:
    """Log-mel spectrogram of what the model hears, with the encoder's chunk boundaries."""
    if report.waveform is None:
        raise ValueError("report carries no waveform")
    rate = report.sample_rate
    db = log_mel(report.waveform, rate)
    duration = max(report.samples / rate, 1e-3)
    with matplotlib.rc_context(_STYLE):
        fig = _figure(8.4, 2.8, left=0.6, right=0.75)
        ax = fig.add_subplot()
        ax.grid(False)
        image = ax.imshow(db, origin="lower", aspect="auto", cmap="magma", extent=(0, duration, 0, MEL_BINS),
                          interpolation="nearest")
        chunk = report.chunk_seconds
        starts = np.arange(0, duration, chunk) if chunk > 0 else np.array([0.0])
        for number, start in enumerate(starts):
            end = min(duration, start + chunk)
            if number:
                ax.axvline(start, color="white", linestyle="--", linewidth=1.2)
            tokens = report.chunk_tokens[number] if number < len(report.chunk_tokens) else 0
            ax.text((start + end) / 2, MEL_BINS * 0.97, f"chunk {number + 1}: {tokens} tok",
                    ha="center", va="top", fontsize=8, color="white", fontweight="bold",
                    bbox={"boxstyle": "round,pad=0.25", "facecolor": "black", "alpha": 0.45, "linewidth": 0})
        token_seconds = report.token_stride / rate
        if 0 < report.tokens <= 160:
            ticks = np.arange(0, duration + 1e-9, token_seconds)
            ax.vlines(ticks, 0, MEL_BINS * 0.035, color=COLORS["audio"], linewidth=0.8)
        ax.set_xlim(0, duration)
        ax.set_ylim(0, MEL_BINS)
        ax.set_xlabel(f"time (s) · amber ticks: one audio token = {report.token_stride} samples "
                      f"= {1000 * token_seconds:.0f} ms")
        ax.set_ylabel("mel bin (128)")
        box = ax.get_position()
        cax = fig.add_axes((box.x1 + 0.1 / 8.4, box.y0, 0.12 / 8.4, box.height))
        cbar = fig.colorbar(image, cax=cax)
        cbar.set_label("dB", color=COLORS["ink"])
        cbar.outline.set_visible(False)
        ax.set_title(title or f"Log-mel spectrogram ({rate} Hz mono, n_fft {MEL_N_FFT}, hop {MEL_HOP}, "
                     f"{MEL_BINS} mels) · {report.tokens} audio tokens", loc="left")
    return fig


def empty_figure(message: str, *, height: float = 1.6) -> Figure:
    """A small placeholder figure with one line of text."""
    with matplotlib.rc_context(_STYLE):
        fig = _figure(6.2, height, left=0, right=0, bottom=0, top=0)
        ax = fig.add_subplot()
        ax.axis("off")
        ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=9, style="italic")
    return fig
