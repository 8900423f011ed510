"""How an answer is scored (``app.py eval``): a :class:`Scorer` read from the set, a :class:`Score` per item.

Each scorer gives a value in [0, 1] and the reason in words:

- ``contains``: every string (the item's ``expect``, or the scorer's ``target`` list) is in the reply's text or
  its tool calls, case-insensitively (1 all found, 0 else);
- ``exact``: the reply's text equals the target, ignoring surrounding white space, a final full stop and case;
- ``regex``: Python's ``re.search`` of the target pattern finds a match in the reply's text;
- ``choice``: the option letter of the reply, read as the benchmarks' own parsers read it (lmms-eval's
  Video-MME ``extract_characters_regex``): answer prefixes such as "The answer is" or "Answer:" are stripped,
  then the first option letter A–E standing alone (not inside a word: "(B)", "B.", "B") is the choice; a reply
  that is one lower-case letter ("b") counts as that letter. A reply with no letter is wrong and marked
  ``unparsed``;
- ``number``: the first number of the reply (after the answer prefixes) is within ``tolerance`` of the target;
- ``tool_call``: a tool call of the reply (``tools.calls.ToolCall``, as vLLM's ``DotsToolParser`` parsed it)
  has the target's name and, when the target gives them, arguments equal to the target's as JSON objects
  (the order of keys does not matter);
- ``judge``: an LLM judge through an OpenAI-compatible endpoint grades the reply with a rubric
  (``workbench.judge``); its prompt and verdict are kept in the score.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dots3_demo.tools.calls import ToolCall

SCORER_KINDS = ("contains", "exact", "regex", "choice", "number", "tool_call", "judge")
LETTERS = "ABCDE"
# the prefixes lmms-eval's Video-MME parser strips before it looks for the letter (lmms_eval/tasks/videomme/utils.py)
ANSWER_PREFIXES = (
    "The best answer is", "The correct answer is", "The answer is", "The answer", "The best option is",
    "The correct option is", "Best answer:", "Best option:", "Answer:", "Option:", "The correct answer",
    "The correct option",
)
_PREFIX = re.compile("|".join(re.escape(p) for p in ANSWER_PREFIXES), re.IGNORECASE)
_LETTER = re.compile(r"(?<![A-Za-z0-9])([A-E])(?![A-Za-z0-9])")
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
SCORER_KEYS = ("kind", "target", "tolerance", "rubric", "endpoint", "model", "api_key_env", "ignore_case")


class ScorerProblem(ValueError):
    """Why a scorer given in a set cannot be used (the line's error)."""


@dataclass(frozen=True)
class JudgeSpec:
    """An LLM judge: an OpenAI-compatible ``endpoint`` (``…/v1``), its ``model`` and the ``rubric`` it grades by.
    ``api_key_env`` names the environment variable holding the key (none sent when unset)."""

    endpoint: str
    model: str
    rubric: str
    api_key_env: str | None = None


@dataclass(frozen=True)
class Scorer:
    """One item's scorer. ``target``: the strings to find (contains), the text (exact), the pattern (regex), the
    letter (choice), the reference answer the judge is shown (judge, optional); ``number`` and ``tolerance``
    for number; ``tool_name`` and ``tool_arguments`` (canonical JSON text, None: any arguments) for tool_call."""

    kind: str
    target: tuple[str, ...] = ()
    number: float | None = None
    tolerance: float = 0.0
    tool_name: str = ""
    tool_arguments: str | None = None
    ignore_case: bool = False  # regex only (exact always ignores case)
    judge: JudgeSpec | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.kind == "number":
            data.update(target=self.number, tolerance=self.tolerance)
        elif self.kind == "tool_call":
            data["target"] = {"name": self.tool_name, **({"arguments": json.loads(self.tool_arguments)}
                                                        if self.tool_arguments is not None else {})}
        elif self.kind == "contains":
            data["target"] = list(self.target)
        elif self.target:
            data["target"] = self.target[0]
        if self.kind == "regex" and self.ignore_case:
            data["ignore_case"] = True
        if self.judge is not None:
            data.update(endpoint=self.judge.endpoint, model=self.judge.model, rubric=self.judge.rubric)
        return data


@dataclass(frozen=True)
class JudgeRecord:
    """What the judge was asked and what it said: the messages sent (JSON text), its reply as it came, the
    verdict read from it."""

    model: str
    endpoint: str
    prompt: str
    reply: str
    verdict: str


@dataclass(frozen=True)
class Score:
    """One item's score: ``value`` in [0, 1], the ``reason`` in words, the scorer's kind, what was read from the
    reply (``extracted``: the letter, the number, the call's name; None when nothing could be read) and
    ``unparsed`` when the reply could not be read at all (counted wrong)."""

    value: float
    reason: str
    scorer: str
    extracted: str | None = None
    unparsed: bool = False
    judge: JudgeRecord | None = None

    @property
    def passed(self) -> bool:
        return self.value >= 1.0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"value": self.value, "reason": self.reason, "scorer": self.scorer,
                                "extracted": self.extracted, "unparsed": self.unparsed}
        if self.judge is not None:
            data["judge"] = {"model": self.judge.model, "endpoint": self.judge.endpoint,
                             "prompt": self.judge.prompt, "reply": self.judge.reply, "verdict": self.judge.verdict}
        return data

    @classmethod
    def from_json(cls, data: Any) -> Score:
        judge = data.get("judge")
        value = float(data["value"])
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"score {value} is not in [0, 1]")
        return cls(value=value, reason=str(data["reason"]), scorer=str(data["scorer"]),
                   extracted=None if data.get("extracted") is None else str(data["extracted"]),
                   unparsed=bool(data.get("unparsed")),
                   judge=JudgeRecord(**{k: str(judge[k]) for k in ("model", "endpoint", "prompt", "reply",
                                                                   "verdict")}) if judge else None)


# ---------------------------------------------------------------- reading a scorer from the set
def parse_scorer(given: Any, target: Any, expect: Sequence[str], defaults: dict[str, Any] | None = None) -> Scorer:
    """The scorer of an item: ``given`` is the item's ``score`` (a kind, or an object with ``kind`` and its
    options) or the set's, ``target`` the item's ``target``; ``defaults`` the set header's scorer object (an
    item's own options win). Raises :class:`ScorerProblem`."""
    options: dict[str, Any] = dict(defaults or {})
    if isinstance(given, str):
        if given != options.get("kind"):
            options = {k: v for k, v in options.items() if k not in ("kind", "target", "tolerance", "ignore_case")}
        options["kind"] = given
    elif isinstance(given, dict):
        unknown = [k for k in given if k not in SCORER_KEYS]
        if unknown:
            raise ScorerProblem(f"unknown score key(s) {', '.join(map(repr, unknown))} "
                                f"(known: {', '.join(SCORER_KEYS)})")
        options.update(given)
    elif given is not None:
        raise ScorerProblem(f"score must be a scorer's name ({', '.join(SCORER_KINDS)}) or an object with a kind, "
                            f"got {json.dumps(given)[:40]}")
    if target is not None:
        options["target"] = target
    kind = options.get("kind")
    if kind is None and expect:
        kind = "contains"
    if kind not in SCORER_KINDS:
        raise ScorerProblem(f"score kind must be one of {', '.join(SCORER_KINDS)}, got {json.dumps(kind)[:40]}")
    value = options.get("target")
    if kind == "contains":
        strings = list(expect) if value is None else value
        if isinstance(strings, str):
            strings = [strings]
        if not strings or not isinstance(strings, list) or not all(isinstance(s, str) for s in strings):
            raise ScorerProblem("contains needs expect strings (or a target: a list of strings)")
        return Scorer("contains", target=tuple(strings))
    if kind == "number":
        tolerance = options.get("tolerance", 0.0)
        if not isinstance(value, (int, float)) or not _finite(value):
            raise ScorerProblem(f"number needs a numeric target, got {json.dumps(value)[:40]}")
        if not _finite(tolerance) or tolerance < 0:
            raise ScorerProblem(f"tolerance must be a number ≥ 0, got {json.dumps(tolerance)[:40]}")
        return Scorer("number", number=float(value), tolerance=float(tolerance))
    if kind == "tool_call":
        if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
            raise ScorerProblem('tool_call needs a target {"name": …, "arguments": {…}} (arguments optional)')
        arguments = value.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise ScorerProblem("tool_call's target arguments must be a JSON object")
        return Scorer("tool_call", tool_name=value["name"],
                      tool_arguments=None if arguments is None else json.dumps(arguments, sort_keys=True))
    if kind == "judge":
        missing = [k for k in ("endpoint", "model", "rubric") if not isinstance(options.get(k), str) or not options[k]]
        if missing:
            raise ScorerProblem(f"judge needs {', '.join(missing)} (strings; the set header can give them once)")
        if value is not None and not isinstance(value, str):
            raise ScorerProblem("judge's target (the reference answer shown to the judge) must be a string")
        key_env = options.get("api_key_env")
        return Scorer("judge", target=(value,) if value else (),
                      judge=JudgeSpec(options["endpoint"], options["model"], options["rubric"],
                                      key_env if isinstance(key_env, str) else None))
    if not isinstance(value, str) or not value:
        raise ScorerProblem(f"{kind} needs a target string, got {json.dumps(value)[:40]}")
    if kind == "choice":
        letter = value.strip().strip("().").upper()
        if len(letter) != 1 or letter not in LETTERS:
            raise ScorerProblem(f"choice's target must be one letter A–E, got {value!r}")
        return Scorer("choice", target=(letter,))
    ignore_case = options.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        raise ScorerProblem("ignore_case must be true or false")
    if kind == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            raise ScorerProblem(f"regex target is not a pattern Python reads: {exc}") from None
    return Scorer(kind, target=(value,), ignore_case=ignore_case)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ---------------------------------------------------------------- scoring a reply
def strip_prefixes(reply: str) -> str:
    """The reply after its last answer prefix ("The answer is", "Answer:", …), white space stripped."""
    found = list(_PREFIX.finditer(reply))
    return (reply[found[-1].end():] if found else reply).strip()


def choice_letter(reply: str) -> tuple[str | None, tuple[str, ...]]:
    """The option letter of a reply, and every standalone letter A–E found (the first is the choice)."""
    text = strip_prefixes(reply)
    letters = tuple(m.group(1) for m in _LETTER.finditer(text))
    if letters:
        return letters[0], letters
    bare = text.strip(" \t\n().:*[]'\"").strip()
    if len(bare) == 1 and bare.upper() in LETTERS:
        return bare.upper(), (bare.upper(),)
    return None, ()


def first_number(reply: str) -> float | None:
    match = _NUMBER.search(strip_prefixes(reply))
    return float(match.group(0).replace(",", "")) if match else None


def score_reply(scorer: Scorer, text: str, tool_calls: Sequence[ToolCall]) -> Score:
    """The score of a reply (its text and tool calls) by any scorer but ``judge`` (``workbench.judge``)."""
    kind = scorer.kind
    if kind == "contains":
        haystack = "\n".join([text, *(f"{c.name}({c.arguments})" for c in tool_calls)]).casefold()
        missing = [s for s in scorer.target if s.casefold() not in haystack]
        reason = ("every expected string is in the reply" if not missing
                  else f"not in the reply: {', '.join(map(repr, missing))}")
        return Score(0.0 if missing else 1.0, reason, kind)
    if kind == "exact":
        got, want = _normal(text), _normal(scorer.target[0])
        return Score(float(got == want), "the reply equals the target" if got == want
                     else f"the reply is not {scorer.target[0]!r} (white space, a final full stop and case ignored)",
                     kind, extracted=text.strip()[:200])
    if kind == "regex":
        match = re.search(scorer.target[0], text, re.IGNORECASE if scorer.ignore_case else 0)
        return Score(float(match is not None), f"matches {match.group(0)[:80]!r}" if match
                     else f"no match for /{scorer.target[0]}/", kind,
                     extracted=match.group(0)[:200] if match else None)
    if kind == "choice":
        letter, letters = choice_letter(text)
        want = scorer.target[0]
        if letter is None:
            return Score(0.0, "no option letter A–E in the reply: unparsed, counted wrong", kind, unparsed=True)
        more = f" (first of {', '.join(letters)})" if len(set(letters)) > 1 else ""
        return Score(float(letter == want), f"chose {letter}{more}, the answer is {want}", kind, extracted=letter)
    if kind == "number":
        number = first_number(text)
        assert scorer.number is not None
        if number is None:
            return Score(0.0, "no number in the reply: unparsed, counted wrong", kind, unparsed=True)
        near = abs(number - scorer.number) <= scorer.tolerance + 1e-12 * max(1.0, abs(scorer.number))
        return Score(float(near), f"{number:g} is {'within' if near else 'not within'} ±{scorer.tolerance:g} of "
                     f"{scorer.number:g}", kind, extracted=f"{number:g}")
    if kind == "tool_call":
        return _score_tool_calls(scorer, tool_calls)
    raise ValueError(f"score_reply does not grade {kind!r}")


def _normal(text: str) -> str:
    text = " ".join(text.split())
    return text[:-1].rstrip().casefold() if text.endswith(".") else text.casefold()


def _score_tool_calls(scorer: Scorer, calls: Sequence[ToolCall]) -> Score:
    if not calls:
        return Score(0.0, f"no tool call (wanted {scorer.tool_name})", "tool_call", unparsed=True)
    want = json.loads(scorer.tool_arguments) if scorer.tool_arguments is not None else None
    reasons = []
    for call in calls:
        if call.name != scorer.tool_name:
            reasons.append(f"{call.name}: not {scorer.tool_name}")
            continue
        if want is None:
            return Score(1.0, f"called {call.name}", "tool_call", extracted=call.name)
        try:
            got = json.loads(call.arguments or "{}")
        except ValueError:
            reasons.append(f"{call.name}: its arguments are not JSON")
            continue
        if got == want:
            return Score(1.0, f"called {call.name} with the expected arguments", "tool_call", extracted=call.name)
        reasons.append(f"{call.name}: arguments {json.dumps(got, sort_keys=True)[:120]} ≠ "
                       f"{json.dumps(want, sort_keys=True)[:120]}")
    return Score(0.0, "; ".join(reasons), "tool_call", extracted=calls[0].name)
