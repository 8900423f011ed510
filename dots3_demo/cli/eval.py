"""``python app.py eval SET.jsonl --out DIR [--model DIR] [engine flags | --endpoint URL]``: batch evaluation.

The flags are the command's own (``--out``, the default video budget, ``--inspect-workers``, ``--sweep``) and every
vLLM engine flag (``cli.engine``, as for the studio); the run is ``workbench.batch``, a sweep (one run per value of a
setting, on one engine) ``workbench.sweep``. Without ``--engine inprocess`` or ``--endpoint`` it runs in preview mode:
the plans only, ``answer: null``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dots3_demo.budget import DEFAULT_SEQ, K_MODES

if TYPE_CHECKING:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from dots3_demo.engine.protocol import ChatEngine
    from dots3_demo.profiles import Profile
    from dots3_demo.workbench.batch import Progress
    from dots3_demo.workbench.eval_results import BatchSettings, EvalRun
    from dots3_demo.workbench.sweep import Sweep, SweepRun

T = TypeVar("T")

DESCRIPTION = (
    "Batch evaluation: every line of SET.jsonl (one JSON object: id, media, prompt, and optionally system, "
    "expect, seq, output_reserve, max_new_tokens, audio_cap, k_mode, sampling, tools, tags, score, target, "
    "metadata; an unknown key is that line's error; media paths are relative to the set file's folder; a first "
    'line {"set": {"score": ..., "cluster": KEY}} gives the scorer of items that name none and the key the '
    "intervals are clustered by) is planned by the inspector (each media file exactly as `app.py inspect --json` "
    "prints it for that budget) and, with an engine, answered through the chat's request; each item is scored "
    "by its scorer (contains: its expect strings, case-insensitively; exact, regex, choice: the option letter "
    "A-E, number with a tolerance, tool_call, judge: an LLM through an OpenAI-compatible endpoint) with a score "
    "in [0, 1] and its reason; the summary gives the accuracy with a 95 percent interval overall, per tag, per "
    "metadata field and per modality; an item without a scorer counts as answered without checks, not as "
    "passed. "
    "Writes DIR/results.jsonl (one object per item, in the set's order, keyed by id, or by line for a line "
    "without an id of its own), DIR/run.json (each run's settings: engine flags, model, vLLM version, start, "
    "duration) and DIR/report.html (one page, no script: the frames the model saw, the plans, the answers, the "
    "scores, the accuracy plots). Without --engine inprocess or --endpoint it runs in preview mode: the plans "
    "only, answer null. "
    "At most --max-concurrency N requests are in flight at once (the name vllm bench serve uses; default the "
    "engine's capacity: its --max-num-seqs in-process, 16 for an endpoint, which does not publish its own). A rerun "
    "with the same "
    "--out skips the items already done and never replaces an answer with an error (unless --replace-answers); "
    "it says what it kept and replaced. Ctrl-C keeps what finished and aborts the requests in flight. stdout "
    "gets the summary only (the progress, through tqdm: a bar on a terminal, a line per item else, and vLLM's log "
    "lines go to stderr). "
    "--sweep NAME=V1,V2,... runs the set once per value of one budget setting (seq, output_reserve, max_new_tokens, "
    "audio_cap, k_mode) or sampling setting (temperature, top_p, top_k, seed, repetition_penalty), every item taking "
    "the value in place of its own, each value an ordinary run into DIR/NAME=VALUE/ (resumable), on one engine; "
    "then DIR/sweep.json and DIR/sweep.html: per value the accuracy with its 95 percent interval against the media "
    "tokens per item, overall and per tag and metadata value (in preview: the media tokens and frames alone). "
    "Exit status: 0 every item ran, 1 an item scored "
    "below 1 (an expect string was not found), 2 an item had an error (or the command could not run), 130 interrupted."
)


def build_parser(argv: Sequence[str] = ()) -> FlexibleArgumentParser:
    """``app.py eval``'s flags: its own, then every vLLM engine flag (``cli.engine``)."""
    from dots3_demo.cli.engine import add_engine_cli_args
    from dots3_demo.cli.parser import count, new_parser
    from dots3_demo.engine.flag_cache import asks_for_help_only
    from dots3_demo.engine.protocol import DEFAULT_REMOTE_CAPACITY
    from dots3_demo.inspection.session import default_workers

    parser = new_parser(prog="app.py eval", description=DESCRIPTION)
    parser.add_argument("set", metavar="SET.jsonl", help="the questions, one JSON object per line")
    group = parser.add_argument_group("batch evaluation")
    group.add_argument("--out", required=True, metavar="DIR",
                       help="folder for results.jsonl and report.html (made if missing; a rerun resumes)")
    group.add_argument("--seq", type=int, default=None,
                       help=f"video budget of items that give none (default: the engine's max_model_len, else "
                       f"{DEFAULT_SEQ})")
    group.add_argument("--output-reserve", type=int, default=None,
                       help="tokens kept for the answer (default: seq // 4, vLLM's default)")
    group.add_argument("--audio-cap", type=float, default=1.0,
                       help="drop a video's sound track above this share of the input budget; 0 = frames only")
    group.add_argument("--k-mode", default="eval_ek", choices=K_MODES, help="audio/frame interleaving")
    group.add_argument("--inspect-workers", type=count, default=default_workers(), metavar="N",
                       help="how many items are planned at once (default: one per usable core, as the studio)")
    group.add_argument("--sweep", default=None, metavar="NAME=V1,V2,...",
                       help="run the set once per value of one setting, each into DIR/NAME=VALUE/, then DIR/sweep.json "
                       "and DIR/sweep.html (accuracy against media tokens per item); NAME: seq, output_reserve, "
                       "max_new_tokens, audio_cap, k_mode, temperature, top_p, top_k, seed or repetition_penalty; the "
                       "value replaces an item's own setting (e.g. --sweep seq=4096,8192,16384)")
    group.add_argument("--max-concurrency", type=count, default=None, metavar="N",
                       help="at most N requests in flight at once (the name vllm bench serve uses). Default: the "
                       "engine's capacity: in-process its max_num_seqs (--max-num-seqs, else vLLM's default for the "
                       f"platform), so no request waits in vLLM's queue; with --endpoint {DEFAULT_REMOTE_CAPACITY}, "
                       "since a server does not publish its max_num_seqs (below vLLM's default on every platform): "
                       "raise it to what your server, or all servers behind a router, run at once. Requests over "
                       "what the engine runs at once wait in its queue, and their TTFT counts the wait")
    group.add_argument("--replace-answers", action="store_true",
                       help="let this run's error for an id replace that id's earlier answer in --out (default: "
                       "the answer is kept, and the run says so)")
    add_engine_cli_args(parser, help_only=asks_for_help_only(list(argv)))
    return parser


async def _shut_down_after(engine: ChatEngine | None, work: Callable[[ChatEngine | None], Awaitable[T]]) -> T:
    try:
        return await work(engine)
    finally:
        if engine is not None:
            await engine.shutdown()


def _with_engine(ns: Any, settings: BatchSettings, progress: Progress, interrupted: str,
                 work: Callable[[ChatEngine | None], Awaitable[T]]) -> T | int:
    """``work`` on the command line's engine (None: preview), shut down after it, vLLM's log lines on stderr; what
    ``work`` returns, or the exit status with one line on stderr: ``interrupted`` after Ctrl-C, the reason when the
    engine is not available or the output folder cannot be written."""
    from dots3_demo.cli.engine import build_engine
    from dots3_demo.engine.protocol import EngineUnavailable
    from dots3_demo.workbench.eval_results import EXIT_INTERRUPTED, EXIT_ITEM_ERROR

    try:
        with stdout_to_stderr():
            engine = build_engine(ns)
            return asyncio.run(_shut_down_after(engine, work))
    except KeyboardInterrupt:
        progress.end_line()
        print(f"eval: interrupted: {interrupted}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except EngineUnavailable as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return EXIT_ITEM_ERROR
    except OSError as exc:
        print(f"eval: {exc.strerror or exc}: {exc.filename or settings.out_dir}", file=sys.stderr)
        return EXIT_ITEM_ERROR


def _seconds(value: float | None) -> str:
    return f"{value:.3f} s" if value is not None else "—"


def summary_lines(run: EvalRun) -> list[str]:
    """What the terminal says at the end."""
    from dots3_demo.workbench.batch_report import accuracy_line

    s = run.summary
    if s.preview:
        outcome = f"{s.ran} of {s.items} items planned (preview: nothing answered), {s.errors} with an error"
    else:
        outcome = f"{s.ran} of {s.items} items ran: {s.passed} passed, {s.failed} failed, {s.errors} errors"
        if s.unchecked:
            outcome += f", {s.unchecked} answered without checks (no expect strings: not counted as passed)"
    lines = [
        f"eval: {outcome}; media tokens (inspector) {s.media_tokens:,}",
        *([] if s.preview else [f"eval: accuracy {accuracy_line(s.accuracy, s.scored, s.unparsed)}"]),
        f"eval: median TTFT {_seconds(s.median_ttft_s)}, median tokens/s "
        + (f"{s.median_tokens_per_s:.1f}" if s.median_tokens_per_s is not None else "—"),
        f"eval: results {run.results_path} · report {run.report_path}",
    ]
    if s.earlier:
        lines.append(f"eval: {s.earlier} of these result(s) come from earlier runs into {run.results_path.parent}")
    for change in run.changes:
        if change.kept:
            lines.append(f"eval: kept the earlier answer of {change.key} (line {change.line}, {change.before}); this "
                         f"run's error did not replace it (--replace-answers to replace it): {change.error}")
        else:
            lines.append(f"eval: replaced the earlier result of {change.key} (line {change.line}): "
                         f"{change.before} → {change.after}")
    if run.kept_elsewhere:
        lines.append(f"eval: {run.kept_elsewhere} result(s) of ids no longer in the set are kept at the end of "
                     f"{run.results_path.name}")
    if run.unreadable:
        lines.append(f"eval: {run.unreadable} line(s) of the earlier {run.results_path.name} could not be read; "
                     "their items ran again")
    if run.record is not None:
        lines.append(f"eval: run {run.record.run}: its settings are in {run.results_path.parent / 'run.json'}")
    return lines


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While the run lasts, file descriptor 1 is stderr's: vLLM's log lines (this process's and those of the
    engine processes it starts, which inherit the descriptor) reach the terminal on stderr, and stdout gets
    only the summary printed after it."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def batch_settings(ns: argparse.Namespace, argv: Sequence[str], profile: Profile) -> BatchSettings:
    """The run's settings from the parsed command line (``build_parser``)."""
    from dots3_demo.workbench.eval_results import BatchSettings

    return BatchSettings(set_path=Path(ns.set), out_dir=Path(ns.out), profile=profile, seq=ns.seq,
                         output_reserve=ns.output_reserve, audio_cap=ns.audio_cap, k_mode=ns.k_mode,
                         inspect_workers=ns.inspect_workers, max_concurrency=ns.max_concurrency,
                         replace_answers=ns.replace_answers, argv=tuple(argv))


def main_eval(argv: Sequence[str]) -> int:
    """``python app.py eval``; returns the exit status."""
    argv = list(argv)
    ns = build_parser(argv).parse_args(argv)

    from dots3_demo.profiles import ProfileError, load_profile
    from dots3_demo.workbench.batch import Progress
    from dots3_demo.workbench.eval_results import EXIT_ITEM_ERROR

    sweep = None
    if ns.sweep is not None:
        from dots3_demo.workbench.sweep import SweepProblem, parse_sweep

        try:
            sweep = parse_sweep(ns.sweep)
        except SweepProblem as exc:
            print(f"eval: --sweep: {exc}", file=sys.stderr)
            return EXIT_ITEM_ERROR
    try:
        profile = load_profile(ns.model)
    except ProfileError as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return EXIT_ITEM_ERROR
    set_path = Path(ns.set)
    if not set_path.is_file():
        print(f"eval: {set_path} is not a file", file=sys.stderr)
        return EXIT_ITEM_ERROR
    settings = batch_settings(ns, argv, profile)
    progress = Progress(sys.stderr)
    if sweep is not None:
        return _main_sweep(ns, sweep, settings, progress)
    from dots3_demo.workbench.batch import evaluate

    run = _with_engine(ns, settings, progress,
                       f"the items that finished are in {settings.out_dir / 'results.jsonl'} (and report.html); the "
                       "requests in flight were aborted; rerun the same command to run the rest",
                       lambda engine: evaluate(settings, engine, progress))
    if isinstance(run, int):
        return run
    for line in summary_lines(run):
        print(line, flush=True)
    return run.summary.exit_status


def sweep_lines(sweep: SweepRun) -> list[str]:
    """What the terminal says at the end of a sweep: a line per value (``workbench.sweep.table_lines``) and where
    the report is."""
    from dots3_demo.workbench.sweep import table_lines

    report = sweep.report
    clustered = f", clustered by {report.cluster}" if report.cluster else ""
    what = ("preview: the plans only, nothing answered" if report.preview
            else f"accuracy over the items scored, 95% interval{clustered}")
    return [
        f"eval: sweep of {report.name} over {len(report.rows)} value(s) ({what}); {sweep.plans_made} media plan(s) "
        f"made, {sweep.plans_reused} reused",
        *(f"eval: {line}" for line in table_lines(report)),
        f"eval: each value's run is in {sweep.json_path.parent}/{report.name}=VALUE/ · sweep report {sweep.json_path} "
        f"· {sweep.html_path}",
    ]


def _main_sweep(ns: Any, sweep: Sweep, settings: BatchSettings, progress: Progress) -> int:
    """``app.py eval --sweep``: every value's run on one engine, then the sweep's report; returns the exit status (the
    worst of the values')."""
    from dots3_demo.workbench.sweep import run_sweep

    done = _with_engine(ns, settings, progress,
                        f"the values that finished, and the items that finished of the one under way, are in "
                        f"{settings.out_dir}/{sweep.name}=VALUE/; rerun the same command to run the rest and write the "
                        "sweep report", lambda engine: run_sweep(sweep, settings, engine, progress))
    if isinstance(done, int):
        return done
    for forced, run in zip(sweep.values, done.runs, strict=True):
        for line in summary_lines(run):
            print(f"eval: {sweep.folder(forced)}: {line.removeprefix('eval: ')}", file=sys.stderr)
    for line in sweep_lines(done):
        print(line, flush=True)
    return done.exit_status
