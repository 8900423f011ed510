"""``python app.py smoke [--model DIR] [engine flags]``: the GPU smoke test's flags and command.

The flags are the smoke test's own (``--max-tokens``, ``--keep-model``, ``--turn-timeout``, ``--mtp``) and
every vLLM engine flag (``cli.engine``); the engine arguments are built as for ``--engine inprocess`` (the
configuration operators run: the studio's CUDA-graph default included, no forced eager mode), with the smoke
test's defaults for the tiny model where they were not given. The test itself (the tiny model, the turns, the
table) is ``dots3_demo.workbench.smoke``. Exit status: 0 = all equal, 1 = a mismatch or a failed turn,
2 = it cannot run here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dots3_demo.workbench.smoke import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TURN_TIMEOUT_S,
    MTP_CONFIG,
    MTP_SPECULATIVE_CONFIG,
    TINY_GPU_MEMORY_UTILIZATION,
    TOOL_MAX_TOKENS,
    default_turns,
    engine_factory,
    exit_status,
    format_table,
    gpu_name,
    gpu_problem,
    start_and_run,
    write_tiny_model,
)

if TYPE_CHECKING:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

def build_parser() -> FlexibleArgumentParser:
    """``app.py smoke``'s flags: its own, then every vLLM engine flag (``cli.engine``)."""
    from dots3_demo.cli.engine import add_engine_cli_args
    from dots3_demo.cli.parser import new_parser, seconds

    parser = new_parser(
        prog="app.py smoke",
        description="GPU smoke test: runs one text, image, audio, video-with-sound and forced tool-call turn, a "
        "prompt over 1,000 tokens twice and 8 requests at once through the studio's in-process vLLM engine, "
        "with the engine configuration `app.py --engine inprocess` uses for the same flags, and compares the "
        "engine's prompt tokens by modality with the inspector's. Without --model it uses a tiny random-weight "
        "dots3_note (load_format=dummy) written to a temp folder. Exit status 0 = all equal, 1 = a mismatch, a "
        "failed turn or a turn over its time limit (the engine hung), 2 = cannot run here (no GPU).",
    )
    group = parser.add_argument_group("smoke test")
    group.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                       help=f"tokens to generate per turn (default {DEFAULT_MAX_TOKENS}; the forced tool call "
                       f"gets at least {TOOL_MAX_TOKENS})")
    group.add_argument("--keep-model", default=None, metavar="DIR",
                       help="without --model: write the tiny model to DIR and keep it (default: a temp folder)")
    group.add_argument("--turn-timeout", type=seconds, default=DEFAULT_TURN_TIMEOUT_S, metavar="SECONDS",
                       help="time limit of each turn; a turn over it fails (the engine hung), naming the turn and "
                       "the engine's configuration, and the command exits 1; 0 = none")
    group.add_argument("--mtp", action="store_true",
                       help="multi-token prediction: the tiny model gets an MTP layer "
                       f"({json.dumps(MTP_CONFIG)}), and unless --speculative-config is given the engine "
                       f"{json.dumps(MTP_SPECULATIVE_CONFIG)}, with vLLM's stats logging on; the table adds the "
                       "acceptance vLLM reports. FP8: --quantization fp8 (vLLM's flag)")
    add_engine_cli_args(parser)
    for action in parser._actions:  # the studio's engine choice does not apply: smoke runs vLLM in-process
        if action.dest in ("engine", "endpoint", "api_key", "remote_model"):
            action.help = argparse.SUPPRESS
    # --model: a local checkpoint folder (also read by the inspector), or none for the tiny model.
    # gpu_memory_utilization / load_format: None = not given (the tiny model then gets its own).
    parser.set_defaults(model=None, gpu_memory_utilization=None, load_format=None)
    return parser


def smoke_engine_args(ns: argparse.Namespace, model_dir: Path, *, tiny: bool) -> AsyncEngineArgs:
    """``AsyncEngineArgs`` from the command line, as ``--engine inprocess`` builds them (Dots defaults:
    no processor cache, media limits, the CUDA-graph mode), with the smoke test's defaults for what was not
    given (the tiny model's load format and memory share; ``--mtp``'s speculative config and stats logging)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    from dots3_demo.cli.engine import engine_args_from_namespace

    values = dict(vars(ns))
    values.update(engine="inprocess", endpoint=None, model=str(model_dir))
    if values.get("load_format") is None:
        values["load_format"] = "dummy" if tiny else AsyncEngineArgs.load_format
    if values.get("gpu_memory_utilization") is None:
        values["gpu_memory_utilization"] = (TINY_GPU_MEMORY_UTILIZATION if tiny
                                            else AsyncEngineArgs.gpu_memory_utilization)
    if values.get("mtp"):
        if not values.get("speculative_config"):
            values["speculative_config"] = dict(MTP_SPECULATIVE_CONFIG)
        values["disable_log_stats"] = False  # vLLM counts the drafts' acceptance only with stats on
    args = engine_args_from_namespace(argparse.Namespace(**values))
    assert args is not None  # --engine inprocess with a --model: always built
    for name in ("load_format", "gpu_memory_utilization"):  # whichever flag set built them
        setattr(args, name, values[name])
    return args


def engine_configuration(args: AsyncEngineArgs) -> str:
    """The engine settings a hang depends on, in one line (the header, and a hung turn's message)."""
    mode = args.compilation_config.cudagraph_mode
    spec = args.speculative_config
    parts = [
        "enforce_eager" if args.enforce_eager else
        f"cudagraph_mode {mode.name if mode is not None else 'vLLM default (FULL_AND_PIECEWISE)'}",
        f"quantization {args.quantization or 'none'}",
        f"speculative {json.dumps(spec, sort_keys=True) if spec else 'none'}",
        f"async_scheduling {'vLLM default' if args.async_scheduling is None else args.async_scheduling}",
        f"max_num_seqs {args.max_num_seqs or 'vLLM default'}",
    ]
    return " · ".join(parts)


def main_smoke(argv: Sequence[str]) -> int:
    """``python app.py smoke``; returns the exit status."""
    from dots3_demo.ffmpeg import wants_help

    argv = list(argv)
    if not wants_help(argv):
        problem = gpu_problem()  # before anything heavy, and before vLLM's flags
        if problem:
            print(f"smoke: cannot run: {problem}", file=sys.stderr)
            return 2
    ns = build_parser().parse_args(argv)
    if ns.endpoint or ns.engine not in (None, "inprocess"):
        print("smoke: runs vLLM in this process; --engine/--endpoint do not apply", file=sys.stderr)
        return 2
    if ns.max_tokens < 2:
        print("smoke: --max-tokens must be at least 2 (tokens/s needs two)", file=sys.stderr)
        return 2

    from dots3_demo.engine.inprocess import InProcessEngine
    from dots3_demo.profiles import ProfileError, load_profile
    from dots3_demo.serving.stopping import stop_engine

    with contextlib.ExitStack() as stack:
        tiny = not ns.model
        if tiny:
            where = Path(ns.keep_model) if ns.keep_model else Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="dots3-smoke-")))
            model_dir = write_tiny_model(where, mtp=ns.mtp)
            what = f"tiny random-weight dots3_note in {model_dir} (load_format=dummy: the words mean nothing)"
        else:
            model_dir = Path(ns.model).expanduser()
            what = str(model_dir)
        try:
            load_profile(model_dir)  # the inspector must read the same folder: fail now, not after loading
        except ProfileError as exc:
            print(f"smoke: --model must be a local checkpoint folder the inspector can read: {exc}", file=sys.stderr)
            return 2
        engine_args = smoke_engine_args(ns, model_dir, tiny=tiny)
        configuration = engine_configuration(engine_args)
        header = [f"smoke: model {what}", f"smoke: on {gpu_name()}", f"smoke: engine configuration: {configuration}"]
        for line in header:
            print(line, file=sys.stderr, flush=True)
        engine = InProcessEngine(engine_args, engine_factory=engine_factory, stall_timeout=ns.engine_stall_timeout)
        try:
            outcome = asyncio.run(start_and_run(engine, model_dir, default_turns(ns.max_tokens), header,
                                                turn_timeout=ns.turn_timeout or None, configuration=configuration))
        finally:
            stop_engine(engine)  # vLLM's processes end here even when the engine hung

    if isinstance(outcome, str):
        print(f"smoke: FAILED — {outcome}", file=sys.stderr)
        return 1
    print(format_table(outcome), flush=True)
    return exit_status(outcome)
