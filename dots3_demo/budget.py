"""The video budget: one type from the Budget tab to vLLM's per-request ``mm_processor_kwargs``.

The inspector plans a video with it (``inspect_file``), the chat sends it with each turn
(``TurnRequest.video``), and both engine adapters turn it into ``mm_processor_kwargs`` with
:meth:`VideoSettings.mm_processor_kwargs` — the in-process engine through ``prompt_extras``, a
server in the request body. Nothing here imports vLLM or Gradio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dots3_demo.errors import InspectionError

K_MODES = ("eval_ek", "eval30", "whole", "logk")
DEFAULT_SEQ = 32768


@dataclass(frozen=True)
class VideoSettings:
    """The per-request ``mm_processor_kwargs`` that steer vLLM's video budget."""

    seq: int = DEFAULT_SEQ
    output_reserve: int | None = None  # None: vLLM's default, seq // 4
    max_new_tokens: int = 0
    audio_cap: float = 1.0
    k_mode: str = "eval_ek"
    question: str = ""  # seeds the ``logk`` grouping only
    problem: str = ""  # set by a UI whose controls held no usable number: ``validate`` raises it

    @property
    def configured_reserve(self) -> int:
        return self.seq // 4 if self.output_reserve is None else self.output_reserve

    @property
    def effective_reserve(self) -> int:
        return max(self.configured_reserve, self.max_new_tokens)

    def validate(self) -> None:
        """Raise ``InspectionError`` for settings vLLM would reject, in plain words."""
        if self.problem:
            raise InspectionError(self.problem)
        if self.seq <= 0:
            raise InspectionError(f"seq must be positive, got {self.seq}")
        if self.output_reserve is not None and self.output_reserve < 0:
            raise InspectionError(f"output reserve must be ≥ 0, got {self.output_reserve}")
        if self.max_new_tokens < 0:
            raise InspectionError(f"max new tokens must be ≥ 0, got {self.max_new_tokens}")
        if self.effective_reserve >= self.seq:
            raise InspectionError(
                f"output reserve {self.effective_reserve} (max of reserve and max new tokens) "
                f"leaves no room for the video in seq {self.seq}"
            )
        if not math.isfinite(self.audio_cap) or self.audio_cap < 0:
            raise InspectionError(f"audio cap must be ≥ 0, got {self.audio_cap}")
        if self.k_mode not in K_MODES:
            raise InspectionError(f"k_mode must be one of {', '.join(K_MODES)}, got {self.k_mode!r}")

    def mm_processor_kwargs(self, *, max_new_tokens: int | None = None) -> dict[str, Any]:
        """These settings as vLLM's per-request ``mm_processor_kwargs`` (what the engine and a server
        get); ``max_new_tokens``: the request's max tokens, in place of the Budget tab's mirror of it."""
        kwargs: dict[str, Any] = {
            "seq": self.seq,
            "max_new_tokens": self.max_new_tokens if max_new_tokens is None else int(max_new_tokens),
            "audio_cap": self.audio_cap,
            "k_mode": self.k_mode,
        }
        if self.output_reserve is not None:
            kwargs["output_reserve"] = self.output_reserve
        if self.question:
            kwargs["video_question"] = self.question
        return kwargs
