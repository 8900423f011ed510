"""``python app.py inspect FILE... --json``: what the model sees, one JSON object per file."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from dots3_demo.inspection import K_MODES, InspectionError, VideoSettings
from dots3_demo.inspection.plan import plan_file
from dots3_demo.inspection.video import DEFAULT_SEQ
from dots3_demo.profiles import ProfileError, load_profile


def add_inspect_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``inspect`` sub-command's flags (its names are a contract; keep them)."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="images, audio or video files")
    parser.add_argument(
        "--model", default=None, metavar="DIR",
        help="checkpoint or config-only folder (config.json, preprocessor_config.json, "
        "tokenizer files); default: the bundled preview profile",
    )
    parser.add_argument(
        "--seq", type=int, default=DEFAULT_SEQ,
        help=f"total token budget a video is planned against (default {DEFAULT_SEQ})",
    )
    parser.add_argument(
        "--output-reserve", type=int, default=None,
        help="tokens kept for the answer (default: seq // 4, vLLM's default)",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=0,
        help="the sampling max_tokens; raises the reserve when larger (default 0)",
    )
    parser.add_argument(
        "--audio-cap", type=float, default=1.0,
        help="drop a video's sound track above this share of the input budget; 0 = frames only",
    )
    parser.add_argument("--k-mode", default="eval_ek", choices=K_MODES, help="audio/frame interleaving")
    parser.add_argument("--question", default="", help="the prompt text (seeds k-mode logk only)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per file")


def _summary(item: dict) -> str:
    """One human-readable line per file for the non-JSON output."""
    if "error" in item:
        return f"{item['file']}: ERROR {item['error']}"
    kind = item["kind"]
    data = item[kind]
    if kind == "image":
        g = data["grid"]
        return (f"{item['file']}: image {data['original_size']} → {data['resized_size']}, grid {g}, "
                f"{data['tokens']} tokens")
    if kind == "audio":
        return (f"{item['file']}: audio {data['duration']:.2f} s, {data['samples']} samples @16 kHz, "
                f"{data['tokens']} tokens")
    return (
        f"{item['file']}: video {len(data['frames'])} frames, {len(data['audio_segments'])} audio segments, "
        f"{data['prompt_tokens']} prompt tokens (image {data['image_pad_tokens']}, audio "
        f"{data['audio_pad_tokens']}); audio {data['audio']['reason']}"
    )


def run_inspect(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Inspect every file; a bad file prints an error object and makes the exit status 2."""
    try:
        profile = load_profile(args.model)
        settings = VideoSettings(
            seq=args.seq,
            output_reserve=args.output_reserve,
            max_new_tokens=args.max_new_tokens,
            audio_cap=args.audio_cap,
            k_mode=args.k_mode,
            question=args.question,
        )
        settings.validate()
    except (ProfileError, InspectionError) as exc:
        print(json.dumps({"error": str(exc)}) if args.json else f"error: {exc}", file=out)
        return 2
    failed = False
    if not args.json:
        approximate = f" (approximate: {'; '.join(profile.approximate)})" if profile.approximate else ""
        print(f"profile: {profile.name}{approximate}", file=out)
    for path in args.files:
        plan = plan_file(path, profile, settings)
        failed = failed or plan.error is not None
        print(json.dumps(plan.item) if args.json else _summary(plan.item), file=out, flush=True)
    return 2 if failed else 0


def main_inspect(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="app.py inspect", description=__doc__)
    add_inspect_arguments(parser)
    return run_inspect(parser.parse_args(argv))
