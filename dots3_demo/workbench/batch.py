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
"""

from __future__ import annotations

import asyncio
import contextlib
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
from dots3_demo.engine.media import check_media_limits
from dots3_demo.engine.protocol import (
    ChatEngine,
    EngineUnavailable,
    PromptTokens,
    ToolCall,
    TurnRejected,
    TurnRequest,
    TurnStats,
)
from dots3_demo.inspection.errors import one_line
from dots3_demo.inspection.plan import FilePlan, plan_file
from dots3_demo.profiles import Profile
from dots3_demo.workbench.evalset import EvalItem, SetDefaults, SetEntry, SetLineError, read_set
from dots3_demo.workbench.records import Answer
from dots3_demo.workbench.report_html import Thumbnail, report_thumbnails

logger = logging.getLogger(__name__)

RESULTS_NAME = "results.jsonl"
REPORT_NAME = "report.html"
ERROR_CHARS = 500  # an item's error is one line of at most this many characters
PREVIEW_NOTE = ("preview mode: no engine attached (--engine inprocess --model DIR, or --endpoint URL), so "
                "nothing is sent to a model: the plans only, answer: null")
EXIT_OK, EXIT_CHECK_FAILED, EXIT_ITEM_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


# ---------------------------------------------------------------- one item's result
@dataclass(frozen=True)
class Check:
    """One ``expect`` string and whether the answer contains it (None: not checked — no answer)."""

    expect: str
    found: bool | None


@dataclass(frozen=True)
class EvalResult:
    """One line of ``results.jsonl``: an item's plan, its answer as it ended, its checks, its error.

    ``plan`` holds the inspect command's JSON object for each media file, as it printed it; ``answer``
    is None in preview mode and for an item that was never sent (see ``error``).
    """

    id: str | None
    line: int
    plan: tuple[dict[str, Any], ...] = ()
    answer: Answer | None = None
    checks: tuple[Check, ...] = ()
    error: str | None = None
    notices: tuple[str, ...] = ()  # the engine's notes on how the request was served (a server's own budget …)

    @property
    def failed_checks(self) -> tuple[str, ...]:
        return tuple(c.expect for c in self.checks if c.found is False)

    @property
    def passed(self) -> bool | None:
        """True: answered, no error, every check found; False: a check failed or an error; None: preview."""
        if self.error is not None:
            return False
        if self.answer is None:
            return None
        return not self.failed_checks

    def done(self, *, preview: bool) -> bool:
        """Kept by a rerun: ran without error (with an engine: answered)."""
        return self.id is not None and self.error is None and (preview or self.answer is not None)

    def to_json(self) -> dict[str, Any]:
        answer = self.answer
        stats = answer.stats if answer is not None else None
        return {
            "id": self.id,
            "line": self.line,
            "plan": list(self.plan),
            "prompt_tokens": asdict(stats.prompt) if stats is not None and stats.prompt is not None else None,
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
        }

    @classmethod
    def from_json(cls, data: Any) -> EvalResult:
        """A line an earlier run wrote (raises ``ValueError`` for one it did not)."""
        try:
            answer = None
            if data["answer"] is not None:
                prompt = PromptTokens(**data["prompt_tokens"]) if data.get("prompt_tokens") else None
                stats = TurnStats(ttft_s=data.get("ttft_s"), tokens_per_s=data.get("tokens_per_s"),
                                  output_tokens=data.get("output_tokens") or 0, prompt=prompt)
                calls = tuple(ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                              for c in data.get("tool_calls") or ())
                answer = Answer(text=data["answer"], reasoning=data.get("reasoning") or "", tool_calls=calls,
                                finish_reason=data.get("finish_reason"), stats=stats, error=data.get("error") or "")
            item_id = data["id"]
            return cls(id=None if item_id is None else str(item_id), line=int(data["line"]),
                       plan=tuple(data["plan"]), answer=answer,
                       checks=tuple(Check(str(c["expect"]), c["found"]) for c in data["checks"]),
                       error=data["error"], notices=tuple(str(n) for n in data.get("notices") or ()))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a result line ({one_line(exc)})") from None


def checks_for(expect: Sequence[str], answer: Answer | None) -> tuple[Check, ...]:
    """Each ``expect`` string, found (case-insensitively) in the answer's text or its tool calls' names and
    arguments; ``found`` is None without an answer."""
    if answer is None:
        return tuple(Check(e, None) for e in expect)
    haystack = "\n".join([answer.text, *(f"{c.name}({c.arguments})" for c in answer.tool_calls)]).casefold()
    return tuple(Check(e, e.casefold() in haystack) for e in expect)


# ---------------------------------------------------------------- results.jsonl
class ResultsFile:
    """``DIR/results.jsonl``: read what an earlier run left, append one finished item, rewrite in order."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> tuple[tuple[EvalResult, ...], int]:
        """The earlier results (a later line for the same id wins) and how many lines could not be read."""
        if not self.path.exists():
            return (), 0
        results: list[EvalResult] = []
        unreadable = 0
        with open(self.path, encoding="utf-8", errors="replace") as lines:
            for text in lines:
                if not text.strip():
                    continue
                try:
                    results.append(EvalResult.from_json(json.loads(text)))
                except ValueError:
                    unreadable += 1  # e.g. a line cut short by a crash: that item runs again
        return tuple(results), unreadable

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


@dataclass(frozen=True)
class Row:
    """One item of the set in the report: its result, the thumbnails of what the model saw (one tuple per
    media file), and whether it came from an earlier run."""

    result: EvalResult
    prompt: str = ""  # the item's prompt ("" for a line that could not be read)
    thumbs: tuple[tuple[Thumbnail, ...], ...] = ()  # per media file
    earlier: bool = False


@dataclass(frozen=True)
class Summary:
    items: int  # entries of the set
    ran: int  # entries with a result
    passed: int
    failed: int
    errors: int
    preview: bool
    media_tokens: int = 0  # the inspector's tokens for every media file of the items with a result
    median_ttft_s: float | None = None
    median_tokens_per_s: float | None = None

    @property
    def not_run(self) -> int:
        return self.items - self.ran

    @property
    def exit_status(self) -> int:
        if self.errors:
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


def summarize(results: Sequence[EvalResult], items: int, *, preview: bool) -> Summary:
    ttfts = [r.answer.stats.ttft_s for r in results
             if r.answer is not None and r.answer.stats is not None and r.answer.stats.ttft_s is not None]
    rates = [r.answer.stats.tokens_per_s for r in results
             if r.answer is not None and r.answer.stats is not None and r.answer.stats.tokens_per_s is not None]
    return Summary(
        items=items, ran=len(results), preview=preview,
        passed=sum(1 for r in results if r.passed is True),
        failed=sum(1 for r in results if r.error is None and r.failed_checks),
        errors=sum(1 for r in results if r.error is not None),
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
        what = f"{result.id or f'line {result.line}'}: " + (
            f"error: {result.error}" if result.error is not None
            else f"missing {', '.join(map(repr, result.failed_checks))}" if result.failed_checks
            else "planned" if result.answer is None else "ok")
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
    answer = Answer(text=text, reasoning=reasoning, tool_calls=calls, finish_reason=finish, stats=stats,
                    error=one_line(error, ERROR_CHARS))
    return Served(answer, notices)


class _Runner:
    def __init__(self, settings: BatchSettings, engine: ChatEngine | None, progress: Progress) -> None:
        self.settings = settings
        self.engine = engine
        self.progress = progress
        self.session_id = f"eval-{uuid.uuid4().hex[:8]}"
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
                              error=one_line(entry.error, ERROR_CHARS))
        async with self.planning:
            planned = await asyncio.to_thread(_plan_item, entry, self.settings.profile)
        self.thumbs[entry.line] = planned.thumbs
        plan = tuple(p.item for p in planned.plans)

        def failed(error: str) -> EvalResult:
            return EvalResult(id=entry.id, line=entry.line, plan=plan, checks=checks_for(entry.expect, None),
                              error=one_line(error, ERROR_CHARS))

        for name, file_plan in zip(entry.media, planned.plans, strict=True):
            if file_plan.error is not None:
                return failed(f"{name}: {file_plan.error}")
        turn = build_turn(entry, planned.plans, self.session_id)
        try:
            check_media_limits(turn.messages, self.engine.mm_limits if self.engine is not None else None)
        except TurnRejected as exc:
            return failed(str(exc))
        if self.engine is None or self.requests is None:
            return EvalResult(id=entry.id, line=entry.line, plan=plan, checks=checks_for(entry.expect, None))
        async with self.requests:
            served = await ask(self.engine, turn)
        answer = served.answer
        return EvalResult(id=entry.id, line=entry.line, plan=plan, answer=answer,
                          checks=checks_for(entry.expect, answer), error=answer.error or None,
                          notices=served.notices)


def ordered(entries: Sequence[SetEntry], new: dict[int, EvalResult],
            earlier: Sequence[EvalResult]) -> tuple[list[tuple[EvalResult, bool]], list[EvalResult]]:
    """(the set's rows in its order, each with whether it came from an earlier run; the earlier results of ids
    no longer in the set, in their order). An item not run (interrupted) and never run before has no row."""
    by_id = {r.id: r for r in earlier if r.id is not None}
    rows: list[tuple[EvalResult, bool]] = []
    used: set[str] = set()
    for entry in entries:
        if entry.line in new:
            rows.append((new[entry.line], False))
            if entry.id is not None:
                used.add(entry.id)
        elif isinstance(entry, EvalItem) and entry.id in by_id:
            rows.append((replace(by_id[entry.id], line=entry.line), True))
            used.add(entry.id)
    in_set = {e.id for e in entries if e.id is not None}
    rest = [r for r in by_id.values() if r.id not in in_set and r.id not in used]
    return rows, rest


async def evaluate(settings: BatchSettings, engine: ChatEngine | None, progress: Progress | None = None) -> EvalRun:
    """Run the set (the engine is started here, not shut down); write results.jsonl and report.html.

    A cancellation (Ctrl-C) stops the items under way — their requests are aborted — writes both files with
    what finished, and is raised again. Raises ``OSError`` when the set cannot be read and ``EngineUnavailable``
    when the engine cannot start.
    """
    progress = progress or Progress()
    started = time.monotonic()
    out_dir = settings.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    if engine is None:
        progress.say(PREVIEW_NOTE)
    else:
        progress.say(f"starting the engine ({engine.label})…")
        await engine.start()
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
    runner = _Runner(settings, engine, progress)
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
        rows, rest = ordered(entries, runner.results, earlier)
        results_file.rewrite([r for r, _ in rows] + rest)
        results = [r for r, _ in rows]
        run = EvalRun(
            rows=tuple(Row(r, prompts.get(r.line, ""), runner.thumbs.get(r.line, ()), earlier=was) for r, was in rows),
            summary=summarize(results, len(entries), preview=preview),
            engine=engine.label if engine is not None else "", settings=settings, default_seq=default_seq,
            interrupted=interrupted, kept_elsewhere=len(rest), unreadable=unreadable,
            elapsed_s=time.monotonic() - started, results_path=results_file.path, report_path=out_dir / REPORT_NAME,
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
