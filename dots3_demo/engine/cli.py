"""Command-line wiring: ``--engine {none,inprocess,remote}``, ``--endpoint`` and every vLLM
engine flag (``AsyncEngineArgs.add_cli_args``, the same flags as ``vllm serve``).

``--model`` is vLLM's own flag: for the app it names a profile folder or a checkpoint; the
engine is only built with ``--engine inprocess``. ``--engine`` defaults to ``remote`` when
``--endpoint`` is given, else ``none`` (inspection-only).

vLLM's ``add_cli_args`` instantiates config defaults, and ``DeviceConfig()`` raises "Failed to
infer device type" on a host where vLLM finds no platform (e.g. a CUDA build without a GPU).
There we fall back to a small set of engine flags and say so (``ENGINE_FLAGS_NOTE``); on a GPU
host the full set is available.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from dots3_demo.engine.inprocess import MM_CACHE_WARNING

logger = logging.getLogger(__name__)

DEFAULT_MM_LIMITS = {"image": 8, "audio": 4, "video": 1}
_FULL_FLAGS_ATTR = "_dots3_full_engine_flags"
ENGINE_FLAGS_NOTE = (
    "vLLM cannot infer a device on this host, so only a subset of engine flags is available "
    "(--model, --max-model-len, --tensor-parallel-size, --limit-mm-per-prompt, "
    "--speculative-config, --mm-processor-cache-gb, --max-num-seqs, "
    "--gpu-memory-utilization, --served-model-name)."
)


def new_parser(**kwargs: Any) -> argparse.ArgumentParser:
    """vLLM's ``FlexibleArgumentParser`` (accepts ``--flag=value``, ``--json-arg.key`` etc.)."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return FlexibleArgumentParser(**kwargs)


def add_engine_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--engine``, ``--endpoint``, ``--api-key`` and the vLLM engine flags to ``parser``.

    Use a ``FlexibleArgumentParser`` (see :func:`new_parser`); vLLM's flags rely on it.
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

    from vllm.engine.arg_utils import AsyncEngineArgs

    try:
        AsyncEngineArgs.add_cli_args(new_parser(add_help=False))  # probe on a throwaway parser
    except RuntimeError as exc:
        logger.warning("vLLM engine flags limited: %s", exc)
        _add_fallback_engine_args(parser)
        parser.set_defaults(**{_FULL_FLAGS_ATTR: False})
    else:
        AsyncEngineArgs.add_cli_args(parser)
        parser.set_defaults(**{_FULL_FLAGS_ATTR: True})
    # None = "not given": we default to 0 (see MM_CACHE_WARNING) and warn if the user sets it.
    parser.set_defaults(mm_processor_cache_gb=None)
    return parser


def _add_fallback_engine_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("vLLM engine (subset; " + ENGINE_FLAGS_NOTE + ")")
    group.add_argument("--model", default=None)
    group.add_argument("--max-model-len", type=int, default=None)
    group.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    group.add_argument("--limit-mm-per-prompt", type=json.loads, default=None)
    group.add_argument("--speculative-config", type=json.loads, default=None)
    group.add_argument("--mm-processor-cache-gb", type=float, default=None)
    group.add_argument("--max-num-seqs", type=int, default=None)
    group.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    group.add_argument("--served-model-name", nargs="+", default=None)


def engine_mode(ns: argparse.Namespace) -> str:
    """``none`` / ``inprocess`` / ``remote`` after applying the defaults."""
    if getattr(ns, "engine", None):
        return ns.engine
    return "remote" if getattr(ns, "endpoint", None) else "none"


def engine_args_from_namespace(ns: argparse.Namespace) -> Any | None:
    """``AsyncEngineArgs`` for ``--engine inprocess`` (None in other modes).

    Dots defaults: ``mm_processor_cache_gb=0`` unless given (then a warning),
    ``limit_mm_per_prompt={"image": 8, "audio": 4, "video": 1}`` unless given, and per-request
    spec-decode metrics (MTP acceptance) when ``--speculative-config`` is set.
    """
    if engine_mode(ns) != "inprocess":
        return None
    if not getattr(ns, "model", None):
        raise SystemExit("--engine inprocess needs --model <checkpoint folder or HF id>")
    from vllm.engine.arg_utils import AsyncEngineArgs

    values = dict(vars(ns))
    if getattr(ns, _FULL_FLAGS_ATTR, False):
        cache = values.get("mm_processor_cache_gb")
        ns_copy = argparse.Namespace(**values)
        ns_copy.mm_processor_cache_gb = 0 if cache is None else cache
        args = AsyncEngineArgs.from_cli_args(ns_copy)
    else:
        fields = {
            "model", "max_model_len", "tensor_parallel_size", "limit_mm_per_prompt",
            "speculative_config", "mm_processor_cache_gb", "max_num_seqs",
            "gpu_memory_utilization", "served_model_name",
        }
        kwargs = {k: v for k, v in values.items() if k in fields and v is not None}
        kwargs.setdefault("mm_processor_cache_gb", 0)
        args = AsyncEngineArgs(**kwargs)
    return apply_dots_defaults(args, limits_given=values.get("limit_mm_per_prompt") not in (None, {}))


def apply_dots_defaults(args: Any, *, limits_given: bool) -> Any:
    """The defaults dots3_note needs that vLLM's generic defaults get wrong."""
    if not limits_given:
        args.limit_mm_per_prompt = dict(DEFAULT_MM_LIMITS)
    if (args.mm_processor_cache_gb or 0) > 0:
        logger.warning(MM_CACHE_WARNING)
    if args.speculative_config and getattr(args, "per_request_spec_decode_metrics", "none") == "none":
        args.per_request_spec_decode_metrics = "summary"
    return args


def make_engine_args(model: str, **overrides: Any) -> Any:
    """Programmatic ``AsyncEngineArgs`` with the Dots defaults (``mm_processor_cache_gb=0``...)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    overrides.setdefault("mm_processor_cache_gb", 0)
    limits_given = "limit_mm_per_prompt" in overrides
    return apply_dots_defaults(AsyncEngineArgs(model=model, **overrides), limits_given=limits_given)


def build_engine(ns: argparse.Namespace) -> Any | None:
    """The ``ChatEngine`` the command line asks for (not started), or None for ``--engine none``."""
    mode = engine_mode(ns)
    if mode == "none":
        return None
    if mode == "remote":
        from dots3_demo.engine.remote import RemoteEngine

        if not getattr(ns, "endpoint", None):
            raise SystemExit("--engine remote needs --endpoint URL")
        return RemoteEngine(ns.endpoint, api_key=getattr(ns, "api_key", None), model=getattr(ns, "remote_model", None))
    from dots3_demo.engine.inprocess import InProcessEngine

    return InProcessEngine(engine_args_from_namespace(ns))
