"""Dots3 NOTE Studio — try vLLM's dots3_note omni model in the browser, and see what it sees.

Run commands::

    pip install -r requirements.txt && python app.py        # serves http://127.0.0.1:7860
    python app.py --model /path/to/Dots3-NOTE               # inspect with a checkpoint's geometry
    python app.py --model /path/to/Dots3-NOTE --engine inprocess --tensor-parallel-size 8
    python app.py --model /path/to/profile --endpoint http://gpu-host:8000/v1
    python app.py inspect clip.mp4 photo.png --json          # what the model sees, as JSON
    python app.py smoke [--model DIR] [engine flags]         # GPU smoke test: engine vs inspector counts
    python app.py eval assets/eval/set.jsonl --out /tmp/run   # batch evaluation, preview: the plans only
    python app.py eval SET.jsonl --out DIR --model DIR --engine inprocess   # … answered (or --endpoint URL)
    python app.py eval SET.jsonl --out DIR --sweep seq=4096,8192   # … per value: accuracy against media tokens
    python app.py eval-compare RUN_A RUN_B --out DIR          # two eval runs paired: fixed, broken, the difference
    python app.py eval-import videomme test.parquet --out SET.jsonl --media-root videos/   # benchmark items as a set
    python app.py eval-export DIR --inspect run.eval          # an eval run as inspect-ai's log (inspect view)
    python app.py --help
    DOTS3_STUDIO_ARGS="--endpoint http://gpu-host:8000/v1" python app.py   # flags from the environment

With no engine attached the studio runs in preview mode: the inspector works, the chat says how
to attach an engine. It never invents an answer.

The flags of every command are defined in ``dots3_demo/cli/`` (this command's in ``cli/studio.py``);
this file reads them, dispatches the sub-commands and launches the studio.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from functools import partial

from dots3_demo import ffmpeg
from dots3_demo.cli.limits import limits_from_args
from dots3_demo.cli.studio import arguments, parse_args
from dots3_demo.inspection.video import DEFAULT_SEQ


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
        from dots3_demo.cli.smoke import main_smoke

        status = main_smoke(argv[1:])
        if command_line:  # vLLM's processes are ended already; Python's own exit was seen hanging after MTP
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        return status
    if argv and argv[0] == "eval":
        from dots3_demo.cli.eval import main_eval

        return main_eval(argv[1:])
    if argv and argv[0] == "eval-compare":
        from dots3_demo.cli.eval_compare import main_eval_compare

        return main_eval_compare(argv[1:])
    if argv and argv[0] == "eval-import":
        from dots3_demo.cli.eval_import import main_eval_import

        return main_eval_import(argv[1:])
    if argv and argv[0] == "eval-export":
        from dots3_demo.cli.eval_export import main_eval_export

        return main_eval_export(argv[1:])
    args = parse_args(argv)
    from dots3_demo.cli.engine import build_engine
    from dots3_demo.profiles import ProfileError, load_profile
    from dots3_demo.ui import launch_app

    try:
        profile = load_profile(args.model)
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from dots3_demo.serving.stopping import EXIT_ENGINE_STALLED, StopOnSignals

    stop = StopOnSignals(None)  # SIGTERM/SIGINT/SIGHUP end vLLM's processes, then the server
    engine = build_engine(args, on_stall=partial(stop.request_exit, EXIT_ENGINE_STALLED)
                          if args.exit_on_engine_stall else None)
    stop.engine = engine
    probe = getattr(engine, "probe", None)  # a remote server: its model and context length, before the UI
    if probe is not None and not probe():
        print(f"warning: {args.endpoint} did not answer yet; sizes follow its context once it does", file=sys.stderr)
    seq = args.seq or (engine.max_model_len if engine is not None else None) or DEFAULT_SEQ
    # The engine starts loading with the server (in the background: the page, /healthz and the
    # inspector answer meanwhile), not on the first message.
    with stop:
        launch_app(profile, engine=engine, host=args.host, port=args.port, seq=seq, limits=limits_from_args(args),
                   closed_session_ttl=args.closed_session_ttl, start_engine=True, inspect_workers=args.inspect_workers,
                   freeze_heap=True)
    return stop.exit_status


if __name__ == "__main__":
    sys.exit(main())
