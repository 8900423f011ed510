"""What ``tests/deploy/test_ffmpeg.py`` runs inside a mount namespace where FFmpeg's libraries are
hidden: ``python -m tests.deploy.ffmpeg_child MODE``, one JSON line on stdout (last line).

* ``spawn``: the start-up fallback (``dots3_demo.ffmpeg.ensure_libraries``, which may re-execute this
  module once), then a process started the way vLLM starts its engine core (multiprocessing
  ``spawn``) decodes the bundled example clip's frames and sound track with torchcodec.
* ``ui``: the studio's video upload (run as the page's events run it, ``support.uploads``) on the
  bundled "Video + sound track" example, the page header of a freshly built interface, and
  ``app.main(["inspect", clip, "--json"])`` (its JSON line comes first) — without the re-execution,
  i.e. what a user sees when the libraries cannot be found.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path

CLIP = str(Path(__file__).resolve().parents[2] / "assets" / "examples" / "room_clip.mp4")


def _decode(path: str) -> dict:
    """In a spawned process: can torchcodec (as vLLM calls it) decode the clip, frames and sound?"""
    from torchcodec._core import ops
    from torchcodec.decoders import AudioDecoder, VideoDecoder

    result = {"available": bool(ops._FFMPEG_AVAILABLE), "ffmpeg_major": ops.ffmpeg_major_version,
              "ld_library_path": os.environ.get("LD_LIBRARY_PATH", "")}
    if ops._FFMPEG_AVAILABLE:
        result["frames"] = len(VideoDecoder(path))
        result["audio_samples"] = int(AudioDecoder(path, sample_rate=16000).get_all_samples().data.shape[-1])
    return result


def spawn() -> dict:
    from dots3_demo import ffmpeg

    status = ffmpeg.ensure_libraries()  # re-executes this module once when it makes the links
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        child = pool.apply(_decode, (CLIP,))
    return {"major": status.major, "links": str(status.links) if status.links else None, "child": child}


def ui() -> dict:
    from dots3_demo import ffmpeg
    from dots3_demo.core.state import initial_state
    from dots3_demo.profiles import load_profile
    from dots3_demo.ui.app import build_interface
    from dots3_demo.ui.examples import EXAMPLES_DIR, studio_examples
    from support.uploads import Page

    example = next(e for e in studio_examples() if e.label == "Video + sound track")
    profile = load_profile()
    state = initial_state(32768)
    outcome = Page(profile, state).video(str(EXAMPLES_DIR / example.video), state.settings)
    demo = build_interface(profile, seq=32768)
    header = next(b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == "d3-header")
    import app

    inspect_rc = app.main(["inspect", CLIP, "--json"])
    return {"status": outcome.status, "error": outcome.error, "header": header,
            "problem": ffmpeg.media_problem(), "torchcodec_ffmpeg": ffmpeg.status().major, "inspect_rc": inspect_rc}


if __name__ == "__main__":
    result = {"spawn": spawn, "ui": ui}[sys.argv[1]]()
    print(json.dumps(result), flush=True)
