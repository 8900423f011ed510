"""``python app.py``'s own command line: the studio's flags, the upload limits, every vLLM engine
flag, and the flags read from ``$DOTS3_STUDIO_ARGS`` (``python app.py inspect``, ``smoke``, ``eval``,
``eval-compare``, ``eval-import`` and ``eval-export`` have their own: ``cli.inspect``, ``cli.smoke``, ``cli.eval``,
``cli.eval_compare``, ``cli.eval_import``, ``cli.eval_export``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence

from dots3_demo.cli.limits import add_limit_arguments
from dots3_demo.cli.parser import count, new_parser, seconds
from dots3_demo.inspection.session import WORKER_MEMORY_BYTES, default_workers
from dots3_demo.inspection.video import DEFAULT_SEQ
from dots3_demo.serving.stopping import EXIT_ENGINE_STALLED

ENV_ARGS = "DOTS3_STUDIO_ARGS"
SUB_COMMANDS = ("inspect", "smoke", "eval", "eval-compare", "eval-import", "eval-export")  # each with its own flags


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Flags of the web app plus every vLLM engine flag (``python app.py inspect`` has its own)."""
    from dots3_demo.cli.engine import add_engine_cli_args
    from dots3_demo.engine.flag_cache import asks_for_help_only
    from dots3_demo.serving.defaults import DEFAULT_CLOSED_SESSION_TTL_S

    parser = new_parser(
        prog="app.py",
        description="Dots3 NOTE Studio: a browser demo for vLLM's dots3_note omni model. "
        "Sub-commands: `python app.py inspect FILE... --json` prints what the model sees; "
        "`python app.py smoke [--model DIR]` is a GPU smoke test (engine vs inspector token counts); "
        "`python app.py eval SET.jsonl --out DIR [--sweep NAME=V1,V2,...]` evaluates a set of questions (once per "
        "value of a budget or sampling setting with --sweep; see its --help); "
        "`python app.py eval-compare RUN_A RUN_B` pairs two of its runs; "
        "`python app.py eval-import {videomme,mvbench,longvideobench} ITEMS --out SET.jsonl` makes a set of a "
        "benchmark's items; `python app.py eval-export DIR --inspect LOG.eval` writes a run as inspect-ai's log "
        "(inspect view). "
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
        "--closed-session-ttl", type=seconds, default=DEFAULT_CLOSED_SESSION_TTL_S, metavar="SECONDS",
        help="how long a closed tab's session (its uploads and conversation) is kept, in case the tab "
        "reconnects; then it is dropped whole (the default is Gradio's own hour)",
    )
    studio.add_argument(
        "--inspect-workers", type=count, default=default_workers(), metavar="N",
        help="how many uploads are inspected at once, across all visitors (one visitor's panels inspect side by "
        "side too); the default is one per CPU core this process may use, at most one per "
        f"{WORKER_MEMORY_BYTES // 1024**3} GiB of memory",
    )
    studio.add_argument(
        "--exit-on-engine-stall", action="store_true",
        help="when the in-process engine stops producing tokens (--engine-stall-timeout), exit with status "
        f"{EXIT_ENGINE_STALLED} a few seconds after telling the sessions, so that a supervisor (Kubernetes, "
        "systemd, Docker's restart policy) starts the studio again; without it the studio stays up, says "
        "so and fails /readyz",
    )
    add_limit_arguments(studio)  # --max-file-size, --max-video-seconds, --max-video-resolution, …
    add_engine_cli_args(parser, help_only=asks_for_help_only(list(argv)))  # --help alone: vLLM's flags as recorded
    return parser.parse_args(list(argv))


def arguments(argv: Sequence[str] | None = None) -> list[str]:
    """The command line, after the flags in ``$DOTS3_STUDIO_ARGS`` (for hosts that cannot pass
    arguments, e.g. a Hugging Face Gradio Space: set it as a Space variable). Later flags win."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUB_COMMANDS:  # not the studio's flags
        return argv
    return shlex.split(os.environ.get(ENV_ARGS, "")) + argv
