"""Controls read as settings (no Gradio): the numbers a page, an API call or a column of compare sends, turned
into the typed settings a turn is built with. Never raises: a value that is not a usable number (an emptied box,
``null`` or NaN from an API call) is named in the settings' ``problem``, and the event is refused with it.

* :func:`video_settings_from_controls` — the Budget tab's controls (and a compare column's) → ``VideoSettings``;
* :func:`chat_settings_from_controls` — the chat's sampling, system prompt and tools → :class:`ChatSettings`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dots3_demo.core.pacing import MIN_INTERVAL_S, StreamPacer
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.inspection.video import K_MODES, VideoSettings
from dots3_demo.tools.forcing import TOOL_CHOICES


def control_number(value: Any, label: str, default: float, problems: list[str]) -> float:
    """``value`` as a finite float; otherwise note what is wrong with ``label`` and return ``default``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if math.isfinite(number):
        return number
    problems.append(f"{label} is empty" if value is None or value == "" else f"{label} is not a number ({value})")
    return default


def video_settings_from_controls(
    seq: float, reserve_auto: bool, reserve: float, max_new_tokens: float | str | None, audio_cap: float, k_mode: str
) -> VideoSettings:
    """The Budget tab's controls as vLLM's per-request video settings (validated later, by
    ``VideoSettings.validate``). Never raises: a value that is not a number (an API call can send
    ``null`` or NaN) gives settings whose ``problem`` names it, so the event is refused with that."""
    problems: list[str] = []
    defaults = VideoSettings()
    seq_value = control_number(seq, "seq", defaults.seq, problems)
    reserve_value = None if reserve_auto else control_number(reserve, "output reserve", 0, problems)
    max_new = 0 if max_new_tokens is None or max_new_tokens == "" else control_number(
        max_new_tokens, "max new tokens", 0, problems)
    return VideoSettings(
        seq=int(seq_value),
        output_reserve=None if reserve_value is None else int(reserve_value),
        max_new_tokens=int(max_new),
        audio_cap=control_number(audio_cap, "audio cap", defaults.audio_cap, problems),
        k_mode=str(k_mode) if k_mode else K_MODES[0],
        problem=f"Budget controls not usable: {'; '.join(problems)}" if problems else "",
    )


@dataclass(frozen=True)
class ChatSettings:
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    tools_json: str = ""
    min_interval_s: float = MIN_INTERVAL_S  # without a pacer
    problem: str = ""  # a control that is not a usable number: every turn is refused with this message
    pacer: StreamPacer | None = None  # the app's: update intervals shared among the replies in flight
    tool_choice: str = "auto"  # "required": the reply is one call of the tools, forced by structured outputs


SLIDER_LABELS = {"temperature": "temperature", "top_p": "top-p", "repetition_penalty": "repetition penalty"}


def chat_settings_from_controls(system_prompt: str | None, tools_json: str | None, temperature: float, top_p: float,
                                top_k: float | str | None, max_tokens: float, seed: float | str | None,
                                repetition_penalty: float, tool_choice: str | None = "auto", *,
                                min_interval_s: float = MIN_INTERVAL_S,
                                bounds: Mapping[str, tuple[float, float]] | None = None) -> ChatSettings:
    """The chat's controls as settings. ``seed`` < 0 or empty = random; ``top_k`` ≤ 0 or empty = off.

    Never raises: an emptied number box or a value that is not a number (an API call can send
    ``null`` or NaN) gives settings whose ``problem`` says which control, and the turn is refused; so does a
    slider's value past its ends, given as ``bounds`` (by parameter name: ``SLIDER_LABELS``' keys).
    """
    problems: list[str] = []
    seed_number = None if seed is None or seed == "" else control_number(seed, "seed", -1, problems)
    top_k_number = 0 if top_k is None or top_k == "" else control_number(top_k, "top-k", 0, problems)
    sampling = SamplingSettings(
        temperature=control_number(temperature, SLIDER_LABELS["temperature"], 0.7, problems),
        top_p=control_number(top_p, SLIDER_LABELS["top_p"], 0.95, problems),
        top_k=int(top_k_number) if top_k_number > 0 else -1,
        max_tokens=max(1, int(control_number(max_tokens, "max tokens", 1024, problems))),
        seed=None if seed_number is None or seed_number < 0 else int(seed_number),
        repetition_penalty=control_number(repetition_penalty, SLIDER_LABELS["repetition_penalty"], 1.0, problems),
    )
    for name, (low, high) in (bounds or {}).items():
        if not low <= (value := getattr(sampling, name)) <= high:
            problems.append(f"{SLIDER_LABELS[name]} is {value:g}, outside {low:g}–{high:g}")
    problem = f"Check the Sampling panel: {'; '.join(problems)}." if problems else ""
    choice = tool_choice if tool_choice in TOOL_CHOICES else "auto"
    return ChatSettings(system_prompt=system_prompt or "", tools_json=tools_json or "", sampling=sampling,
                        min_interval_s=min_interval_s, problem=problem, tool_choice=choice)
