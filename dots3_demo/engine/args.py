"""``AsyncEngineArgs`` with the defaults dots3_note needs where vLLM's generic ones are wrong.

``--engine inprocess`` (``dots3_demo.cli.engine``), ``python app.py smoke`` and programmatic
callers (:func:`make_engine_args`) all go through :func:`apply_dots_defaults`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dots3_demo.profiles import DEFAULT_MM_LIMITS

if TYPE_CHECKING:
    from vllm.engine.arg_utils import AsyncEngineArgs

logger = logging.getLogger(__name__)


def apply_dots_defaults(args: AsyncEngineArgs, *, limits_given: bool) -> AsyncEngineArgs:
    """The defaults dots3_note needs that vLLM's generic defaults get wrong."""
    if not limits_given:
        args.limit_mm_per_prompt = dict(DEFAULT_MM_LIMITS)
    if (args.mm_processor_cache_gb or 0) > 0:
        from dots3_demo.engine.inprocess import MM_CACHE_WARNING

        logger.warning(MM_CACHE_WARNING)
    if args.speculative_config and getattr(args, "per_request_spec_decode_metrics", "none") == "none":
        args.per_request_spec_decode_metrics = "summary"
    return args


def make_engine_args(model: str, **overrides: Any) -> AsyncEngineArgs:
    """Programmatic ``AsyncEngineArgs`` with the Dots defaults (``mm_processor_cache_gb=0``...)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    overrides.setdefault("mm_processor_cache_gb", 0)
    limits_given = "limit_mm_per_prompt" in overrides
    return apply_dots_defaults(AsyncEngineArgs(model=model, **overrides), limits_given=limits_given)
