"""Batch evaluation (``python app.py eval SET.jsonl --out DIR``): every question of a set, planned by the
inspector and answered by the engine, into ``DIR/results.jsonl`` and ``DIR/report.html``.

For each item of the set (``workbench.evalset``), in the set's order:

1. each media file is planned exactly as ``app.py inspect --json`` prints it for that file and budget
   (``inspection.plan.plan_file``, the command's own code), in a worker thread (a sweep's runs share a
   :class:`PlanMemo`: a plan made once is reused where the inspector would make the same one);
2. the user turn is built as the chat builds it (``core.turns.build_turn``: media parts first, then the prompt;
   the chat's system prompt unless the item gives one), with the item's video budget (``TurnRequest.video``),
   sampling and tools, and checked against what vLLM refuses (``engine.media.check_media_limits``);
3. with an engine, the turn streams through ``ChatEngine.stream_turn`` inside ``contextlib.aclosing`` (a
   request cut short — Ctrl-C — is aborted by the adapter), at most ``max_concurrency`` at once (default the
   engine's capacity: :func:`request_limit`); without one (preview) nothing is sent and ``answer`` is null;
4. the reply's text (and its tool calls) is searched for each ``expect`` string, case-insensitively, and the
   item's scorer (``workbench.scoring``; an LLM judge through ``workbench.judge``) gives it a score in [0, 1]
   with its reason; the summary gives the accuracy with 95 % intervals (``workbench.accuracy``).

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
import datetime
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, replace
from typing import Any, TextIO

from tqdm import tqdm  # type: ignore[import-untyped]

from dots3_demo.budget import DEFAULT_SEQ, VideoSettings
from dots3_demo.core.context import measure, media_item
from dots3_demo.core.records import Answer, MediaItem
from dots3_demo.core.reply import Reply
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT, build_turn, user_message
from dots3_demo.engine.media import MediaRefused, check_media_limits
from dots3_demo.engine.protocol import (
    CONTEXT_HINT,
    ChatEngine,
    EngineUnavailable,
    TurnRejected,
    TurnRequest,
)
from dots3_demo.inspection.errors import one_line
from dots3_demo.inspection.plan import FilePlan, plan_file
from dots3_demo.profiles import Profile
from dots3_demo.workbench.eval_results import (
    ERROR_CHARS,
    PREVIEW_NOTE,
    REPORT_NAME,
    RESULTS_NAME,
    RUN_NAME,
    BatchSettings,
    Change,
    EvalResult,
    EvalRun,
    ResultsFile,
    Row,
    RunRecord,
    RunsFile,
    checks_for,
    engine_facts,
    status_word,
    summarize,
)
from dots3_demo.workbench.evalset import EvalItem, SetDefaults, SetEntry, SetLineError, read_set_with_header
from dots3_demo.workbench.judge import JudgeFailed, judge_score
from dots3_demo.workbench.report_html import Thumbnail, report_thumbnails
from dots3_demo.workbench.scoring import Score, score_reply

logger = logging.getLogger(__name__)

EVAL_CONTEXT_HINT = ("Lower the item's max_new_tokens (or sampling.max_tokens), or for a video its seq, or "
                     "serve a longer --max-model-len.")


# tqdm's meter, with the counts the run keeps: "eval: [####....] 3/9 items, 1 errors, 0 failed checks [00:04<00:08,
# 0.75item/s]"
PROGRESS_FORMAT = "{desc}: [{bar:24}] {n_fmt}/{total_fmt} items{postfix} [{elapsed}<{remaining}, {rate_fmt}]"


class Progress:
    """Items done and the time left, through tqdm (it ships with vLLM), on stderr: a bar rewritten in place on a
    TTY; else tqdm's meter as one line per item, with what became of the item (a log keeps every line)."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.total = 0
        self.done = 0
        self.errors = 0
        self.failed = 0
        self.started = time.monotonic()
        self.bar: tqdm | None = None  # the TTY's bar, while the items run

    def say(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(f"eval: {text}", file=self.out)  # above the bar, which is drawn again below it
        else:
            print(f"eval: {text}", file=self.out, flush=True)

    def start(self, total: int) -> None:
        self.end_line()
        self.total, self.done, self.errors, self.failed, self.started = total, 0, 0, 0, time.monotonic()
        if not total:
            return
        if self.tty:
            self.bar = tqdm(total=total, file=self.out, desc="eval", unit="item", bar_format=PROGRESS_FORMAT,
                            postfix=self._counts(), dynamic_ncols=True)
        else:
            self._line("")

    def item(self, result: EvalResult) -> None:
        self.done += 1
        self.errors += result.error is not None
        self.failed += result.error is None and result.passed is False
        if self.bar is not None:
            self.bar.set_postfix_str(self._counts(), refresh=False)
            self.bar.update(1)
            return
        self._line(f"{result.key}: " + (
            f"error: {result.error}" if result.error is not None
            else f"failed: {result.score.reason}" if result.score is not None and result.passed is False
            else f"missing {', '.join(map(repr, result.failed_checks))}" if result.failed_checks
            else status_word(result)
            + (f" ({result.score.reason})" if result.score is not None and result.passed else "")))

    def _counts(self) -> str:
        return f"{self.errors} errors, {self.failed} failed checks"

    def _line(self, what: str) -> None:
        meter = tqdm.format_meter(self.done, self.total, time.monotonic() - self.started, prefix="eval",
                                  unit="item", bar_format=PROGRESS_FORMAT, postfix=self._counts(), ascii=True)
        print(meter + (f" — {what}" if what else ""), file=self.out, flush=True)

    def end_line(self) -> None:
        """Leave the bar (on a TTY) as it stands, on a line of its own."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@dataclass(frozen=True)
class _Planned:
    plans: tuple[FilePlan, ...]
    thumbs: tuple[tuple[Thumbnail, ...], ...]
    media: tuple[MediaItem, ...] = ()  # each file planned without error, with the inspector's tokens (in order)


@dataclass(frozen=True)
class _FilePlanned:
    """One media file planned: its plan without the report's pictures, its thumbnails, its media item (None: an
    error)."""

    plan: FilePlan
    thumbs: tuple[Thumbnail, ...]
    media: MediaItem | None


def _plan_one(path: str, name: str, profile: Profile, settings: VideoSettings) -> _FilePlanned:
    """Plan one file (``plan_file``: the inspect command's object for it) and draw its thumbnails (``name``: an image's
    caption)."""
    planned = plan_file(path, profile, settings)
    if planned.report is None:
        return _FilePlanned(planned, (), None)
    return _FilePlanned(FilePlan(planned.item), report_thumbnails(planned.report, name),
                        media_item(path, planned.report))  # drop the report's pictures


class PlanMemo:
    """Plans made once for all the runs of a sweep (``workbench.sweep``), one profile. The inspector is deterministic:
    a file planned again under the same budget gets the same plan, and an image's or an audio file's plan does not
    depend on the budget at all (the budget steers a video only). Keyed by the file's path, size and modification
    time and the item's name for it (an image's caption); thread-safe: a plan under way is waited for, not made
    twice. ``made`` and ``reused`` count the plans."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[tuple[Any, ...], Future[_FilePlanned]] = {}
        self._fixed: set[tuple[Any, ...]] = set()  # files whose plan does not depend on the budget
        self.made = 0
        self.reused = 0

    def planned(self, path: str, name: str, profile: Profile, settings: VideoSettings) -> _FilePlanned:
        try:
            stat = os.stat(path)
        except OSError:
            return _plan_one(path, name, profile, settings)  # the plan says why
        file = (path, name, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            key = (*file, None if file in self._fixed else settings)
            future = self._plans.get(key)
            mine = future is None
            if future is None:
                future = self._plans[key] = Future()
                self.made += 1
            else:
                self.reused += 1
        if not mine:
            return future.result()
        try:
            result = _plan_one(path, name, profile, settings)
        except BaseException as exc:
            with self._lock:
                self._plans.pop(key, None)
            future.set_exception(exc)
            raise
        if result.plan.kind in ("image", "audio"):
            with self._lock:
                self._fixed.add(file)
                self._plans.setdefault((*file, None), future)
        future.set_result(result)
        return result

    def forget_budgeted(self) -> None:
        """Drop the plans made under one budget (videos), keep the others: a sweep of a budget setting plans its videos
        afresh for each value, and the thumbnails of the last value need not stay in memory."""
        with self._lock:
            self._plans = {key: value for key, value in self._plans.items() if key[-1] is None}


def _plan_item(item: EvalItem, profile: Profile, memo: PlanMemo | None = None) -> _Planned:
    """Plan every media file of ``item`` (blocking: a worker thread runs it) and draw its thumbnails; ``memo``: plans
    made before are reused."""
    plan = memo.planned if memo is not None else _plan_one
    files = [plan(path, name, profile, item.video) for path, name in zip(item.files, item.media, strict=True)]
    return _Planned(plans=tuple(f.plan for f in files), thumbs=tuple(f.thumbs for f in files),
                    media=tuple(f.media for f in files if f.media is not None))


def item_turn(item: EvalItem, plans: Sequence[FilePlan], session_id: str) -> TurnRequest:
    """The request the chat would send for this item (``core.turns``): its media (kinds from the inspector) and
    prompt as one user turn, after the system prompt (the chat's default unless the item gives one; "" = none)."""
    media = [MediaItem(str(plan.kind), path) for plan, path in zip(plans, item.files, strict=True)]
    return build_turn(session_id=session_id, system=DEFAULT_SYSTEM_PROMPT if item.system is None else item.system,
                      messages=[user_message(item.prompt, media)], tools=item.tools, sampling=item.sampling,
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
    reply = Reply(state="streaming")
    error = ""
    try:
        async with contextlib.aclosing(engine.stream_turn(turn)) as stream:
            async for delta in stream:
                reply = reply.add(delta)
    except TurnRejected as exc:
        error = str(exc)
    except EngineUnavailable as exc:
        error = f"the engine is not available: {exc}"
    except Exception as exc:
        logger.exception("eval request %s failed", turn.request_id)
        error = f"the engine failed during this reply: {str(exc).strip() or type(exc).__name__}"
    error = error.replace(CONTEXT_HINT, EVAL_CONTEXT_HINT)  # the chat's advice names its tabs: eval's own
    return Served(replace(reply.answer, error=one_line(error, ERROR_CHARS)), reply.notices)


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


def request_limit(settings: BatchSettings, engine: ChatEngine | None) -> int | None:
    """How many requests are in flight at once: ``--max-concurrency``, else the engine's capacity (in-process its
    ``max_num_seqs``, so none waits in vLLM's queue; remote ``engine.remote.DEFAULT_REMOTE_CAPACITY``, a server
    does not say its own). None in preview (nothing is sent)."""
    if engine is None:
        return None
    return max(1, settings.max_concurrency or engine.capacity)


class _Runner:
    def __init__(self, settings: BatchSettings, engine: ChatEngine | None, progress: Progress, run_id: str,
                 context_len: int | None = None, memo: PlanMemo | None = None) -> None:
        self.settings = settings
        self.memo = memo
        self.context_len = context_len  # the context an item is counted against (the engine's max_model_len)
        self.engine = engine
        self.progress = progress
        self.session_id = run_id
        workers = max(1, settings.inspect_workers)
        self.planning = asyncio.Semaphore(workers)
        limit = request_limit(settings, engine)
        self.requests = asyncio.Semaphore(limit) if limit is not None else None
        # items under way at once: enough to keep the engine and the inspection workers busy, in the set's order
        self.slots = asyncio.Semaphore(workers + (limit or 0))
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
            planned = await asyncio.to_thread(_plan_item, entry, self.settings.profile, self.memo)
        self.thumbs[entry.line] = planned.thumbs
        plan = tuple(p.item for p in planned.plans)
        budget = build_turn(session_id=self.session_id, sampling=entry.sampling,
                            video=entry.video).mm_processor_kwargs()
        base = EvalResult(id=entry.id, line=entry.line, plan=plan, checks=checks_for(entry.expect, None),
                          tags=entry.tags, sampling=entry.sampling, budget=budget, run=self.session_id,
                          metadata=entry.metadata, cluster=entry.cluster)

        def failed(error: str) -> EvalResult:
            return replace(base, error=one_line(error, ERROR_CHARS))

        for name, file_plan in zip(entry.media, planned.plans, strict=True):
            if file_plan.error is not None:
                return failed(f"{name}: {file_plan.error}")
        # each item is a conversation of its own: a router in front of several servers (consistent_hash on the
        # session) spreads the items over them instead of sending the whole run to one
        turn = item_turn(entry, planned.plans, f"{self.session_id}-{entry.line}")
        try:
            check_media_limits(turn.messages, self.engine.mm_limits if self.engine is not None else None)
        except MediaRefused as exc:
            return failed(eval_media_advice(exc))
        except TurnRejected as exc:
            return failed(str(exc))
        if self.engine is None or self.requests is None:
            return self._previewed(base, turn, planned)
        async with self.requests:
            served = await ask(self.engine, turn)
        answer: Answer | None = served.answer
        error = served.answer.error or None
        if error is not None and not (served.answer.text or served.answer.reasoning or served.answer.tool_calls):
            answer = None  # refused or failed before anything arrived: no answer, as for a refusal before sending
        score = None
        if answer is not None and error is None and entry.scorer is not None:
            try:
                score = await score_item(entry, answer)
            except JudgeFailed as exc:
                error = one_line(f"judge: {exc}", ERROR_CHARS)  # the answer is kept; a rerun asks both again
        return replace(base, answer=answer, checks=checks_for(entry.expect, answer), error=error,
                       notices=served.notices, score=score)

    def _previewed(self, base: EvalResult, turn: TurnRequest, planned: _Planned) -> EvalResult:
        """Preview: the whole prompt counted (``core.context``: text and media, as the engine will) against the
        context, and what a real engine would refuse — a prompt that leaves no room for a reply token, more media
        than the profile's per-prompt limits (vLLM's defaults for dots3_note unless the profile says otherwise)."""
        try:
            counted = measure(self.settings.profile.tokenizer, turn.messages, planned.media, tools=turn.tools,
                              max_tokens=turn.sampling.max_tokens, max_model_len=self.context_len)
        except Exception as exc:  # noqa: BLE001 - a template that cannot render this item: say so, go on
            return replace(base, would_refuse=one_line(f"the chat template cannot render this item: {exc}",
                                                       ERROR_CHARS))
        reasons = []
        if counted.fit == "will not fit":
            reasons.append(f"{counted.message()} {EVAL_CONTEXT_HINT}")
        try:
            check_media_limits(turn.messages, self.settings.profile.mm_limits)
        except MediaRefused as exc:
            reasons.append(eval_media_advice(exc))
        return replace(base, context=counted, would_refuse=" · ".join(reasons) or None)


async def score_item(item: EvalItem, answer: Answer) -> Score:
    """The item's score of ``answer`` (its scorer must be set); raises ``JudgeFailed`` for a judge that fails."""
    scorer = item.scorer
    assert scorer is not None
    if scorer.kind == "judge":
        assert scorer.judge is not None
        return await judge_score(scorer.judge, item.prompt, answer.text, scorer.target[0] if scorer.target else None)
    return score_reply(scorer, answer.text, answer.tool_calls)


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


async def evaluate(settings: BatchSettings, engine: ChatEngine | None, progress: Progress | None = None,
                   memo: PlanMemo | None = None) -> EvalRun:
    """Run the set (the engine is started here, not shut down); write results.jsonl and report.html. ``memo``: plans
    made by earlier runs of a sweep, reused.

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
        if engine.status.state != "ready":  # a sweep's later runs find it started
            progress.say("starting the engine…")
        await engine.start()
    facts = await engine_facts(engine)
    limit = request_limit(settings, engine)
    if engine is not None:
        version = f"vLLM {facts.vllm_version}" if facts.vllm_version else "vLLM version not reported"
        progress.say(f"engine: {facts.label} · model {facts.model or 'not reported'} · {version} · at most {limit} "
                     "requests at once")
    default_seq = settings.seq or (engine.max_model_len if engine is not None else None) or DEFAULT_SEQ
    defaults = SetDefaults(seq=default_seq, output_reserve=settings.output_reserve, audio_cap=settings.audio_cap,
                           k_mode=settings.k_mode, forced=settings.forced)
    header, entries = read_set_with_header(settings.set_path, defaults)
    results_file = ResultsFile(out_dir / RESULTS_NAME)
    earlier, unreadable = results_file.load()
    preview = engine is None
    done_ids = {r.id for r in earlier if r.done(preview=preview)}
    todo = [e for e in entries if not (isinstance(e, EvalItem) and e.id in done_ids)]
    if len(todo) < len(entries):
        progress.say(f"{len(entries) - len(todo)} of {len(entries)} items are done in {results_file.path}: skipped")
    runner = _Runner(settings, engine, progress, run_id,
                     context_len=(engine.max_model_len if engine is not None else None) or default_seq, memo=memo)
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
                      "inspect_workers": settings.inspect_workers,
                      "max_concurrency": limit, "replace_answers": settings.replace_answers,
                      "cluster": header.cluster,
                      "sweep": asdict(settings.forced) if settings.forced is not None else None},
            items=len(entries), ran=len(runner.results), earlier=sum(1 for _, was in merged.rows if was),
            kept=kept, replaced=tuple(c.key for c in merged.changes if not c.kept),
        )
        RunsFile(out_dir / RUN_NAME).add(record)
        run = EvalRun(
            rows=tuple(Row(r, prompts.get(r.line, ""), runner.thumbs.get(r.line, ()), earlier=was)
                       for r, was in merged.rows),
            summary=summarize(results, len(entries), preview=preview, earlier=record.earlier, kept=len(kept),
                              cluster_key=header.cluster),
            engine=facts.label, settings=settings, default_seq=default_seq,
            interrupted=interrupted, kept_elsewhere=len(merged.rest), unreadable=unreadable,
            elapsed_s=elapsed, results_path=results_file.path, report_path=out_dir / REPORT_NAME,
            changes=merged.changes, record=record,
        )
        if not interrupted:
            run = await _with_earlier_thumbnails(run, entries, settings, progress, memo)
        write_report(run)
    return run


async def _with_earlier_thumbnails(run: EvalRun, entries: Sequence[SetEntry], settings: BatchSettings,
                                   progress: Progress, memo: PlanMemo | None = None) -> EvalRun:
    """Rows kept from an earlier run get their thumbnails (their media inspected again, for the report only)."""
    items = {e.line: e for e in entries if isinstance(e, EvalItem)}
    wanted = [row for row in run.rows if row.earlier and row.result.line in items and items[row.result.line].files]
    if not wanted:
        return run
    progress.say(f"drawing the frames of {len(wanted)} item(s) from earlier runs for the report…")
    redrawn: dict[int, tuple[tuple[Thumbnail, ...], ...]] = {}
    for row in wanted:
        planned = await asyncio.to_thread(_plan_item, items[row.result.line], settings.profile, memo)
        redrawn[row.result.line] = planned.thumbs
    rows = tuple(replace(row, thumbs=redrawn.get(row.result.line, row.thumbs)) for row in run.rows)
    return replace(run, rows=rows)


def write_report(run: EvalRun) -> None:
    """``report.html``, written beside it and renamed over it."""
    from dots3_demo.workbench.batch_report import report_page

    temp = run.report_path.with_name(f".{run.report_path.name}.{uuid.uuid4().hex[:8]}.tmp")
    temp.write_text(report_page(run), encoding="utf-8")
    os.replace(temp, run.report_path)
