"""What dots3_note sees and hears of one video: vLLM's ``preprocess_dots3_note_video``.

The frames, their timestamps, the audio segments and their order come from one call of
vLLM's function on the raw bytes (the path the engine takes with ``mm_processor_cache_gb=0``).
Sizes and grids come from vLLM's image processor, prompt tokens from vLLM's tokenizer. Around
that we *explain* the result — solver inputs, why the audio was kept or dropped, the cost curve —
using vLLM's own helpers (``_solve_degrade``, ``_audio_tokens``, ``_compute_target_size`` …);
``tests/inspection/test_video_parity.py`` / ``test_solver_parity.py`` pins every explanation to what vLLM
actually produced, and the
report says so when the two disagree instead of showing a wrong number.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
from PIL import Image

from dots3_demo import ffmpeg, vllm_compat
from dots3_demo.budget import DEFAULT_SEQ as DEFAULT_SEQ
from dots3_demo.budget import K_MODES as K_MODES
from dots3_demo.budget import VideoSettings as VideoSettings
from dots3_demo.inspection.errors import InspectionError, one_line
from dots3_demo.inspection.probe import MediaProbe, require_kind
from dots3_demo.profiles import Profile

Progress = Callable[[float, str], None]  # (fraction done, what is being done); the UI's progress bar too


@dataclass
class FrameInfo:
    index: int
    timestamp: str  # "HH:MM:SS.cc", exactly the text vLLM puts before the frame
    seconds: float
    decoded_size: tuple[int, int]  # (w, h) of the frame vLLM's video code produced
    resized_size: tuple[int, int]  # (w, h) after vLLM's image processor pixel limits
    grid: list[int]
    tokens: int
    image: Image.Image = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "seconds": self.seconds,
            "decoded_size": list(self.decoded_size),
            "resized_size": list(self.resized_size),
            "grid": self.grid,
            "tokens": self.tokens,
        }


@dataclass(frozen=True)
class SampledFrames:
    """The frames vLLM has made of a video so far, in its order: while its call runs, one more each time
    (``complete`` False, the frame made the moment before); then, once its call has returned, all of them, read
    from the parts it returned (``complete``), before the budget is explained. The pictures are the same objects
    throughout."""

    frames: tuple[FrameInfo, ...]
    complete: bool


FramesReady = Callable[[SampledFrames], None]


@dataclass
class AudioSegment:
    index: int
    start_sample: int
    end_sample: int
    tokens: int
    waveform: np.ndarray = field(repr=False)

    @property
    def samples(self) -> int:
        return self.end_sample - self.start_sample

    def to_dict(self, sample_rate: int) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "tokens": self.tokens,
            "start_sample": self.start_sample,
            "end_sample": self.end_sample,
            "start": round(self.start_sample / sample_rate, 3),
            "end": round(self.end_sample / sample_rate, 3),
        }


@dataclass
class InterleaveGroup:
    frames: list[int]
    audio: int | None  # index into audio_segments


@dataclass
class AudioDecision:
    in_file: bool
    kept: bool
    reason: str
    decoded: bool = False  # torchcodec produced samples
    duration: float = 0.0
    tokens_needed: int = 0  # vLLM's _audio_tokens(duration)
    reserved_tokens: int = 0  # tokens + 3 per possible group, what the solver sets aside
    cap_limit: float = 0.0  # audio_cap × (seq − reserve)

    def to_dict(self) -> dict[str, Any]:
        return {
            "in_file": self.in_file,
            "kept": self.kept,
            "reason": self.reason,
            "decoded": self.decoded,
            "duration": round(self.duration, 3),
            "tokens_needed": self.tokens_needed,
            "reserved_tokens": self.reserved_tokens,
            "cap_limit": round(self.cap_limit, 1),
        }


@dataclass
class SolverView:
    """Inputs and outputs of vLLM's degrade solver for this video."""

    seq: int
    configured_reserve: int
    effective_reserve: int
    max_new_tokens: int
    audio_cap: float
    k_mode: str
    seq_length: int  # seq − effective reserve: the input budget
    overhead: int
    visual_budget: int
    frame_hard_cap: int
    duration: float
    orig_size: tuple[int, int]
    orig_fps: float
    total_frames: int
    planned_frames: int
    patch_cap: int
    target_size: tuple[int, int]  # (w, h) the solver resizes frames to
    chosen_scale: float  # where on the 0..1 quality scale the solver settled

    @property
    def effective_fps(self) -> float:
        return self.planned_frames / self.duration if self.duration > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()}
        data["orig_size"] = list(self.orig_size)
        data["target_size"] = list(self.target_size)
        data["duration"] = round(self.duration, 3)
        data["chosen_scale"] = round(self.chosen_scale, 4)
        data["effective_fps"] = round(self.effective_fps, 4)
        return data


@dataclass
class VideoReport:
    probe: MediaProbe
    settings: VideoSettings
    solver: SolverView
    frames: list[FrameInfo]
    audio_segments: list[AudioSegment]
    order: list[str]
    groups: list[InterleaveGroup]
    audio: AudioDecision
    image_pad_tokens: int
    audio_pad_tokens: int
    prompt_tokens: int  # length of the video's expanded token span
    sample_rate: int
    notes: list[str] = field(default_factory=list)

    @property
    def text_tokens(self) -> int:
        return self.prompt_tokens - self.image_pad_tokens - self.audio_pad_tokens

    @property
    def complete(self) -> bool:
        """False when the file's sound track exists but could not be decoded."""
        # solver.audio_cap is the cap vLLM applied (0 when the profile has no audio tower)
        return not (self.audio.in_file and not self.audio.decoded and self.solver.audio_cap > 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "duration": round(self.probe.duration, 3),
            "fps": round(self.probe.fps, 3),
            "resolution": [self.probe.width, self.probe.height],
            "has_audio_track": self.probe.has_audio,
            "complete": self.complete,
            "frames": [f.to_dict() for f in self.frames],
            "audio_segments": [s.to_dict(self.sample_rate) for s in self.audio_segments],
            "order": self.order,
            "groups": [{"frames": g.frames, "audio": g.audio} for g in self.groups],
            "image_pad_tokens": self.image_pad_tokens,
            "audio_pad_tokens": self.audio_pad_tokens,
            "text_tokens": self.text_tokens,
            "prompt_tokens": self.prompt_tokens,
            "audio": self.audio.to_dict(),
            "solver": self.solver.to_dict(),
            "budget": {
                "seq": self.settings.seq,
                "output_reserve": self.settings.effective_reserve,
                "input_budget": self.solver.seq_length,
                "used": self.prompt_tokens,
                "free": self.solver.seq_length - self.prompt_tokens,
            },
            "notes": self.notes,
        }


@cache
def torchcodec_problem() -> str | None:
    """Why vLLM's video decoder (torchcodec) cannot run here, or None if it can.

    First the start-up check (``dots3_demo.ffmpeg``: can any FFmpeg torchcodec was built for be
    loaded?), then torchcodec itself: since 0.17 its import succeeds without FFmpeg and only
    ``torchcodec._core.ops._FFMPEG_AVAILABLE`` tells, so a missing FFmpeg would otherwise surface
    as an unreadable file.

    The advice names what is missing: torchcodec not installed → install torchcodec; a loader error naming
    one of FFmpeg's libraries → install FFmpeg; any other failure of torchcodec's import (a build for another
    torch, a CUDA library it links) → reinstall torchcodec."""
    if problem := ffmpeg.libraries_problem():
        return problem
    if not ffmpeg.torchcodec_installed():
        return ffmpeg.TORCHCODEC_NOT_INSTALLED
    try:
        from torchcodec._core import ops
        from torchcodec.decoders import AudioDecoder, VideoDecoder  # noqa: F401
        if getattr(ops, "_FFMPEG_AVAILABLE", True) is False:
            ops.load_core_libraries()  # raises, with torchcodec's own reason
    except Exception as exc:  # noqa: BLE001 - ImportError, OSError, RuntimeError all seen
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torchcodec":
            return ffmpeg.TORCHCODEC_NOT_INSTALLED
        first = one_line(exc) or type(exc).__name__
        if ffmpeg.FFMPEG_LIBRARY_NAME.search(str(exc)):
            return (
                f"vLLM's video decoder (torchcodec) cannot load FFmpeg's libraries ({first}), so it cannot "
                f"read any video or decode its sound track. {ffmpeg.INSTALL_HINT}"
            )
        return (f"vLLM's video decoder (torchcodec) is installed but cannot be loaded ({first}), so it cannot "
                f"read any video or decode its sound track. {ffmpeg.TORCHCODEC_REINSTALL}")
    return None


def _native_patches(orig_h: int, orig_w: int) -> int:
    """28 px cells at the video's own size, rounded as vLLM's solver and frame decoder do."""
    v = vllm_compat.video_module()
    aligned_h = max(v._ALIGN, round(orig_h / v._ALIGN) * v._ALIGN)
    aligned_w = max(v._ALIGN, round(orig_w / v._ALIGN) * v._ALIGN)
    return (aligned_h // v._ALIGN) * (aligned_w // v._ALIGN)


def solver_curve(
    duration: float, orig_h: int, orig_w: int, orig_fps: float, seq_length: int, scales: np.ndarray
) -> dict[str, np.ndarray]:
    """The solver's usage at each quality scale, from vLLM's own constants and helpers.

    vLLM's ``_solve_degrade`` bisects this curve internally; ``tests/inspection/test_video_parity.py`` /
    ``test_solver_parity.py`` checks that bisecting it here lands on vLLM's answer for many shapes and budgets.
    """
    v = vllm_compat.video_module()
    orig_max_pf = _native_patches(orig_h, orig_w)
    fps_cap = min(v._FPS_CAP, max(orig_fps, 1e-6))
    pf_cap = min(v._PF_CEIL, max(orig_max_pf, v._PF_FLOOR))
    frame_cap = v._frame_hard_cap(seq_length)
    fps = v._FPS_MIN + scales * (fps_cap - v._FPS_MIN)
    patch_caps = np.array([int(round(v._PF_FLOOR + s * (pf_cap - v._PF_FLOOR))) for s in scales])
    frames = np.array(
        [max(v._MIN_FRAMES, min(int(round(duration * f)), frame_cap)) for f in fps]
    )
    patches = np.array([v._real_patches_at(orig_h, orig_w, int(c)) for c in patch_caps])
    cost = frames * (patches + v._FRAME_OVERHEAD)
    return {"scale": scales, "cost": cost, "fps": fps, "patch_cap": patch_caps, "frames": frames}


def _chosen_scale(duration: float, orig_h: int, orig_w: int, orig_fps: float, seq_length: int,
                  visual_budget: int) -> float:
    """The scale vLLM's bisection settles on (1.0 if everything fits, 0.0 if nothing does)."""
    def cost(scale: float) -> int:
        c = solver_curve(duration, orig_h, orig_w, orig_fps, seq_length, np.array([scale]))
        return int(c["cost"][0])

    if cost(1.0) <= visual_budget:
        return 1.0
    if cost(0.0) > visual_budget:
        return 0.0
    low, high = 0.0, 1.0
    for _ in range(50):
        mid = (low + high) / 2
        if cost(mid) <= visual_budget:
            low = mid
        else:
            high = mid
    return low


def _audio_decision(
    data: bytes, probe: MediaProbe, settings: VideoSettings, seq_length: int, audio_cap: float,
    sample_rate: int, audio_kept: bool, audio_off_reason: str | None,
    decoded_samples: int | None = None,
) -> AudioDecision:
    """Why the sound track was kept or dropped, from vLLM's own token arithmetic.

    ``decoded_samples`` is the length of the track vLLM decoded, when the interleaved segments
    tell it (they tile the whole track when the last prompt part is audio); otherwise the
    track is decoded once more with vLLM's ``_decode_audio`` to explain a drop.
    """
    v = vllm_compat.video_module()
    decision = AudioDecision(in_file=probe.has_audio, kept=audio_kept, reason="")
    if audio_off_reason:
        decision.reason = audio_off_reason
        return decision
    if not probe.has_audio:
        decision.reason = "the file has no sound track"
        return decision
    if decoded_samples is not None:
        pcm, duration = True, decoded_samples / sample_rate
    else:
        pcm, duration = v._decode_audio(data, sample_rate)
    if pcm is None:
        if problem := torchcodec_problem():  # the libraries, not the file
            decision.reason = f"{problem} vLLM drops the sound track silently: the model would get frames only."
        else:
            decision.reason = (
                "the sound track could not be decoded by torchcodec — vLLM drops it silently, so "
                "the model would get frames only (is the sound track truncated or damaged, or in a "
                "codec FFmpeg cannot decode?)"
            )
        return decision
    decision.decoded = True
    decision.duration = duration
    decision.tokens_needed = v._audio_tokens(duration, sample_rate)
    estimated_frames = max(1, int(duration * v._FPS_CAP))
    max_groups = min(estimated_frames, max(1, int(duration // v._INTERLEAVE_MIN_SECONDS)))
    decision.reserved_tokens = decision.tokens_needed + 3 * max_groups
    decision.cap_limit = audio_cap * seq_length
    min_visual = v._MIN_FRAMES * (v._PF_FLOOR + v._FRAME_OVERHEAD)
    if decision.tokens_needed > decision.cap_limit:
        decision.reason = (
            f"dropped: the sound track needs {decision.tokens_needed} tokens, more than "
            f"audio_cap × (seq − reserve) = {audio_cap:g} × {seq_length} = {decision.cap_limit:.0f}"
        )
    elif decision.reserved_tokens + min_visual + v._BUDGET_OVERHEAD > seq_length:
        decision.reason = (
            f"dropped: audio ({decision.reserved_tokens} tokens with group markers) + the minimum "
            f"video ({min_visual}) + overhead ({v._BUDGET_OVERHEAD}) exceed seq − reserve = {seq_length}"
        )
    else:
        decision.reason = (
            f"kept: {decision.tokens_needed} tokens reserved for {duration:.2f} s of sound "
            f"(limit {decision.cap_limit:.0f})"
        )
    return decision


def inspect_video_bytes(
    data: bytes,
    probe: MediaProbe,
    profile: Profile,
    settings: VideoSettings = VideoSettings(),
    progress: Progress | None = None,
    frames_ready: FramesReady | None = None,
) -> VideoReport:
    """Run vLLM's video preprocessing on ``data`` and explain every number it produced.

    ``frames_ready`` is called with the frames as vLLM makes them (``SampledFrames``: each with the timestamp
    text vLLM puts before it, its grid and tokens, in vLLM's order; ``vllm_compat.video_preprocess_watching``),
    then with all of them as its call has returned, before the prompt's tokens are counted and the budget
    explained: the page shows them without waiting for the rest. It runs on the calling thread; whatever it
    raises stops the inspection, and is raised."""
    require_kind(probe, "video")
    settings.validate()
    problem = torchcodec_problem()
    if problem:
        raise InspectionError(problem)
    report = progress or (lambda fraction, text: None)
    v = vllm_compat.video_module()
    pm = vllm_compat.processor_module()
    processor = profile.processor
    image_processor = profile.image_processor
    sample_rate = pm._DEFAULT_SAMPLE_RATE  # the processor's ``audio_sr`` default
    audio_off_reason = None
    audio_cap = settings.audio_cap
    if not processor.video_audio_enabled:
        audio_cap = 0.0
        audio_off_reason = "the model profile has no audio tower (or its audio/video limits are 0)"
    elif audio_cap == 0:
        audio_off_reason = "audio_cap is 0: frames only"

    refused: list[BaseException] = []  # what frames_ready raised inside vLLM's call
    preprocess = (v.preprocess_dots3_note_video if frames_ready is None
                  else vllm_compat.video_preprocess_watching(_showing_each(frames_ready, image_processor, refused)))
    report(0.05, "decoding with vLLM's preprocess_dots3_note_video")
    try:
        parts = preprocess(
            data,
            tokenizer=profile.tokenizer,
            question=settings.question,
            seq=settings.seq,
            output_reserve=settings.output_reserve,
            audio_cap=audio_cap,
            audio_sample_rate=sample_rate,
            k_mode=settings.k_mode,
            max_new_tokens=settings.max_new_tokens,
        )
    except InspectionError:
        raise
    except Exception as exc:
        if refused and exc is refused[0]:
            raise
        detail = one_line(exc) if isinstance(exc, (ValueError, RuntimeError, OSError)) else ""
        raise InspectionError(
            "vLLM's video decoder (torchcodec) could not read this video; the file may be "
            "truncated or use a codec FFmpeg cannot decode" + (f" ({detail})" if detail else "")
        ) from exc

    report(0.7, "measuring frames and audio segments")
    frames: list[FrameInfo] = []
    segments: list[AudioSegment] = []
    order: list[str] = []
    groups: list[InterleaveGroup] = [InterleaveGroup(frames=[], audio=None)]
    fragments: list[str] = []
    timestamp = ""
    next_sample = 0
    for part in parts:
        if part.kind == "text":
            timestamp = str(part.value)
            fragments.append(timestamp)
        elif part.kind == "image":
            frames.append(_frame_info(len(frames), timestamp, part.value, image_processor))
            fragments.append(f"{pm.IMAGE_START}{pm.IMAGE_END}")  # pads added back below
            order.append("frame")
            groups[-1].frames.append(len(frames) - 1)
        else:
            waveform = np.asarray(part.value, dtype=np.float32)
            tokens = math.ceil(waveform.size / processor.audio_token_stride)
            segments.append(
                AudioSegment(len(segments), next_sample, next_sample + waveform.size, tokens, waveform)
            )
            next_sample += waveform.size
            fragments.append(f"{pm.AUDIO_START}{pm.AUDIO_END}")  # pads added back below
            order.append("audio")
            groups[-1].audio = len(segments) - 1
            groups.append(InterleaveGroup(frames=[], audio=None))
    if not groups[-1].frames and groups[-1].audio is None:
        groups.pop()
    if not frames:
        raise InspectionError("vLLM's video preprocessing produced no frames from this file")
    if frames_ready is not None:
        frames_ready(SampledFrames(tuple(frames), complete=True))
    # Pad tokens are special (atomic) tokens, so the expanded span is the text and markers
    # plus one token per pad; tokenizing 10^4 repeated pads would only cost time. The parity
    # tests pin this against vLLM's ``video_prompt_lengths``.
    image_pad_tokens = sum(f.tokens for f in frames)
    audio_pad_tokens = sum(s.tokens for s in segments)
    prompt_tokens = len(processor._token_ids("".join(fragments))) + image_pad_tokens + audio_pad_tokens

    report(0.8, "explaining the budget")
    seq_length = settings.seq - settings.effective_reserve
    tiles_track = bool(order) and order[-1] == "audio"
    decision = _audio_decision(
        data, probe, settings, seq_length, audio_cap, sample_rate, bool(segments), audio_off_reason,
        decoded_samples=next_sample if tiles_track else None,
    )
    reserved_audio = decision.reserved_tokens if decision.kept else 0
    overhead = (
        v._token_len(profile.tokenizer, "<|system|>You are a helpful assistant.<|endofsystem|>\n")
        + 2 + v._token_len(profile.tokenizer, "<video_0>") + 64
    )
    visual_budget = max(v._PF_FLOOR + v._FRAME_OVERHEAD, seq_length - overhead - reserved_audio)
    meta = v._open_video(data).metadata
    duration = float(meta.duration_seconds or 0)
    orig_h, orig_w = int(meta.height), int(meta.width)
    total_frames = int(getattr(meta, "num_frames", 0) or 0) or max(1, int(duration * (meta.average_fps or 25)))
    orig_fps = float(getattr(meta, "average_fps", 0) or 0) or 25.0
    num_frames, patch_cap = v._solve_degrade(visual_budget, duration, orig_h, orig_w, orig_fps, seq_length)
    target_h, target_w = v._compute_target_size(
        orig_h, orig_w, v._PF_FLOOR * v._ALIGN**2, min(patch_cap, _native_patches(orig_h, orig_w)) * v._ALIGN**2
    )
    solver = SolverView(
        seq=settings.seq,
        configured_reserve=settings.configured_reserve,
        effective_reserve=settings.effective_reserve,
        max_new_tokens=settings.max_new_tokens,
        audio_cap=audio_cap,
        k_mode=settings.k_mode,
        seq_length=seq_length,
        overhead=overhead,
        visual_budget=visual_budget,
        frame_hard_cap=v._frame_hard_cap(seq_length),
        duration=duration,
        orig_size=(orig_w, orig_h),
        orig_fps=orig_fps,
        total_frames=total_frames,
        planned_frames=max(v._MIN_FRAMES, min(num_frames, total_frames)),
        patch_cap=patch_cap,
        target_size=(target_w, target_h),
        chosen_scale=_chosen_scale(duration, orig_h, orig_w, orig_fps, seq_length, visual_budget),
    )
    notes = list(probe.notes)
    last_planned = v._format_timestamp(round((total_frames - 1) / orig_fps, 3))
    if len(frames) != solver.planned_frames and frames[-1].timestamp != last_planned:
        notes.append(
            f"the solver planned {solver.planned_frames} frames up to {last_planned}, but frames "
            f"after {frames[-1].timestamp} could not be decoded (truncated or damaged file?); "
            f"vLLM keeps the {len(frames)} before"
        )
    elif len(frames) != solver.planned_frames:
        notes.append(
            f"the solver planned {solver.planned_frames} frames; {len(frames)} distinct frames were "
            "decoded (frame indices that round to the same frame are merged)"
        )
    if frames[0].decoded_size != solver.target_size:
        notes.append(
            f"explanation mismatch: solver target {solver.target_size}, vLLM produced "
            f"{frames[0].decoded_size} — the frames shown are vLLM's"
        )
    if any(f.resized_size != f.decoded_size for f in frames):
        notes.append(
            f"the image processor's pixel limits resize frames {frames[0].decoded_size[0]}×"
            f"{frames[0].decoded_size[1]} → {frames[0].resized_size[0]}×{frames[0].resized_size[1]}"
        )
    if not decision.kept and decision.in_file and decision.decoded is False and audio_cap > 0:
        cause = f" ({ffmpeg.NOT_INSTALLED})" if decision.reason.startswith(ffmpeg.NOT_INSTALLED) else ""
        notes.append(f"INCOMPLETE: the sound track was not decoded{cause}; the model would get frames only")
    report(1.0, "done")
    return VideoReport(
        probe=probe,
        settings=settings,
        solver=solver,
        frames=frames,
        audio_segments=segments,
        order=order,
        groups=groups,
        audio=decision,
        image_pad_tokens=image_pad_tokens,
        audio_pad_tokens=audio_pad_tokens,
        prompt_tokens=prompt_tokens,
        sample_rate=sample_rate,
        notes=notes,
    )


def _showing_each(frames_ready: FramesReady, image_processor: Any,
                  refused: list[BaseException]) -> vllm_compat.FrameMade:
    """What vLLM's call hands each frame it makes to: ``frames_ready`` gets the frames so far; what it raises is
    kept in ``refused`` (then raised through vLLM's call, which must not report it as an unreadable file)."""
    made: list[FrameInfo] = []

    def frame_made(position: int, seconds: float, image: Image.Image) -> None:
        made.append(_frame_info(position, f"<{vllm_compat.video_module()._format_timestamp(seconds)}>", image,
                                image_processor))
        try:
            frames_ready(SampledFrames(tuple(made), complete=False))
        except BaseException as exc:
            refused.append(exc)
            raise

    return frame_made


def _frame_info(index: int, timestamp: str, image: Image.Image, image_processor: Any) -> FrameInfo:
    """The ``index``-th frame vLLM made, ``timestamp`` the text it puts before it (``<HH:MM:SS.cc>``): its size, and
    the grid and tokens vLLM's image processor gives it."""
    h, w = image_processor.resized_size(*image.size)
    grid = [1, h // image_processor.patch_size, w // image_processor.patch_size]
    text = timestamp.strip("<>")
    return FrameInfo(index=index, timestamp=text, seconds=_timestamp_seconds(text), decoded_size=image.size,
                     resized_size=(w, h), grid=grid, tokens=grid[1] * grid[2] // image_processor.merge_size**2,
                     image=image)


def _timestamp_seconds(text: str) -> float:
    hours, minutes, rest = text.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(rest)
