"""Benchmark: the studio's video inspector vs. vLLM's own ``preprocess_dots3_note_video``.

Run from the repository root (takes ~20-30 min in full on 2 cores; ``--quick`` ~3 min)::

    python -m benchmarks.inspect_bench                      # full: 10 s, 60 s, 10 min × 720p, 1080p
    python -m benchmarks.inspect_bench --quick              # 10 s clips only
    python -m benchmarks.inspect_bench --repeat 5 --seq 16384 --out benchmarks/results.md

What is compared (same bytes, same settings, same process)
----------------------------------------------------------
* **vLLM**: ``vllm_compat.video_module().preprocess_dots3_note_video(data, tokenizer=...,
  question="", seq=SEQ, ...)`` with exactly the keyword arguments the inspector passes
  (audio_cap / sample rate / k_mode / reserve from the default ``VideoSettings``).
* **inspector**: ``probe_file(path)`` + ``inspect_video_bytes(data, probe, profile, settings)`` —
  everything the studio does per upload except drawing figures.

The file is read into memory once, outside both timings. The preview profile (bundled) is
loaded once. Both functions are warmed up once on the smallest clip (imports, tokenizer caches,
FFmpeg libraries); then, per clip, each function runs ``--repeat`` times, alternating which one
goes first (vLLM first on even rounds, inspector first on odd rounds), and the **median** wall
time (``time.perf_counter``) is reported. ``ratio`` = inspector median / vLLM median; the goal
from the issue is ratio ≤ 1.1.

Peak memory method
------------------
Each (clip, which) pair is measured in a **fresh subprocess** (this script re-invoked with the
hidden ``--_mem-child`` flag) so that one measurement cannot inherit another's high-water mark.
The child imports everything, loads the profile, imports torchcodec's decoders and reads the
file. Importing vLLM alone peaks far above what one call needs, so the child then resets the
kernel's peak-RSS mark (writes ``5`` to ``/proc/self/clear_refs``, Linux ≥ 4.0; this also resets
``ru_maxrss``) and records the current RSS (``VmRSS``) as the *baseline*. It runs the function
once and reads ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (Linux: KiB) as the *peak*. The
table shows ``peak (+peak − baseline)`` in MiB: the process's peak resident set during the call
and the extra memory the call needed above everything already loaded. If ``clear_refs`` cannot
be written, the baseline falls back to ``ru_maxrss`` before the call (then Δ is a lower bound
and often +0). RSS covers native allocations (FFmpeg, torch, numpy, PIL) that ``tracemalloc``
would miss.

Clips
-----
Synthetic H.264 (libx264 ultrafast, via ``support/media_factory.make_video``) with a 44.1 kHz mono
AAC tone, cached in ``--cache-dir`` (default ``/tmp/dots3_bench``) and reused when present.
Source frame rate: 25 fps for the 10 s and 60 s clips, 10 fps for the 10 min clips (encoding
15 000 1080p frames would take too long on a small machine).

The machine's load average (``os.getloadavg``) is printed before and after the run, because
concurrent work on a shared 2-core box inflates both timings.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dots3_demo import vllm_compat
from dots3_demo.inspection.probe import probe_file
from dots3_demo.inspection.video import DEFAULT_SEQ, VideoReport, VideoSettings, inspect_video_bytes
from dots3_demo.profiles import Profile, load_profile

REPO_ROOT = Path(__file__).resolve().parent.parent

DEFAULT_CACHE_DIR = Path("/tmp/dots3_bench")
DEFAULT_REPEAT = 3
RESOLUTIONS: tuple[tuple[int, int], ...] = ((1280, 720), (1920, 1080))
AUDIO_RATE = 44100
GOAL_RATIO = 1.1
MEM_MARKER = "@@MEM "
WHICH = ("vllm", "inspector")


@dataclass(frozen=True)
class ClipSpec:
    """One synthetic clip: its label, length, picture size and source frame rate."""

    label: str
    seconds: float
    width: int
    height: int
    fps: int

    @property
    def filename(self) -> str:
        return f"{self.label}_{self.height}p_{self.fps}fps_aac.mp4"

    @property
    def resolution(self) -> str:
        return f"{self.width}×{self.height}"


@dataclass
class Row:
    """The measured numbers for one clip (one table row)."""

    clip: ClipSpec
    frames: int
    audio_segments: int
    vllm_s: float
    inspector_s: float
    vllm_mem: tuple[float, float] | None  # (peak MB, delta MB)
    inspector_mem: tuple[float, float] | None

    @property
    def ratio(self) -> float:
        return self.inspector_s / self.vllm_s if self.vllm_s > 0 else float("inf")


def clip_specs(quick: bool) -> list[ClipSpec]:
    """The clips to benchmark: 10 s (and unless ``quick``, 60 s and 10 min) at 720p and 1080p."""
    lengths = [("10s", 10.0, 25)] if quick else [("10s", 10.0, 25), ("60s", 60.0, 25), ("10min", 600.0, 10)]
    return [ClipSpec(label, seconds, w, h, fps) for label, seconds, fps in lengths for w, h in RESOLUTIONS]


def ensure_clip(spec: ClipSpec, cache_dir: Path) -> Path:
    """Return the cached clip for ``spec``, encoding it first (atomically) if it is missing."""
    from support.media_factory import make_video

    path = cache_dir / spec.filename
    if path.is_file() and path.stat().st_size > 0:
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".partial-{os.getpid()}-{spec.filename}")
    started = time.perf_counter()
    make_video(
        partial, seconds=spec.seconds, width=spec.width, height=spec.height, fps=spec.fps,
        audio_rate=AUDIO_RATE,
    )
    partial.replace(path)
    log(f"encoded {path.name} in {time.perf_counter() - started:.1f} s")
    return path


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the table."""
    print(message, file=sys.stderr, flush=True)


def vllm_kwargs(profile: Profile, settings: VideoSettings) -> dict[str, Any]:
    """The keyword arguments ``inspect_video_bytes`` gives vLLM for these settings and profile."""
    pm = vllm_compat.processor_module()
    audio_cap = settings.audio_cap if profile.processor.video_audio_enabled else 0.0
    return {
        "tokenizer": profile.tokenizer,
        "question": settings.question,
        "seq": settings.seq,
        "output_reserve": settings.output_reserve,
        "audio_cap": audio_cap,
        "audio_sample_rate": pm._DEFAULT_SAMPLE_RATE,
        "k_mode": settings.k_mode,
        "max_new_tokens": settings.max_new_tokens,
    }


def make_runners(
    path: Path, data: bytes, profile: Profile, settings: VideoSettings
) -> dict[str, Callable[[], Any]]:
    """Zero-argument callables for the two pipelines on one clip."""
    video = vllm_compat.video_module()
    kwargs = vllm_kwargs(profile, settings)

    def run_vllm() -> list[Any]:
        return video.preprocess_dots3_note_video(data, **kwargs)

    def run_inspector() -> VideoReport:
        return inspect_video_bytes(data, probe_file(path), profile, settings)

    return {"vllm": run_vllm, "inspector": run_inspector}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall time of one call and its result."""
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def time_clip(runners: dict[str, Callable[[], Any]], repeat: int) -> tuple[dict[str, float], Any, Any]:
    """Median seconds per pipeline over ``repeat`` alternating rounds, plus the last results."""
    samples: dict[str, list[float]] = {name: [] for name in WHICH}
    results: dict[str, Any] = {}
    for round_no in range(repeat):
        order = WHICH if round_no % 2 == 0 else tuple(reversed(WHICH))
        for name in order:
            seconds, results[name] = timed(runners[name])
            samples[name].append(seconds)
    log("  " + "; ".join(f"{n}: " + ", ".join(f"{s:.2f}" for s in samples[n]) + " s" for n in WHICH))
    return {n: statistics.median(samples[n]) for n in WHICH}, results["vllm"], results["inspector"]


def check_same_output(parts: list[Any], report: VideoReport) -> None:
    """Warn when the inspector's frame/segment counts differ from vLLM's own parts."""
    frames = sum(1 for p in parts if p.kind == "image")
    audio = sum(1 for p in parts if p.kind == "audio")
    if (frames, audio) != (len(report.frames), len(report.audio_segments)):
        log(f"  WARNING: vLLM gave {frames} frames/{audio} audio, inspector {len(report.frames)}/"
            f"{len(report.audio_segments)}")


def measure_memory(path: Path, which: str, seq: int) -> tuple[float, float] | None:
    """Peak RSS and its rise over the baseline (MB) of one call, in a fresh subprocess."""
    cmd = [sys.executable, "-m", "benchmarks.inspect_bench", "--_mem-child", which, str(path), "--seq", str(seq)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    for line in done.stdout.splitlines():
        if line.startswith(MEM_MARKER):
            data = json.loads(line[len(MEM_MARKER):])
            return data["peak_mb"], data["peak_mb"] - data["baseline_mb"]
    log(f"  memory child failed for {which} {path.name} (exit {done.returncode}): {done.stderr[-500:]}")
    return None


def max_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    """This process's resident set size now, in MiB (``VmRSS`` from ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmRSS in /proc/self/status")


def reset_peak_rss() -> float:
    """Reset the peak-RSS mark and return the baseline to measure against (MiB)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return current_rss_mb()
    except OSError:
        return max_rss_mb()


def mem_child(which: str, path: Path, seq: int) -> int:
    """The fresh-process side of ``measure_memory``: print baseline and peak RSS as JSON."""
    import torchcodec.decoders  # noqa: F401 - both pipelines import it lazily; not part of the call

    profile = load_profile()
    data = path.read_bytes()
    runner = make_runners(path, data, profile, VideoSettings(seq=seq))[which]
    baseline = reset_peak_rss()
    runner()
    print(MEM_MARKER + json.dumps({"baseline_mb": baseline, "peak_mb": max_rss_mb()}), flush=True)
    return 0


def bench_clip(spec: ClipSpec, path: Path, profile: Profile, args: argparse.Namespace) -> Row:
    """Time both pipelines on one clip, then measure each one's memory in a fresh process."""
    log(f"{spec.filename}: timing ×{args.repeat}")
    data = path.read_bytes()
    runners = make_runners(path, data, profile, VideoSettings(seq=args.seq))
    medians, parts, report = time_clip(runners, args.repeat)
    check_same_output(parts, report)
    memory = {} if args.no_memory else {w: measure_memory(path, w, args.seq) for w in WHICH}
    return Row(
        clip=spec, frames=len(report.frames), audio_segments=len(report.audio_segments),
        vllm_s=medians["vllm"], inspector_s=medians["inspector"],
        vllm_mem=memory.get("vllm"), inspector_mem=memory.get("inspector"),
    )


def warm_up(path: Path, profile: Profile, seq: int) -> None:
    """Run both pipelines once on ``path`` so imports and caches are not timed."""
    log(f"warm-up on {path.name}")
    for runner in make_runners(path, path.read_bytes(), profile, VideoSettings(seq=seq)).values():
        runner()


def format_mem(mem: tuple[float, float] | None) -> str:
    return "n/a" if mem is None else f"{mem[0]:.0f} (+{mem[1]:.0f})"


def format_table(rows: Sequence[Row]) -> str:
    """The Markdown results table."""
    lines = [
        "| clip | resolution | duration | frames sampled | audio segments | vLLM s | inspector s "
        "| ratio | vLLM peak RSS MB (+Δ) | inspector peak RSS MB (+Δ) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        flag = "" if r.ratio <= GOAL_RATIO else " ⚠"
        lines.append(
            f"| {r.clip.filename} | {r.clip.resolution} | {r.clip.seconds:g} s @ {r.clip.fps} fps "
            f"| {r.frames} | {r.audio_segments} | {r.vllm_s:.2f} | {r.inspector_s:.2f} "
            f"| {r.ratio:.2f}{flag} | {format_mem(r.vllm_mem)} | {format_mem(r.inspector_mem)} |"
        )
    return "\n".join(lines)


def load_text() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.inspect_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s clips only")
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, help="timed rounds per clip (median)")
    parser.add_argument("--seq", type=int, default=DEFAULT_SEQ, help=f"token budget (default {DEFAULT_SEQ})")
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown report here")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where clips are cached")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-pair memory subprocesses")
    parser.add_argument("--_mem-child", nargs=2, metavar=("WHICH", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be ≥ 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args._mem_child:
        which, file = args._mem_child
        return mem_child(which, Path(file), args.seq)
    started = time.perf_counter()
    load_before = load_text()
    specs = clip_specs(args.quick)
    paths = {spec: ensure_clip(spec, args.cache_dir) for spec in specs}
    profile = load_profile()
    warm_up(paths[specs[0]], profile, args.seq)
    rows = [bench_clip(spec, paths[spec], profile, args) for spec in specs]
    elapsed = time.perf_counter() - started
    report = "\n".join([
        format_table(rows),
        "",
        f"seq={args.seq}, repeat={args.repeat} (median), goal ratio ≤ {GOAL_RATIO}; "
        f"{os.cpu_count()} CPUs, load average (1/5/15 min) before {load_before}, after {load_text()}; "
        f"total {elapsed / 60:.1f} min (including clip encoding if not cached).",
    ])
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
