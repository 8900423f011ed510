"""Text and table renderings of reports for the UI (plain strings and lists; no Gradio here).

Everything returns Markdown, small HTML fragments or row lists, so handlers stay testable
without a browser. Colours match ``dots3_demo.ui.figures.COLORS``.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dots3_demo.core.counts import totals
from dots3_demo.core.state import StudioState
from dots3_demo.core.text import show_controls
from dots3_demo.ui.figures import COLORS

if TYPE_CHECKING:
    from PIL import Image

    from dots3_demo.inspection.audio import AudioReport
    from dots3_demo.inspection.image import ImageReport
    from dots3_demo.inspection.video import FrameInfo, VideoReport
    from dots3_demo.profiles import Profile

APPROX = "≈"
PREVIEW_BADGE = "preview: numbers marked ≈ depend on assumptions (text-token counts, pixel limits)"

GROUP_COLUMNS = ["group", "frames", "frame tok", "audio (s)", "audio tok"]


def esc(text: Any) -> str:
    """Any value as escaped HTML text, control bytes shown as their Control Pictures (``core.text``)."""
    return html.escape(show_controls(str(text)), quote=True)


def name_of(path: str | Path | None) -> str:
    return Path(path).name if path else ""


def approx(profile: Profile, kind: str) -> str:
    """``≈`` for numbers that rest on the preview profile's assumptions (text and image tokens)."""
    if not profile.is_preview:
        return ""
    return APPROX if kind in ("text", "image") else ""


def grid_text(grid: list[int]) -> str:
    """``[1, 26, 46]`` → ``26×46`` (with ``t×`` when temporal)."""
    t, h, w = grid
    return f"{h}×{w}" if t == 1 else f"{t}×{h}×{w}"


def frame_caption(frame: FrameInfo, profile: Profile) -> str:
    """``00:00:01.12 · 26×46 grid · 299 tok`` — exactly the timestamp vLLM puts before the frame."""
    return f"{frame.timestamp} · {grid_text(frame.grid)} grid · {approx(profile, 'image')}{frame.tokens} tok"


def seconds_text(seconds: float) -> str:
    return f"{seconds:.2f} s"


# ---------------------------------------------------------------- header
def header_html(profile: Profile, engine_line: str, ffmpeg_problem: str | None = None, *, compact: bool = False) -> str:
    """The page header: profile, exactness and engine badges, and ``ffmpeg_problem`` (what
    ``dots3_demo.ffmpeg.media_problem`` says at start-up) in red when the machine cannot decode media.
    ``compact`` (the work layout): the title and the badges on one line, without the subtitle."""
    badges = [f'<span class="d3-badge d3-profile" title="{esc(profile.path)}">profile · {esc(profile.name)}</span>']
    if profile.is_preview:
        badges.append(f'<span class="d3-badge d3-preview" title="{esc(PREVIEW_BADGE)}">{esc(PREVIEW_BADGE)}</span>')
    else:
        badges.append('<span class="d3-badge d3-exact">checkpoint geometry: numbers are exact</span>')
    badges.append(f'<span class="d3-badge d3-engine" title="{esc(engine_line)}">{esc(engine_line)}</span>')
    subtitle = "" if compact else (
        '<div class="d3-sub">What vLLM\'s <code>dots3_note</code> omni model actually sees: sampled frames, '
        "patch grids, the degrade solver's token budget and the audio/frame interleave.</div>")
    return (
        f'<div class="d3-header{" d3-compact" if compact else ""}">'
        '<div class="d3-title"><span class="d3-logo">●●●</span> Dots3 NOTE Studio</div>'
        + subtitle
        + f'<div class="d3-badges">{"".join(badges)}</div>'
        + (f'<div class="d3-incomplete" id="d3-ffmpeg" role="alert">⚠ {esc(ffmpeg_problem)}</div>'
           if ffmpeg_problem else "")
        + "</div>"
    )


# ---------------------------------------------------------------- video
def frames_info_md(report: VideoReport, profile: Profile) -> str:
    s = report.solver
    first = report.frames[0]
    ai = approx(profile, "image")
    lines = [
        f"**{len(report.frames)} frames** sampled from {s.duration:.2f} s "
        f"({s.orig_fps:.3g} fps, {s.orig_size[0]}×{s.orig_size[1]}) · solver: "
        f"{s.effective_fps:.2f} fps, patch cap {s.patch_cap} → {first.decoded_size[0]}×{first.decoded_size[1]} "
        f"per frame ({grid_text(first.grid)} patches of {profile.image_processor.patch_size} px) · "
        f"**{ai}{report.image_pad_tokens:,} image tokens**"
    ]
    lines += [f"- {esc(note)}" for note in report.notes]
    return "\n".join(lines)


STRIP_THUMB_HEIGHT = 64  # px: the frame strip's pictures (twice that wide for 2:1 frames)
STRIP_JPEG_QUALITY = 80
EMPTY_STRIP = ("No video yet: the frames vLLM samples from it appear here, each with the timestamp put before "
               "it in the prompt and its tokens.")
GLANCE_HINT = (  # what the work layout's "what the model sees" column says while nothing is uploaded
    "<b>What the model sees appears here</b>, planned by vLLM's own code for the media you upload:"
    "<ul><li>every frame vLLM samples from a video, with the timestamp text put before it and its tokens</li>"
    "<li>tokens by modality (frames, sound track, images, audio) against seq and the output reserve</li>"
    "<li>the detail tabs a click away: Frames, Budget, Interleave, Image grid, Audio mel</li></ul>"
    "<p>Drop a video, images or audio on the left, or try one of the examples above.</p>")


def thumbnail_uri(picture: Image.Image, height: int = STRIP_THUMB_HEIGHT) -> str:
    """``picture`` scaled to ``height`` px (at most 3 × as wide) as a JPEG ``data:`` URL."""
    small = picture.convert("RGB")
    small.thumbnail((3 * height, height))
    buffer = io.BytesIO()
    small.save(buffer, "JPEG", quality=STRIP_JPEG_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def frame_strip_html(report: VideoReport | None, profile: Profile | None) -> str:
    """Every frame the vision tower gets, small, with its timestamp text and tokens, under one line of what
    the solver chose (the numbers of ``frames_info_md`` and ``frame_caption``)."""
    if report is None or profile is None or not report.frames:
        # the work layout shows the hint while nothing is uploaded, the line once other media are (style.CSS)
        return (f'<div class="d3-strip d3-empty"><div class="d3-hint" id="glance-hint">{GLANCE_HINT}</div>'
                f'<div class="d3-no-video">{esc(EMPTY_STRIP)}</div></div>')
    s = report.solver
    ai = approx(profile, "image")
    sound = (f"sound track: {len(report.audio_segments)} segment(s), {report.audio_pad_tokens:,} tok"
             if report.audio.kept else "sound track: not in prompt")
    head = (f'<div class="d3-strip-head"><b>{len(report.frames)} frames</b> · {s.effective_fps:.2f} fps · '
            f"patch cap {s.patch_cap} · <b>{ai}{report.image_pad_tokens:,}</b> image tok · {esc(sound)}</div>")
    frames = "".join(
        f'<figure class="d3-frame" title="{esc(frame_caption(f, profile))}">'
        f'<img src="{thumbnail_uri(f.image)}" alt="frame at {esc(f.timestamp)}">'
        f"<figcaption><b>{esc(f.timestamp)}</b> {ai}{f.tokens} tok</figcaption></figure>"
        for f in report.frames
    )
    return f'<div class="d3-strip">{head}<div class="d3-strip-frames">{frames}</div></div>'


def solver_md(report: VideoReport, profile: Profile) -> str:
    s = report.solver
    at = approx(profile, "text")
    rows = [
        ("seq", f"{s.seq:,}"),
        ("output reserve", f"{s.effective_reserve:,}"
         + (f" (max of reserve {s.configured_reserve:,} and max new tokens {s.max_new_tokens:,})"
            if s.max_new_tokens > s.configured_reserve else "")),
        ("input budget = seq − reserve", f"{s.seq_length:,}"),
        ("overhead (system prompt, markers, 64 slack)", f"{at}{s.overhead:,}"),
        ("audio reserved", f"{report.audio.reserved_tokens:,}" if report.audio.kept else "0 (no audio kept)"),
        ("visual budget", f"{at}{s.visual_budget:,}"),
        ("frame hard cap", f"{s.frame_hard_cap:,}"),
        ("chosen quality scale", f"{s.chosen_scale:.3f}"),
        ("planned frames × target size", f"{s.planned_frames} × {s.target_size[0]}×{s.target_size[1]}"),
        ("k_mode · audio_cap", f"`{s.k_mode}` · {s.audio_cap:g}"),
    ]
    table = "| solver | value |\n|---|---:|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    return table


def stream_html(report: VideoReport, profile: Profile) -> str:
    """The video's prompt in order: one chip per frame / audio segment, groups separated."""
    rate = report.sample_rate
    ai = approx(profile, "image")
    chips = ['<span class="d3-chip d3-chip-text">&lt;video_0&gt;</span>']
    frame_i = audio_i = 0
    for kind in report.order:
        if kind == "frame":
            f = report.frames[frame_i]
            frame_i += 1
            chips.append(
                f'<span class="d3-chip d3-chip-frame" title="{esc(grid_text(f.grid))} grid">'
                f"<b>{esc(f.timestamp)}</b> ▣ {ai}{f.tokens}</span>"
            )
        else:
            seg = report.audio_segments[audio_i]
            audio_i += 1
            chips.append(
                f'<span class="d3-chip d3-chip-audio">♪ {seg.start_sample / rate:.2f}–'
                f"{seg.end_sample / rate:.2f} s · {seg.tokens}</span>"
                '<span class="d3-sep"></span>'
            )
    legend = (
        f'<div class="d3-legend"><span style="color:{COLORS["image"]}">■</span> frame (timestamp text, then '
        f'image tokens) <span style="color:{COLORS["audio"]}">■</span> audio segment (tokens) — '
        "read left to right: this is the order of the tokens in the prompt</div>"
    )
    return f'<div class="d3-stream">{"".join(chips)}</div>{legend}'


def group_rows(report: VideoReport) -> list[list[Any]]:
    rate = report.sample_rate
    rows = []
    for number, group in enumerate(report.groups):
        frames = [report.frames[i] for i in group.frames]
        span = f"{frames[0].timestamp} … {frames[-1].timestamp}" if len(frames) > 1 else (
            frames[0].timestamp if frames else "—")
        if group.audio is not None:
            seg = report.audio_segments[group.audio]
            audio = f"{seg.start_sample / rate:.2f}–{seg.end_sample / rate:.2f}"
            audio_tok = seg.tokens
        else:
            audio, audio_tok = "—", 0
        rows.append([f"G{number + 1}", f"{len(frames)}: {span}", sum(f.tokens for f in frames), audio, audio_tok])
    return rows


def segment_choices(report: VideoReport) -> list[tuple[str, int]]:
    rate = report.sample_rate
    return [
        (f"segment {seg.index + 1} · {seg.start_sample / rate:.2f}–{seg.end_sample / rate:.2f} s · {seg.tokens} tok",
         seg.index)
        for seg in report.audio_segments
    ]


# ---------------------------------------------------------------- images / audio
def image_caption(path: str, report: ImageReport, profile: Profile) -> str:
    w, h = report.original_size
    rw, rh = report.resized_size
    return (f"{name_of(path)} · {w}×{h} → {rw}×{rh} · {grid_text(report.grid)} patches · "
            f"{approx(profile, 'image')}{report.tokens} tok")


def images_md(images: list[tuple[str, ImageReport]], profile: Profile) -> str:
    if not images:
        return "Upload images on the left to see the patch grid the vision tower receives."
    ai = approx(profile, "image")
    first = images[0][1]
    head = (f"Thin lines: {first.patch_size} px patches · thick pink lines: {first.merge_size}×{first.merge_size} "
            "merged patches = one image token.\n\n")
    table = "| image | original | resized | grid | tokens | notes |\n|---|---|---|---|---:|---|\n"
    for path, r in images:
        table += (f"| {esc(name_of(path))} | {r.original_size[0]}×{r.original_size[1]} {r.original_mode} | "
                  f"{r.resized_size[0]}×{r.resized_size[1]} | {grid_text(r.grid)} | {ai}{r.tokens:,} | "
                  f"{esc('; '.join(r.notes)) or '—'} |\n")
    total = sum(r.tokens for _, r in images)
    limit = profile.mm_limits.get("image", 0)
    tail = f"\n**{ai}{total:,} image tokens** in {len(images)} image(s)"
    if len(images) > limit:
        tail += f" · ⚠ vLLM accepts at most {limit} images per prompt for this profile"
    return head + table + tail


def audio_md(report: AudioReport, source: str, path: str | None) -> str:
    rows = [
        ("source", f"{source}: {esc(name_of(path))}" if path else source),
        ("duration (as heard)", f"{report.duration:.3f} s · {report.samples:,} samples"),
        ("original", f"{report.original_sample_rate:,} Hz · {report.original_channels} ch"),
        ("model input", f"{report.sample_rate:,} Hz mono"),
        ("token stride", f"{report.token_stride:,} samples = {1000 * report.token_stride / report.sample_rate:.0f} ms"),
        ("encoder chunks", f"{len(report.chunk_tokens)} × ≤{report.chunk_seconds} s → "
         + " + ".join(str(t) for t in report.chunk_tokens)),
        ("audio tokens", f"**{report.tokens:,}**"),
    ]
    md = "| audio | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    if report.notes:
        md += "\n\n" + "\n".join(f"- {esc(n)}" for n in report.notes)
    return md


# ---------------------------------------------------------------- summary
def _row(color: str | None, label: str, detail: str, tokens: str, cls: str = "") -> str:
    dot = f'<span class="d3-dot" style="background:{color}"></span>' if color else ""
    return (f'<tr class="{cls}"><td>{dot}{esc(label)}</td><td class="d3-detail">{detail}</td>'
            f'<td class="d3-num">{tokens}</td></tr>')


def summary_html(state: StudioState, profile: Profile) -> str:
    at, ai = approx(profile, "text"), approx(profile, "image")
    settings = state.settings
    rows: list[str] = []
    banner = ""
    v = state.video
    if v is not None:
        first = v.frames[0]
        rows.append(_row(COLORS["image"], "video frames",
                         f"{len(v.frames)} × {first.decoded_size[0]}×{first.decoded_size[1]}",
                         f"{ai}{v.image_pad_tokens:,}"))
        rate = v.sample_rate
        heard = sum(s.samples for s in v.audio_segments) / rate if v.audio_segments else 0.0
        rows.append(_row(COLORS["audio"], "video sound",
                         f"{len(v.audio_segments)} seg · {heard:.1f} s" if v.audio_segments else "—",
                         f"{v.audio_pad_tokens:,}"))
        rows.append(_row(COLORS["text"], "video text", "timestamps, tags", f"{at}{v.text_tokens:,}"))
        kept = "kept" if v.audio.kept else "not in prompt"
        cls = "d3-ok" if v.audio.kept else "d3-warnline"
        # the inspector's reason starts with its verdict ("kept: …" / "dropped: …"), which the heading says
        detail = v.audio.reason.removeprefix("kept: ").removeprefix("dropped: ")
        banner += f'<div class="d3-audio-reason {cls}"><b>Sound track {kept}:</b> {esc(detail)}</div>'
        if not v.complete:
            banner = (
                '<div class="d3-incomplete"><b>⚠ INCOMPLETE — frames only.</b> The video has a sound track '
                "but it was not decoded, so the model would get frames only and this result is "
                f"<b>not</b> what a working server sees. {esc(v.audio.reason)}</div>"
            ) + banner
    if state.images:
        rows.append(_row(COLORS["image"], "images", f"{len(state.images)} file(s)",
                         f"{ai}{sum(r.tokens for _, r in state.images):,}"))
    if state.audio is not None:
        rows.append(_row(COLORS["audio"], "audio clip", f"{state.audio.duration:.1f} s", f"{state.audio.tokens:,}"))
    if not rows:
        return ('<div class="d3-summary d3-empty">Nothing uploaded yet — drop a video, images or audio on the '
                "left. Totals by modality appear here.</div>")
    t = totals(state)
    used = sum(t.values())
    reserve = settings.effective_reserve
    free = settings.seq - reserve - used
    mark = at or ai
    rows.append(_row(None, "media in prompt", "", f"<b>{mark}{used:,}</b>", "d3-total"))
    rows.append(_row(COLORS["reserve"], "output reserve", "", f"{reserve:,}"))
    rows.append(_row(None, "seq", "", f"{settings.seq:,}"))
    free_cls = "d3-total" if free >= 0 else "d3-total d3-over"
    rows.append(_row(COLORS["free"], "free" if free >= 0 else "over budget", "", f"{mark}{free:,}", free_cls))
    return (f'<div class="d3-summary">{banner}<table class="d3-table"><thead><tr><th>modality</th><th></th>'
            f'<th class="d3-num">tokens</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
