"""Command-line wiring: ``--engine {none,inprocess,remote}``, ``--endpoint`` and every vLLM
engine flag (``AsyncEngineArgs.add_cli_args``, the same flags as ``vllm serve``).

``--model`` is vLLM's own flag: for the app it names a profile folder or a checkpoint; the
engine is only built with ``--engine inprocess``. ``--engine`` defaults to ``remote`` when
``--endpoint`` is given, else ``none`` (inspection-only). The engine arguments get the Dots
defaults of ``dots3_demo.engine.args``.

vLLM builds its own flags on every host: where it finds no device (the CUDA build without a GPU)
``vllm_compat.engine_flags_platform`` lets its config defaults instantiate. ``python app.py --help``
alone shows the flags recorded by the last build (``engine.flag_cache``): building them costs more
than the rest of ``--help``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from dots3_demo import vllm_compat
from dots3_demo.cli.parser import seconds
from dots3_demo.engine import flag_cache
from dots3_demo.engine.args import apply_dots_defaults
from dots3_demo.engine.protocol import ChatEngine

DEFAULT_STALL_TIMEOUT_S = 120.0  # well above a slow first token (kernels compiling on a GPU: 13 s)

if TYPE_CHECKING:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser


def add_engine_cli_args(parser: FlexibleArgumentParser, *, help_only: bool = False) -> FlexibleArgumentParser:
    """Add ``--engine``, ``--endpoint``, ``--api-key`` and the vLLM engine flags to ``parser``.

    Use a ``FlexibleArgumentParser`` (see ``cli.parser.new_parser``); vLLM's flags rely on it.
    ``help_only``: the parser will only print its help (``flag_cache.asks_for_help_only``), so
    vLLM's flags may come from the record of the last build instead of vLLM's parser.
    """
    group = parser.add_argument_group("Dots3 NOTE Studio engine")
    group.add_argument(
        "--engine",
        choices=["none", "inprocess", "remote"],
        default=None,
        help="none: inspect only; inprocess: run vLLM in this process; remote: an OpenAI-style "
        "server at --endpoint. Default: remote if --endpoint is given, else none.",
    )
    group.add_argument("--endpoint", default=None, help="base URL of a vLLM server, e.g. http://host:8000/v1")
    group.add_argument("--api-key", default=None, help="API key for --endpoint (or OPENAI_API_KEY)")
    group.add_argument("--remote-model", default=None, help="model name on --endpoint (default: the first listed)")
    group.add_argument(
        "--engine-stall-timeout", type=seconds, default=DEFAULT_STALL_TIMEOUT_S, metavar="SECONDS",
        help="in-process: when the engine holds requests and produces nothing for this long (a hung GPU or engine "
        "process), mark it failed, tell every waiting session and fail /readyz; 0 = never",
    )

    if not (help_only and flag_cache.add_cached_engine_flags(parser)):
        add_vllm_engine_args(parser)
    # None = "not given": we default to 0 (see MM_CACHE_WARNING) and warn if the user sets it.
    # vLLM's own --model default names a hub model; ours is the preview profile (no engine).
    parser.set_defaults(mm_processor_cache_gb=None, model=None)
    return parser


def add_vllm_engine_args(parser: FlexibleArgumentParser) -> None:
    """vLLM's own engine flags (``AsyncEngineArgs.add_cli_args``), on any host; recorded for --help."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    mark = flag_cache.Mark(parser)
    with vllm_compat.engine_flags_platform():
        AsyncEngineArgs.add_cli_args(parser)
    flag_cache.record(parser, mark)


def engine_mode(ns: argparse.Namespace) -> str:
    """``none`` / ``inprocess`` / ``remote`` after applying the defaults."""
    if getattr(ns, "engine", None):
        return ns.engine
    return "remote" if getattr(ns, "endpoint", None) else "none"


def engine_args_from_namespace(ns: argparse.Namespace) -> AsyncEngineArgs | None:
    """``AsyncEngineArgs`` for ``--engine inprocess`` (None in other modes).

    Dots defaults (``engine.args.apply_dots_defaults``): ``mm_processor_cache_gb=0`` unless given
    (then a warning), ``limit_mm_per_prompt={"image": 8, "audio": 4, "video": 1}`` unless given, and
    per-request spec-decode metrics (MTP acceptance) when ``--speculative-config`` is set, and on a CUDA GPU
    ``cudagraph_mode`` FULL_DECODE_ONLY unless ``--compilation-config``, ``--enforce-eager`` or ``-O0`` chose.
    """
    if engine_mode(ns) != "inprocess":
        return None
    if not getattr(ns, "model", None):
        raise SystemExit("--engine inprocess needs --model <checkpoint folder or HF id>")
    from vllm.engine.arg_utils import AsyncEngineArgs

    values = dict(vars(ns))
    cache = values.get("mm_processor_cache_gb")
    ns_copy = argparse.Namespace(**values)
    ns_copy.mm_processor_cache_gb = 0 if cache is None else cache
    args = AsyncEngineArgs.from_cli_args(ns_copy)
    return apply_dots_defaults(args, limits_given=values.get("limit_mm_per_prompt") not in (None, {}))


def build_engine(ns: argparse.Namespace, *, on_stall: Callable[[], None] | None = None) -> ChatEngine | None:
    """The ``ChatEngine`` the command line asks for (not started), or None for ``--engine none``.

    ``on_stall``: called when the in-process engine's watchdog finds it stalled (``--engine-stall-timeout``).
    """
    mode = engine_mode(ns)
    if mode == "none":
        return None
    if mode == "remote":
        from dots3_demo.engine.remote import RemoteEngine

        if not getattr(ns, "endpoint", None):
            raise SystemExit("--engine remote needs --endpoint URL")
        return RemoteEngine(ns.endpoint, api_key=getattr(ns, "api_key", None), model=getattr(ns, "remote_model", None),
                            tokenizer_dir=getattr(ns, "model", None))
    from dots3_demo.engine.inprocess import InProcessEngine

    stall = getattr(ns, "engine_stall_timeout", DEFAULT_STALL_TIMEOUT_S)
    return InProcessEngine(engine_args_from_namespace(ns), stall_timeout=stall, on_stall=on_stall)
