"""``python app.py eval-export DIR --inspect LOG.eval [--model DIR]``: a run folder as inspect-ai's eval log.

DIR is an ``app.py eval`` output folder (its ``results.jsonl`` and ``run.json``); the log is
``workbench.inspect_log``'s, written with ``inspect_ai.log.write_eval_log``. inspect-ai is optional: without it the
command says so in one line and exits 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

DESCRIPTION = (
    "A run as inspect-ai's eval log, for `inspect view`: DIR is an `app.py eval` --out folder. One sample per item "
    "(its key as the id): the system prompt and user turn as sent, the frames the model saw as image content (each "
    "media file inspected again under the budget the item ran with, with --model's geometry), the answer (reasoning "
    "and tool calls) as the output with the engine's token counts, the item's error; its tags and metadata fields "
    "as sample metadata; its score as an inspect Score (value, explanation = the reason, answer = what was read "
    "from the reply) and per scorer the accuracy with its standard error; the model and engine of the last run in "
    "run.json. Written with inspect_ai.log.write_eval_log (.eval, or .json by the file's suffix). Needs inspect-ai "
    "(pip install inspect-ai; not a requirement of the studio). Exit status: 0 written, 2 no results.jsonl in DIR, "
    "a log name that is neither .eval nor .json, or inspect-ai not installed."
)


def build_parser() -> FlexibleArgumentParser:
    from dots3_demo.cli.parser import new_parser

    parser = new_parser(prog="app.py eval-export", description=DESCRIPTION)
    parser.add_argument("run", metavar="DIR", help="an `app.py eval` --out folder")
    parser.add_argument("--inspect", metavar="LOG.eval", required=True,
                        help="the inspect-ai log to write (.eval, inspect's own format, or .json); open it with "
                        "`inspect view --log-dir` its folder")
    parser.add_argument("--model", metavar="DIR", default=None,
                        help="the checkpoint or profile folder the run planned with, for drawing the frames again "
                        "(default: the bundled preview profile, as app.py eval)")
    return parser


def main_eval_export(argv: Sequence[str]) -> int:
    """``python app.py eval-export``; returns the exit status."""
    ns = build_parser().parse_args(list(argv))
    from dots3_demo.profiles import ProfileError, load_profile
    from dots3_demo.workbench.eval_results import RESULTS_NAME
    from dots3_demo.workbench.inspect_log import FORMATS, InspectMissing, export_inspect_log

    results = Path(ns.run) / RESULTS_NAME
    if not results.is_file():
        print(f"eval-export: {results} is not a file (give an `app.py eval` --out folder)", file=sys.stderr)
        return 2
    log = Path(ns.inspect)
    if log.suffix not in FORMATS:
        print(f"eval-export: {log} must end in .eval (inspect's own format) or .json", file=sys.stderr)
        return 2
    try:
        profile = load_profile(ns.model)
    except ProfileError as exc:
        print(f"eval-export: {exc}", file=sys.stderr)
        return 2
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        exported = export_inspect_log(Path(ns.run), log, profile)
    except InspectMissing as exc:
        print(f"eval-export: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"eval-export: {exc.strerror or exc}: {exc.filename or log}", file=sys.stderr)
        return 2
    for note in exported.notes:
        print(f"eval-export: {note}", file=sys.stderr)
    print(f"eval-export: wrote {log}: {exported.samples} samples ({exported.scored} scored, {exported.images} "
          f"images); open it with: inspect view --log-dir {log.parent}")
    return 0
