"""An evaluation set (``SET.jsonl``, one JSON object per line) read into typed items.

Each line becomes an :class:`EvalItem`, or a :class:`SetLineError` saying in one line why it cannot run (not
JSON, a missing or unknown key, a value of the wrong type, a budget vLLM would refuse, a sampling value vLLM's
``SamplingParams`` refuses, a tools list the studio's tools parser refuses, an id used before). A bad line
never stops the others. Blank lines are skipped.

An id belongs to the first line that names it (whether that line can run or not): a later line with the same
id is an error *without* an id (its ``key`` is its line, ``"line 3"``), so two lines never share a result.
An unknown key stays an error (a misspelt ``expect`` would otherwise drop the checks without a word); free
words about an item go in ``tags``.

Keys of a line::

    id              string, unique in the set
    media           list of paths, relative to the set file's folder ([] for a text-only question)
    prompt          string: the user's message
    system          string (optional; default the chat's system prompt, "" = none)
    expect          list of strings the answer must contain, case-insensitive (optional)
    seq, output_reserve, max_new_tokens, audio_cap, k_mode
                    the video budget (optional; the command line's defaults otherwise)
    sampling        object of vLLM sampling parameters (optional): temperature, top_p, top_k, max_tokens,
                    seed, repetition_penalty, structured_outputs ({"choice": [strings]}: the reply is one of
                    them, forced by vLLM's structured outputs)
    tools           list of OpenAI function schemas (optional)
    tags            list of strings (optional): free-form labels, carried into the results and the report; the
                    summary gives the accuracy per tag
    score           the item's scorer (optional): a name (contains, exact, regex, choice, number, tool_call,
                    judge) or an object {"kind": …, options} (``workbench.scoring``); default the set's, else
                    contains when the item has expect strings
    target          what the scorer compares with (a letter for choice, a number for number, a pattern for
                    regex, {"name", "arguments"} for tool_call, the reference answer for judge)
    metadata        object of fields (strings, numbers, booleans) such as duration or task_type: carried into
                    the results; the summary gives the accuracy per value of each field

The set's first line may be its header instead of an item: ``{"set": {"score": …, "cluster": KEY}}``: the
scorer of items that name none (an object's options, e.g. a judge's endpoint, model and rubric, are the
defaults of items that name the same kind) and the key the intervals are clustered by: a metadata field (the
video's id), or ``media`` (the item's media files).

The engine plans a video for the reply's max tokens (``TurnRequest.mm_processor_kwargs``), so
``max_new_tokens`` and ``sampling.max_tokens`` are one number: give either (both only if equal).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dots3_demo.budget import K_MODES, VideoSettings
from dots3_demo.engine.protocol import SamplingSettings, StructuredOutputs
from dots3_demo.errors import InspectionError
from dots3_demo.inspection.errors import one_line
from dots3_demo.tools import ToolSchemaError, validate_tools
from dots3_demo.tools.schemas import json_type
from dots3_demo.workbench.scoring import Scorer, ScorerProblem, parse_scorer

REQUIRED_KEYS = ("id", "media", "prompt")
BUDGET_KEYS = ("seq", "output_reserve", "max_new_tokens", "audio_cap", "k_mode")
KEYS = (*REQUIRED_KEYS, "system", "expect", *BUDGET_KEYS, "sampling", "tools", "tags", "score", "target",
        "metadata")
HEADER_KEYS = ("score", "cluster")
MEDIA_CLUSTER = "media"
SAMPLING_KEYS = tuple(f.name for f in dataclasses.fields(SamplingSettings))


@dataclass(frozen=True)
class EvalItem:
    """One question of the set, ready to plan and send.

    ``files`` are the media paths as opened and shown in the plan: the set file's folder joined to each
    entry of ``media`` (normalised). ``video`` is the budget the inspector plans with and the engine gets;
    its ``max_new_tokens`` is ``sampling.max_tokens``.
    """

    id: str
    line: int
    media: tuple[str, ...]
    files: tuple[str, ...]
    prompt: str
    video: VideoSettings
    sampling: SamplingSettings
    system: str | None = None  # None: the chat's system prompt
    expect: tuple[str, ...] = ()
    tools: tuple[dict[str, Any], ...] = field(default=(), compare=False)  # OpenAI function tools, validated
    tags: tuple[str, ...] = ()
    scorer: Scorer | None = None  # None: nothing to score (no expect, no score)
    metadata: tuple[tuple[str, str], ...] = ()  # the set's fields of the item, values as text
    cluster: str | None = None  # the item's value of the set's cluster key (None: a cluster of its own)

    @property
    def key(self) -> str:
        """What the item's result is known by: its id (unique in the set)."""
        return self.id


@dataclass(frozen=True)
class SetLineError:
    """A line that cannot run: ``id`` when the line named one first in the set, ``error`` in one line."""

    line: int
    error: str
    id: str | None = None
    expect: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Its id, or (no id of its own: unreadable, or a duplicate id) its line: ``"line 3"``."""
        return self.id if self.id is not None else line_key(self.line)


SetEntry = EvalItem | SetLineError


def line_key(line: int) -> str:
    """The key of a result that has no id of its own."""
    return f"line {line}"


@dataclass(frozen=True)
class Forced:
    """A setting every item takes in place of its own: one value of a sweep (``app.py eval --sweep``). ``name`` is a
    budget key (:data:`BUDGET_KEYS`) or a sampling key, ``value`` what an item's line would give for it."""

    name: str
    value: int | float | str


@dataclass(frozen=True)
class SetDefaults:
    """The budget of items that give none of their own (from the command line); ``forced``: a setting that replaces
    the item's own too (a sweep's value)."""

    seq: int
    output_reserve: int | None = None
    audio_cap: float = 1.0
    k_mode: str = "eval_ek"
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    forced: Forced | None = None


@dataclass(frozen=True)
class SetHeader:
    """The set's first line, when it is ``{"set": {...}}``: the scorer of items that name none (its JSON
    object, checked per item) and the cluster key."""

    score: Any = None
    cluster: str | None = None


class _LineProblem(ValueError):
    """Why one line cannot run (its message is the item's ``error``)."""


def read_set(path: Path, defaults: SetDefaults) -> tuple[SetEntry, ...]:
    """Every non-blank line of ``path`` as an item or an error, in the file's order.

    Raises ``OSError`` when the file itself cannot be read (the command says so and stops).
    """
    return read_set_with_header(path, defaults)[1]


def read_set_with_header(path: Path, defaults: SetDefaults) -> tuple[SetHeader, tuple[SetEntry, ...]]:
    """The set's header (an empty one when its first line is an item) and its entries (:func:`read_set`).
    A header that cannot be read is its line's error, and the items run without it."""
    folder = os.path.dirname(str(path))
    entries: list[SetEntry] = []
    seen: dict[str, int] = {}
    header = SetHeader()
    first = True
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            if _is_header(text):
                if first:
                    try:
                        header = parse_header(text)
                    except _LineProblem as exc:
                        entries.append(SetLineError(number, f"the set's header: {exc}"))
                else:
                    entries.append(SetLineError(number, "a set header ({\"set\": …}) must be the set's first line"))
                first = False
                continue
            first = False
            entry = parse_line(text, number, folder, defaults, header)
            if entry.id is not None and entry.id in seen:
                problem = f"duplicate id {entry.id!r} (first on line {seen[entry.id]})"
                if isinstance(entry, SetLineError):
                    problem = f"{problem}; {entry.error}"
                entry = SetLineError(number, problem, expect=entry.expect, tags=entry.tags)  # keyed by its line
            elif entry.id is not None:
                seen[entry.id] = number
            entries.append(entry)
    return header, tuple(entries)


def _is_header(text: str) -> bool:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "set" in data and "id" not in data


def parse_header(text: str) -> SetHeader:
    """The set's header line ``{"set": {"score": …, "cluster": KEY}}``."""
    data = json.loads(text, parse_constant=_reject_constant)
    extra = [key for key in data if key != "set"]
    body = data["set"]
    if extra or not isinstance(body, dict):
        raise _LineProblem('must be {"set": {"score": …, "cluster": KEY}}')
    unknown = [key for key in body if key not in HEADER_KEYS]
    if unknown:
        raise _LineProblem(f"unknown key(s) {', '.join(map(repr, unknown))} (known: {', '.join(HEADER_KEYS)})")
    cluster = body.get("cluster")
    if cluster is not None and (not isinstance(cluster, str) or not cluster):
        raise _LineProblem(f"cluster must be a metadata field's name or {MEDIA_CLUSTER!r}, got {_shown(cluster)}")
    score = body.get("score")
    if score is not None:
        try:
            parse_scorer(score, _ANY_TARGET.get(score if isinstance(score, str) else score.get("kind")
                                                 if isinstance(score, dict) else None), ())
        except ScorerProblem as exc:
            if "target" not in str(exc) and "expect" not in str(exc):
                raise _LineProblem(f"score: {exc}") from None
    return SetHeader(score=score, cluster=cluster)


# a stand-in target per kind, to check a header's scorer options before any item gives its target
_ANY_TARGET: dict[Any, Any] = {"contains": ["x"], "exact": "x", "regex": "x", "choice": "A", "number": 0,
                               "tool_call": {"name": "x"}}


def parse_line(text: str, number: int, folder: str, defaults: SetDefaults,
               header: SetHeader | None = None) -> SetEntry:
    """One line of the set as an item, or the error that keeps it from running."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except _LineProblem as exc:
        return SetLineError(number, str(exc))
    except (ValueError, RecursionError) as exc:
        return SetLineError(number, f"not a JSON object: {one_line(exc)}")
    if not isinstance(data, dict):
        return SetLineError(number, f"not a JSON object: a JSON {json_type(data)}")
    item_id = data.get("id") if isinstance(data.get("id"), str) and data.get("id") else None
    expect: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    try:
        expect = _strings(data, "expect")
        tags = _strings(data, "tags")
        return _item(data, number, folder, defaults, expect, tags, header or SetHeader())
    except _LineProblem as exc:
        return SetLineError(number, str(exc), id=item_id, expect=expect, tags=tags)


def _item(data: dict[str, Any], number: int, folder: str, defaults: SetDefaults,
          expect: tuple[str, ...], tags: tuple[str, ...], header: SetHeader) -> EvalItem:
    unknown = [key for key in data if key not in KEYS]
    if unknown:
        raise _LineProblem(f"unknown key(s) {', '.join(map(repr, unknown))} (known: {', '.join(KEYS)}; free-form "
                           "labels go in tags)")
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing:
        raise _LineProblem(f"missing key(s) {', '.join(map(repr, missing))}")
    data = with_forced(data, defaults.forced)
    item_id = data["id"]
    if not isinstance(item_id, str) or not item_id:
        raise _LineProblem(f"id must be a non-empty string, got {_shown(item_id)}")
    prompt = data["prompt"]
    if not isinstance(prompt, str):
        raise _LineProblem(f"prompt must be a string, got {_shown(prompt)}")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise _LineProblem(f"system must be a string, got {_shown(system)}")
    media = _strings(data, "media")
    if any(not entry for entry in media):
        raise _LineProblem("media holds an empty path")
    files = tuple(os.path.normpath(os.path.join(folder, entry)) for entry in media)
    sampling = _sampling(data, defaults.sampling)
    video = _video(data, defaults, sampling)
    if video.max_new_tokens != sampling.max_tokens:
        sampling = dataclasses.replace(sampling, max_tokens=video.max_new_tokens)
    _check_with_vllm(sampling)
    tools = _tools(data)
    metadata = _metadata(data)
    scorer = _scorer(data, expect, header)
    cluster = None
    if header.cluster == MEDIA_CLUSTER and "media" not in dict(metadata):
        cluster = "\n".join(media) or None
    elif header.cluster is not None:
        cluster = dict(metadata).get(header.cluster)
    return EvalItem(id=item_id, line=number, media=media, files=files, prompt=prompt, video=video,
                    sampling=sampling, system=system, expect=expect, tools=tools, tags=tags, scorer=scorer,
                    metadata=metadata, cluster=cluster)


def with_forced(data: dict[str, Any], forced: Forced | None) -> dict[str, Any]:
    """The line's keys with ``forced`` in place of the item's own value, checked as if the line gave it: a budget key
    at the top (``max_new_tokens`` also replaces a ``sampling.max_tokens``: one number), a sampling key in
    ``sampling``."""
    if forced is None:
        return data
    sampling = data.get("sampling", {})
    if forced.name in BUDGET_KEYS:
        data = {**data, forced.name: forced.value}
        if forced.name == "max_new_tokens" and isinstance(sampling, dict) and "max_tokens" in sampling:
            data["sampling"] = {**sampling, "max_tokens": forced.value}
        return data
    if not isinstance(sampling, dict):
        return data  # the line's own error
    return {**data, "sampling": {**sampling, forced.name: forced.value}}


def forced_problem(forced: Forced) -> str | None:
    """Why no item can take ``forced`` whatever its own settings, in one line (the budget's checks, vLLM's
    ``SamplingParams``); None: it may run. A value refused only with an item's own settings (a seq below the item's
    max_new_tokens) is that item's error."""
    given: dict[str, Any] = {forced.name: forced.value}
    try:
        if forced.name in BUDGET_KEYS:
            loose = VideoSettings(seq=2**62, output_reserve=0)  # no other setting in the way of the one given
            video = dataclasses.replace(loose, **given)
            video.validate()
            if forced.name == "max_new_tokens":
                _check_with_vllm(SamplingSettings(max_tokens=video.max_new_tokens))
        else:
            _check_with_vllm(dataclasses.replace(SamplingSettings(), **given))
    except InspectionError as exc:
        return f"budget: {exc}"
    except _LineProblem as exc:
        return str(exc)
    return None


def _metadata(data: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    given = data.get("metadata", {})
    if not isinstance(given, dict):
        raise _LineProblem(f"metadata must be an object of fields, got {_shown(given)}")
    fields: list[tuple[str, str]] = []
    for key, value in given.items():
        if not key or isinstance(value, (dict, list)) or value is None:
            raise _LineProblem(f"metadata.{key or '(empty name)'} must be a string, number or boolean, got "
                               f"{_shown(value)}")
        fields.append((key, value if isinstance(value, str) else json.dumps(value)))
    return tuple(fields)


def _scorer(data: dict[str, Any], expect: tuple[str, ...], header: SetHeader) -> Scorer | None:
    given = data.get("score")
    target = data.get("target")
    defaults = header.score if isinstance(header.score, dict) else None
    if given is None and header.score is not None and not (expect and target is None):
        given = header.score if isinstance(header.score, str) else header.score.get("kind")
    if given is None and target is None and not expect:
        return None
    try:
        return parse_scorer(given, target, expect, defaults)
    except ScorerProblem as exc:
        raise _LineProblem(f"score: {exc}") from None


def _sampling(data: dict[str, Any], base: SamplingSettings) -> SamplingSettings:
    given = data.get("sampling", {})
    if not isinstance(given, dict):
        raise _LineProblem(f"sampling must be an object, got {_shown(given)}")
    unknown = [key for key in given if key not in SAMPLING_KEYS]
    if unknown:
        raise _LineProblem(f"unknown sampling key(s) {', '.join(map(repr, unknown))} "
                           f"(known: {', '.join(SAMPLING_KEYS)})")
    values: dict[str, Any] = {}
    for key, value in given.items():
        if key == "structured_outputs":
            values[key] = _structured_outputs(value)
        elif key == "seed" and value is None:
            values[key] = None
        elif key in ("top_k", "max_tokens", "seed"):
            values[key] = _integer(value, f"sampling.{key}")
        else:
            values[key] = _number(value, f"sampling.{key}")
    return dataclasses.replace(base, **values)


def _structured_outputs(value: Any) -> StructuredOutputs | None:
    """``sampling.structured_outputs`` as vLLM's request field spells it; ``choice`` is the kind taken here."""
    if value is None:
        return None
    if not isinstance(value, dict) or list(value) != ["choice"]:
        raise _LineProblem('sampling.structured_outputs must be {"choice": [strings]} (the reply is one of them), '
                           f"got {_shown(value)}")
    choice = value["choice"]
    if not isinstance(choice, list) or not choice or not all(isinstance(c, str) and c for c in choice):
        raise _LineProblem("sampling.structured_outputs.choice must be a list of non-empty strings, got "
                           f"{_shown(choice)}")
    return StructuredOutputs(tuple(choice))


def _video(data: dict[str, Any], defaults: SetDefaults, sampling: SamplingSettings) -> VideoSettings:
    max_tokens = sampling.max_tokens
    if "max_new_tokens" in data:
        max_new = _integer(data["max_new_tokens"], "max_new_tokens")
        given = data.get("sampling", {})
        if "max_tokens" in given and given["max_tokens"] != max_new:
            raise _LineProblem(f"max_new_tokens {max_new} and sampling.max_tokens {given['max_tokens']} differ: the "
                               "engine plans the video for the reply's max tokens; give one of them")
        max_tokens = max_new
    reserve = data.get("output_reserve", defaults.output_reserve)
    k_mode = data.get("k_mode", defaults.k_mode)
    if not isinstance(k_mode, str):
        raise _LineProblem(f"k_mode must be one of {', '.join(K_MODES)}, got {_shown(k_mode)}")
    settings = VideoSettings(
        seq=_integer(data["seq"], "seq") if "seq" in data else defaults.seq,
        output_reserve=None if reserve is None else _integer(reserve, "output_reserve"),
        max_new_tokens=max_tokens,
        audio_cap=_number(data["audio_cap"], "audio_cap") if "audio_cap" in data else defaults.audio_cap,
        k_mode=k_mode,
    )
    try:
        settings.validate()
    except InspectionError as exc:
        raise _LineProblem(f"budget: {exc}") from None
    return settings


def _check_with_vllm(sampling: SamplingSettings) -> None:
    """vLLM's own ``SamplingParams`` checks the values (a negative temperature, top_p of 2, …)."""
    from dots3_demo.core.turns import build_turn
    from dots3_demo.engine.inprocess import build_sampling_params, refusal_types

    refused: tuple[type[BaseException], ...] = (*refusal_types(), TypeError)
    try:
        build_sampling_params(build_turn(session_id="eval-check", sampling=sampling))
    except refused as exc:
        raise _LineProblem(f"sampling: vLLM refuses it: {one_line(exc)}") from None


def _tools(data: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    if "tools" not in data:
        return ()
    try:
        return tuple(validate_tools(data["tools"]))
    except ToolSchemaError as exc:
        raise _LineProblem(f"tools: {exc}") from None


def _strings(data: dict[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _LineProblem(f"{key} must be a list of strings, got {_shown(value)}")
    return tuple(value)


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _LineProblem(f"{name} must be a whole number, got {_shown(value)}")
    return value


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _LineProblem(f"{name} must be a number, got {_shown(value)}")
    return float(value)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return f"{json_type(value)} {text if len(text) <= 40 else text[:39] + '…'}"


def _reject_constant(name: str) -> Any:
    raise _LineProblem(f"not a JSON object: {name} is not JSON")
