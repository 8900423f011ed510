"""A library function's own code, run with global names of the studio's choosing.

How the studio changes what a function of vLLM's or Gradio's calls, without copying its source or touching its
module: the twin has the function's code object (so it is the library's code, whatever version is installed) and
a name space of its own in which some names are replaced. ``vllm_compat.video_preprocess_watching`` watches vLLM's
video preprocessing so; ``serving.queue_idle`` makes Gradio's queue wait for its next event so.
"""

from __future__ import annotations

import types
from typing import Any


def same_function(function: Any, scope: dict[str, Any]) -> Any:
    """``function``'s own code with ``scope`` as its global names (defaults and all else as they are)."""
    twin = types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__,
                              function.__closure__)
    twin.__kwdefaults__ = function.__kwdefaults__
    twin.__qualname__, twin.__doc__, twin.__module__ = function.__qualname__, function.__doc__, function.__module__
    return twin
