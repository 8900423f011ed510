"""``AsyncEngineArgs`` with the defaults dots3_note needs where vLLM's generic ones are wrong.

``--engine inprocess`` (``dots3_demo.cli.engine``), ``python app.py smoke``, ``python app.py eval`` and
programmatic callers (:func:`make_engine_args`) all go through :func:`apply_dots_defaults`.

The CUDA-graph mode: on a CUDA GPU, vLLM 0.32's default ``cudagraph_mode`` (FULL_AND_PIECEWISE) and
PIECEWISE hang dots3_note once a prompt longer than the largest capture size (256 tokens) has run (the
engine waits forever in ``torch.cuda.synchronize``; README, "GPU: the CUDA-graph mode"). FULL,
FULL_DECODE_ONLY and NONE pass, and vLLM turns FULL into FULL_DECODE_ONLY for this model's
sparse-attention indexer anyway, so the studio asks for FULL_DECODE_ONLY unless the operator chose:
``--compilation-config``/``-cc.cudagraph_mode``, ``--enforce-eager`` or ``-O0`` are kept as given.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any

from dots3_demo.profiles import DEFAULT_MM_LIMITS

if TYPE_CHECKING:
    from vllm.engine.arg_utils import AsyncEngineArgs

logger = logging.getLogger(__name__)

DEFAULT_CUDAGRAPH_MODE = "FULL_DECODE_ONLY"
CUDAGRAPH_NOTE = (
    "cudagraph_mode FULL_DECODE_ONLY (the studio's default on a CUDA GPU): vLLM's own default, FULL_AND_PIECEWISE, "
    "and PIECEWISE hang dots3_note after a prompt longer than 256 tokens. To choose yourself, pass "
    "--compilation-config '{\"cudagraph_mode\": \"...\"}' or --enforce-eager."
)


def on_cuda() -> bool:
    """Whether vLLM runs on a CUDA GPU here (its platform, found through NVML: no CUDA context is made)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cuda())


def operator_chose_cudagraphs(args: AsyncEngineArgs) -> bool:
    """Whether the flags already decide the CUDA-graph mode: ``cudagraph_mode`` given (``--compilation-config``,
    ``-cc.cudagraph_mode``), ``--enforce-eager`` (no graphs), or ``-O0`` (vLLM's level without graphs)."""
    given = args.compilation_config.cudagraph_mode is not None
    return given or bool(args.enforce_eager) or int(args.optimization_level) == 0


def apply_cudagraph_default(args: AsyncEngineArgs, *, cuda: bool) -> bool:
    """Ask for :data:`DEFAULT_CUDAGRAPH_MODE` on a CUDA GPU when the operator did not choose; says so in the
    log. Returns whether it did (elsewhere vLLM's defaults stand: its CPU build has no CUDA graphs)."""
    if not cuda or operator_chose_cudagraphs(args):
        return False
    from vllm.config.compilation import CUDAGraphMode

    # A copy: parsed flags share the parser's one default CompilationConfig (AsyncEngineArgs turns a dict into one).
    args.compilation_config = copy.deepcopy(args.compilation_config)
    args.compilation_config.cudagraph_mode = CUDAGraphMode[DEFAULT_CUDAGRAPH_MODE]
    logger.warning(CUDAGRAPH_NOTE)
    return True


def apply_dots_defaults(args: AsyncEngineArgs, *, limits_given: bool, cuda: bool | None = None) -> AsyncEngineArgs:
    """The defaults dots3_note needs that vLLM's generic defaults get wrong.

    ``cuda``: whether the engine runs on a CUDA GPU (None: ask vLLM's platform, :func:`on_cuda`).
    """
    if not limits_given:
        args.limit_mm_per_prompt = dict(DEFAULT_MM_LIMITS)
    if (args.mm_processor_cache_gb or 0) > 0:
        from dots3_demo.engine.inprocess import MM_CACHE_WARNING

        logger.warning(MM_CACHE_WARNING)
    if args.speculative_config and getattr(args, "per_request_spec_decode_metrics", "none") == "none":
        args.per_request_spec_decode_metrics = "summary"
    apply_cudagraph_default(args, cuda=on_cuda() if cuda is None else cuda)
    return args


def make_engine_args(model: str, **overrides: Any) -> AsyncEngineArgs:
    """Programmatic ``AsyncEngineArgs`` with the Dots defaults (``mm_processor_cache_gb=0``...)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    overrides.setdefault("mm_processor_cache_gb", 0)
    limits_given = "limit_mm_per_prompt" in overrides
    return apply_dots_defaults(AsyncEngineArgs(model=model, **overrides), limits_given=limits_given)
