"""Dots3 NOTE Studio — try vLLM's dots3_note omni model in the browser, and see what it sees.

Run commands::

    pip install -r requirements.txt && python app.py        # serves http://127.0.0.1:7860
    python app.py --model /path/to/Dots3-NOTE               # inspect with a checkpoint's geometry
    python app.py --model /path/to/Dots3-NOTE --engine inprocess --tensor-parallel-size 8
    python app.py --model /path/to/profile --endpoint http://gpu-host:8000/v1
    python app.py inspect clip.mp4 photo.png --json          # what the model sees, as JSON
    python app.py smoke [--model DIR] [engine flags]         # GPU smoke test: engine vs inspector counts
    python app.py --help
    DOTS3_STUDIO_ARGS="--endpoint http://gpu-host:8000/v1" python app.py   # flags from the environment

With no engine attached the studio runs in preview mode: the inspector works, the chat says how
to attach an engine. It never invents an answer.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence

from dots3_demo import ffmpeg
from dots3_demo.inspection.limits import add_limit_arguments, limits_from_args
from dots3_demo.inspection.session import WORKER_MEMORY_BYTES, default_workers
from dots3_demo.inspection.video import DEFAULT_SEQ

ENV_ARGS = "DOTS3_STUDIO_ARGS"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Flags of the web app plus every vLLM engine flag (``python app.py inspect`` has its own)."""
    from dots3_demo.engine.cli import add_engine_cli_args, new_parser
    from dots3_demo.engine.flag_cache import asks_for_help_only
    from dots3_demo.serving.defaults import DEFAULT_CLOSED_SESSION_TTL_S

    parser = new_parser(
        prog="app.py",
        description="Dots3 NOTE Studio: a browser demo for vLLM's dots3_note omni model. "
        "Sub-commands: `python app.py inspect FILE... --json` prints what the model sees; "
        "`python app.py smoke [--model DIR]` is a GPU smoke test (engine vs inspector token counts). "
        "--model names a checkpoint or a config-only profile folder (default: the bundled "
        "preview profile); the engine runs only with --engine inprocess or --endpoint URL. "
        f"Flags may also come from ${ENV_ARGS} (read first; the command line wins).",
    )
    studio = parser.add_argument_group("Dots3 NOTE Studio")
    studio.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="address to serve on (default $GRADIO_SERVER_NAME, else 127.0.0.1)")
    studio.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                        help="port to serve on (default $GRADIO_SERVER_PORT, else 7860)")
    studio.add_argument(
        "--seq", type=int, default=None,
        help=f"default video budget in the UI (default: the engine's max_model_len, else {DEFAULT_SEQ})",
    )
    studio.add_argument(
        "--closed-session-ttl", type=_seconds, default=DEFAULT_CLOSED_SESSION_TTL_S, metavar="SECONDS",
        help="how long a closed tab's session (its uploads and conversation) is kept, in case the tab "
        "reconnects; then it is dropped whole (the default is Gradio's own hour)",
    )
    studio.add_argument(
        "--inspect-workers", type=_workers, default=default_workers(), metavar="N",
        help="how many uploads are inspected at once, across all visitors (one visitor's panels inspect side by "
        "side too); the default is one per CPU core this process may use, at most one per "
        f"{WORKER_MEMORY_BYTES // 1024**3} GiB of memory",
    )
    add_limit_arguments(studio)  # --max-file-size, --max-video-seconds, --max-video-resolution, …
    add_engine_cli_args(parser, help_only=asks_for_help_only(list(argv)))  # --help alone: vLLM's flags as recorded
    return parser.parse_args(list(argv))


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value


def _workers(text: str) -> int:
    """An argparse type: a whole number of workers, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {text}")
    return value


def arguments(argv: Sequence[str] | None = None) -> list[str]:
    """The command line, after the flags in ``$DOTS3_STUDIO_ARGS`` (for hosts that cannot pass
    arguments, e.g. a Hugging Face Gradio Space: set it as a Space variable). Later flags win."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("inspect", "smoke"):  # sub-commands: the studio's flags do not apply
        return argv
    return shlex.split(os.environ.get(ENV_ARGS, "")) + argv


def main(argv: Sequence[str] | None = None) -> int:
    command_line = argv is None
    argv = arguments(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    if not ffmpeg.wants_help(argv):
        # torchcodec (vLLM's video decoder) needs FFmpeg's shared libraries. Without the system's, link
        # PyAV's bundled ones and re-execute once (only from the command line), before anything heavy.
        ffmpeg.ensure_libraries(reexec=command_line)
        if ffmpeg.libraries_problem():
            print(f"warning: {ffmpeg.media_problem()}", file=sys.stderr, flush=True)
    if argv and argv[0] == "inspect":
        from dots3_demo.cli.inspect import main_inspect

        return main_inspect(argv[1:])
    if argv and argv[0] == "smoke":
        from dots3_demo.smoke import main_smoke

        return main_smoke(argv[1:])
    args = parse_args(argv)
    from dots3_demo.engine.cli import build_engine
    from dots3_demo.profiles import ProfileError, load_profile
    from dots3_demo.ui import launch_app

    try:
        profile = load_profile(args.model)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    engine = build_engine(args)
    probe = getattr(engine, "probe", None)  # a remote server: its model and context length, before the UI
    if probe is not None and not probe():
        print(f"warning: {args.endpoint} did not answer yet; sizes follow its context once it does", file=sys.stderr)
    seq = args.seq or (engine.max_model_len if engine is not None else None) or DEFAULT_SEQ
    # The engine starts loading with the server (in the background: the page, /healthz and the
    # inspector answer meanwhile), not on the first message.
    launch_app(profile, engine=engine, host=args.host, port=args.port, seq=seq, limits=limits_from_args(args),
               closed_session_ttl=args.closed_session_ttl, start_engine=True, inspect_workers=args.inspect_workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
